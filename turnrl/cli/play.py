"""``turnrl play``: play an environment yourself, a turn at a time, from a terminal or from a pipe.

What the environment and the agent wrote is printed as text, never read as rich markup (a ``[dim]`` in a message or
a tool result stays as written); turnrl's own labels are styled on a terminal and plain text in a pipe. Read from a
pipe, each turn is echoed after its prompt, so the transcript shows what was played.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from turnrl.cli.shared import (
    ImportOption,
    KwOption,
    console,
    fail,
    make_env,
    parse_kwargs,
)


def _say(label: str, style: str, text: str = "") -> None:
    """``label`` in ``style`` (on a terminal), then ``text`` as written, on one line."""
    console.print(label, style=style, end=" " if text else "\n", markup=False, highlight=False, soft_wrap=True)
    if text:
        console.print(text, markup=False, highlight=False, soft_wrap=True)


def _read_turn() -> str | None:
    """One agent turn from stdin: lines until one that does not end with a backslash; None at the end or on :q."""
    echo = not sys.stdin.isatty()  # a pipe: nothing shows the typed line, so the transcript repeats it
    lines: list[str] = []
    while True:
        prompt = "assistant> " if not lines else "        ... "
        try:
            line = input("" if echo else prompt)
        except EOFError:
            return "\n".join(lines) if lines else None
        if echo:
            console.print(prompt + line, markup=False, highlight=False, soft_wrap=True)
        if not lines and line.strip() in (":q", ":quit"):
            return None
        if line.endswith("\\"):
            lines.append(line[:-1])
            continue
        lines.append(line)
        return "\n".join(lines)


def _show_messages(messages: Any) -> None:
    for m in messages:
        who = m.role if m.name is None else f"{m.role}:{m.name}"
        _say(f"[{who}]", "bold magenta", m.content)


def play(
    env_id: Annotated[str, typer.Argument(help="e.g. turnrl/Arithmetic-v0, or mymodule:myproject/Name-v0")],
    kw: KwOption = None,
    seed: int = 0,
    index: Annotated[int | None, typer.Option(help="task index (default: drawn from the seed)")] = None,
    imports: ImportOption = None,
) -> None:
    """Play an environment yourself: type the agent's turns (end a line with \\ to continue it; :q quits)."""
    env = make_env(env_id, parse_kwargs(kw))
    try:
        obs, info = env.reset(seed=seed, options={"index": index} if index is not None else None)
    except ValueError as e:  # e.g. an index past the last task
        fail(str(e))
    _say(f"task {info.get('task_id')} — type ':oracle' for the oracle's answer, ':q' to quit", "dim")
    _show_messages(obs)
    total = 0.0
    while True:
        text = _read_turn()
        if text is None:
            _say("bye", "dim")
            return
        if text.strip() == ":oracle":
            text = env.oracle_action() or ""
            _say("(oracle)", "dim", text)
        obs, reward, terminated, truncated, info = env.step(text)
        total += reward
        _show_messages(obs)
        shown = {k: v for k, v in info.items() if v not in (None, [], {})}
        _say(f"reward {reward:g}", "green", f"(total {total:g})  info {shown}")
        if terminated or truncated:
            _say("episode over:", "bold", f"terminated={terminated} truncated={truncated}")
            return
