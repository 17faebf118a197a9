"""A preregistered script's commands checked without running them: every ``turnrl`` command line is parsed by the
command line itself (option names, values, arguments), and every ``turnrl train`` also gets the checks `turnrl train`
makes before a model loads — the config and its overrides load and validate, the environments make, the held-out
tasks (and, with ``validate_every``, the validation tasks, and ``extra_evals``) pose no training problem, an agent
program's function imports. Nothing is trained, sampled or written.

    TURNRL="python bench/evidence_check.py" bash bench/evidence_pag.sh /tmp/e77-check   # each command of a script
    python bench/evidence_check.py train configs/quickstart.yaml seed=1 --no-resume     # one command

A script honours ``TURNRL`` (the turnrl it runs; default ``.venv/bin/turnrl``) and writes each command's output to
its log beside OUT (``OUT-NAME.log``): run it on a scratch OUT and read those logs. Exit status 2 and one line where
a check fails, as `turnrl train` would before loading the model. What this cannot check: anything a model, a dataset
that does not exist yet (``data.path``, ``init_from`` written by an earlier command of the script) or training itself
decides; commands other than ``train`` are parsed, not run. The checks mirror ``turnrl.cli.commands.train`` up to its
``Trainer(cfg)`` (keep the two in step; a ``--check`` option of `turnrl train` would replace this file).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

try:
    from typer._click import ClickException  # typer's own click (typer >= 0.29 vendors it)
except ImportError:  # an older typer, on click
    from click import ClickException


def parse(args: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The command path (``["pag", "checks"]``) and the parameters click parses from ``args``, as ``turnrl`` would
    read them. Raises click's usage error where ``turnrl`` would refuse them."""
    from turnrl.cli import app

    command: Any = typer.main.get_command(app)
    ctx = command.make_context("turnrl", list(args))
    path: list[str] = []
    while hasattr(command, "resolve_command"):  # a group: its subcommand, then that one's arguments
        rest = [*(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", None) or []), *ctx.args]
        if not rest:
            raise typer.BadParameter("no command given")
        name, command, rest = command.resolve_command(ctx, rest)
        path.append(name)
        ctx = command.make_context(name, rest, parent=ctx)
    return path, ctx.params


def check_train(config: str, overrides: list[str] | None) -> str:
    """`turnrl train`'s checks before a model loads (``turnrl.cli.commands.train`` up to ``Trainer(cfg)``); what
    the run will read, in one line. Exits 2 with `turnrl train`'s own message where one fails."""
    from turnrl.cli.shared import check_game_id, fail, make_env
    from turnrl.rl.config import config_error
    from turnrl.rl.run.evaluate import run_eval_kwargs
    from turnrl.rl.run.held_out import HeldOutError, check_run
    from turnrl.rl.run.trainer import load_config

    try:
        cfg = load_config(config, overrides)
    except Exception as e:  # as `turnrl train`: a config that does not load or validate, in one line
        fail(config_error(e, config, overrides))
    search = [Path(config).resolve().parent, Path.cwd()]
    check_game_id(config, str(cfg.env.id), search)
    train_env = held_env = None
    if cfg.multi_agent is None:
        train_env = make_env(cfg.env.id, cfg.env.kwargs, search)
        held_env = make_env(cfg.env.id, run_eval_kwargs(train_env, cfg.env.kwargs, cfg.env.eval_kwargs), search)
    held_split = getattr(getattr(held_env, "unwrapped", held_env), "split", None)
    try:
        on_train = check_run(cfg, train_env, held_env)
    except (HeldOutError, ValueError) as e:
        fail(f"{config}: {e}")
    if on_train:
        print(on_train)
    if cfg.program is not None and cfg.program.function is not None:
        from turnrl.gateway.program import ProgramError, load_function

        try:
            load_function(cfg.program.function, search)
        except ProgramError as e:
            fail(f"{config}: program.function: {e}")
    read = (
        f"held-out split {held_split!r}, {cfg.eval_tasks} tasks at step 0"
        + (f" and every {cfg.eval_every} steps" if cfg.eval_every else "")
        + f" and step {cfg.steps}"
    )
    if cfg.validate_every:
        read += f"; validation, {cfg.validation_tasks} tasks every {cfg.validate_every} steps"
    return (
        f"ok: {config} {' '.join(overrides or [])}: {cfg.env.id}, seed {cfg.seed}, {cfg.steps} steps, {read}; "
        f"out_dir {cfg.out_dir}"
    )


def main(argv: list[str]) -> None:
    try:
        path, params = parse(argv)
    except ClickException as e:
        print(f"error: turnrl {' '.join(argv)}: {e.format_message()}")
        sys.exit(2)
    if path == ["train"]:
        try:
            print(check_train(params["config"], params.get("overrides")))
        except typer.Exit as e:  # `fail` printed the one line
            sys.exit(e.exit_code)
    else:
        print(f"parsed, not run (only `turnrl train` has checks before a model loads): turnrl {' '.join(path)}")


if __name__ == "__main__":
    main(sys.argv[1:])
