"""The ``turnrl`` command: list, check and play environments; the quickstart demo."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from turnrl.envs.registry import InvalidEnvKwargs, UnknownEnvironmentError, make, registered

app = typer.Typer(help="turnrl: RL for multi-turn LLM agents.", no_args_is_help=True, add_completion=False)
envs_app = typer.Typer(help="Environments: list and check them.", no_args_is_help=True)
app.add_typer(envs_app, name="envs")
console = Console()

KwOption = Annotated[
    list[str] | None,
    typer.Option("--kw", "-k", help="Environment keyword argument KEY=VALUE (VALUE read as YAML); repeatable."),
]


def parse_kwargs(pairs: list[str] | None) -> dict[str, Any]:
    """``["max_turns=3", "calculator=true"]`` → ``{"max_turns": 3, "calculator": True}``."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
    return out


def _make(env_id: str, kwargs: dict[str, Any]) -> Any:
    try:
        return make(env_id, **kwargs)
    except (UnknownEnvironmentError, InvalidEnvKwargs, FileNotFoundError, ValueError, TypeError) as e:
        console.print("[red]error:[/red] ", end="")
        console.print(str(e), soft_wrap=True, markup=False, highlight=False)
        raise typer.Exit(2) from e


def _summary(env_id: str) -> str:
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    entry = gym.spec(env_id).entry_point
    obj = load_env_creator(entry) if isinstance(entry, str) else entry
    doc = (obj.__doc__ or "").strip().splitlines()
    return doc[0].replace(f"``{env_id}``: ", "") if doc else ""


@envs_app.command("list")
def envs_list() -> None:
    """List the registered environments."""
    table = Table(title="turnrl environments")
    table.add_column("id", style="bold cyan")
    table.add_column("description")
    for env_id in registered():
        table.add_row(env_id, _summary(env_id))
    console.print(table)


@envs_app.command("check")
def envs_check(
    env_id: Annotated[str, typer.Argument(help="e.g. turnrl/GSM8K-v0")],
    kw: KwOption = None,
    seed: int = 0,
) -> None:
    """Run the conformance harness on one environment; exit 1 if it fails."""
    from turnrl.envs.testing import check_environment

    report = check_environment(_make(env_id, parse_kwargs(kw)), seed=seed)
    console.print(str(report), markup=False)
    if not report.ok:
        raise typer.Exit(1)


def _read_turn() -> str | None:
    """One agent turn from stdin: lines until an empty line (or a single line with no continuation)."""
    lines: list[str] = []
    while True:
        try:
            line = input("assistant> " if not lines else "        ... ")
        except EOFError:
            return "\n".join(lines) if lines else None
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
        console.print(f"[bold magenta]\\[{who}][/bold magenta] ", end="")
        console.print(m.content, markup=False, highlight=False)


@app.command()
def play(
    env_id: Annotated[str, typer.Argument(help="e.g. turnrl/Arithmetic-v0")],
    kw: KwOption = None,
    seed: int = 0,
    index: Annotated[int | None, typer.Option(help="task index (default: drawn from the seed)")] = None,
) -> None:
    """Play an environment yourself: type the agent's turns (end a line with \\ to continue it; :q quits)."""
    env = _make(env_id, parse_kwargs(kw))
    obs, info = env.reset(seed=seed, options={"index": index} if index is not None else None)
    console.print(f"[dim]task {info.get('task_id')} — type ':oracle' for the oracle's answer, ':q' to quit[/dim]")
    _show_messages(obs)
    total = 0.0
    while True:
        text = _read_turn()
        if text is None:
            console.print("[dim]bye[/dim]")
            return
        if text.strip() == ":oracle":
            text = env.oracle_action() or ""
            console.print(f"[dim](oracle)[/dim] {text}", markup=False)
        obs, reward, terminated, truncated, info = env.step(text)
        total += reward
        _show_messages(obs)
        shown = {k: v for k, v in info.items() if v not in (None, [], {})}
        console.print(f"[green]reward {reward:g}[/green] (total {total:g})  info {shown}", highlight=False)
        if terminated or truncated:
            console.print(f"[bold]episode over[/bold]: terminated={terminated} truncated={truncated}")
            return


@app.command()
def quickstart() -> None:
    """List the environments and play a few scripted episodes, printing transcripts and rewards."""
    from turnrl.quickstart import run

    envs_list()
    sys.exit(run(console))


def main() -> None:
    """Entry point for ``python -m turnrl``."""
    app()


if __name__ == "__main__":
    main()
