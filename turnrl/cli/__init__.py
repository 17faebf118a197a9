"""The ``turnrl`` command line, in one room at the top of the house (docs/ARCHITECTURE.md): every command imports
what it runs, and nothing below imports the command line.

* :mod:`~turnrl.cli.commands` — the ``turnrl`` app: ``envs``, ``lora``, ``train``, ``plot``, ``serve``, ``quickstart``,
  and the commands and method subcommands it mounts;
* :mod:`~turnrl.cli.shared` — what the commands share, public for the methods' subcommands: the one-line error
  (:func:`~turnrl.cli.shared.say`), the options, making an environment or a dataset with clear errors;
* :mod:`~turnrl.cli.eval` — ``turnrl eval`` and ``turnrl rollout``;
* :mod:`~turnrl.cli.interrupt` — what a command that plays many episodes does when it is stopped;
* :mod:`~turnrl.cli.play` — ``turnrl play``;
* :mod:`~turnrl.cli.quickstart` — ``turnrl quickstart``, the demo;
* :mod:`~turnrl.cli.template_check` — ``turnrl check-template MODEL``.

``turnrl.cli:app`` is the console script; ``main()`` runs it (``python -m turnrl``).
"""

from turnrl.cli.commands import app, main

__all__ = ["app", "main"]
