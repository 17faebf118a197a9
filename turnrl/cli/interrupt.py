"""What a command that plays many episodes does when it is stopped: Ctrl-C or SIGTERM interrupts it alike
(:func:`interruptible`), it writes what finished, says how many of how many, and prints the exact command that finishes
the rest (:func:`resume_command`); for a dataset (``turnrl rollout``, ``turnrl swirl generate``) what it kept is
counted from the file and its partial file (:func:`written_episodes`, :func:`dataset_interrupted`), and a folder that
holds an interrupted evaluation says so (:func:`interrupted_evaluation`). The commands themselves are in
:mod:`turnrl.cli.eval` and the methods' subcommands."""

from __future__ import annotations

import json
import shlex
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from turnrl.cli.shared import say


@contextmanager
def interruptible() -> Iterator[dict[str, Any]]:
    """SIGTERM raises ``KeyboardInterrupt`` as Ctrl-C does, inside the block; yields ``{"code": exit status}``, 130
    (SIGINT) or 143 (SIGTERM) by the last signal."""
    state: dict[str, Any] = {"code": 130}
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield state
        return

    def on_term(signum: int, frame: Any) -> None:
        state["code"] = 128 + signum
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield state
    finally:
        signal.signal(signal.SIGTERM, old)


def resume_command(ctx: typer.Context, flag: str | None = None) -> str:
    """The command line that ran ``ctx``'s command (the options given on it, as parsed), with ``flag`` added."""
    names: list[str] = []
    c: Any = ctx  # click's contexts, up to the program's
    while c.parent is not None:  # the subcommands' names, not the program's (`python -m turnrl` or a path)
        names.insert(0, c.info_name or "")
        c = c.parent
    words = ["turnrl", *names]
    params: list[Any] = ctx.command.params  # click's Options and Arguments
    for p in params:
        source = ctx.get_parameter_source(p.name) if p.name else None
        value = ctx.params.get(p.name) if p.name else None
        if getattr(source, "name", None) not in ("COMMANDLINE", "ENVIRONMENT") or value is None:
            continue
        if getattr(p, "param_type_name", None) != "option":
            words += [str(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
        elif p.is_flag and isinstance(value, bool):
            words += [p.opts[0]] if value else p.secondary_opts[:1]
        else:
            words += [w for v in (value if p.multiple else [value]) for w in (p.opts[0], str(v))]
    if flag is not None and flag not in words:
        words.append(flag)
    return shlex.join(words)


def written_episodes(out: str) -> int:
    """Distinct (task, sample) episodes a dataset run has kept in ``out`` and its partial file."""
    from turnrl.rl.sources.collect import _read_partial
    from turnrl.storage import load

    path = Path(out)
    trajs = (load(path) if path.is_file() else []) + _read_partial(path.with_name(path.name + ".partial.jsonl"))
    return len({(t.metadata.get("task_index"), t.metadata.get("sample")) for t in trajs})


def dataset_interrupted(ctx: typer.Context, out: str, total: int, code: int) -> typer.Exit:
    """Say what an interrupted dataset run (`turnrl rollout`, `turnrl swirl generate`) kept and how to finish it."""
    say(
        f"interrupted: {min(written_episodes(out), total)} of {total} episodes are written ({out} and "
        f"{out}.partial.jsonl); a rerun keeps every task whose episodes all finished and samples the rest"
    )
    say(f"to finish: {resume_command(ctx)}")
    return typer.Exit(code)


def interrupted_evaluation(out: str) -> str | None:
    """``"N of M episodes"`` where ``out`` holds an interrupted evaluation, else None."""
    try:
        m = json.loads((Path(out) / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    return f"{m.get('episodes')} of {m.get('episodes_planned')} episodes" if m.get("interrupted") else None
