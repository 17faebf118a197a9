"""Methods: each folder holds everything one method adds to the core — its algorithm(s), experience source, rollout
hooks, data tools and CLI subcommands — and plugs in from outside, as a user's plug-in does: its algorithms and health
checks are entry points of turnrl's own ``pyproject.toml`` (groups ``turnrl.algorithms`` and ``turnrl.monitors``, read
by :mod:`turnrl.rl.algorithms` and :mod:`turnrl.rl.run.monitors`), its subcommands are entry points too (group ``turnrl.commands``, read by
the CLI, which stands above the methods). Nothing in :mod:`turnrl.rl` names a method.

* :mod:`turnrl.methods.pag` — PAG, the policy as its own generative verifier (docs/algorithms.md §7);
* :mod:`turnrl.methods.swirl` — SWiRL, step-wise RL on multi-step tool use (§1, §10);
* :mod:`turnrl.methods.dqo` — DQO, offline soft-Q learning (§2);
* :mod:`turnrl.methods.offline` — the offline baselines on stored data: SFT, RFT, DPO (§9);
* :mod:`turnrl.methods.prm` — PRM for code: process labels and the process reward model (§8).
"""
