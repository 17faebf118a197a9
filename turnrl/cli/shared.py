"""What the ``turnrl`` commands share — the one-line error, the console, the ``--kw``/``--import``/``--tokenizer``
options, making an environment or a dataset run with clear errors — so that the methods' subcommands
(``turnrl/methods/*/cli.py``) are written like the core's."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from rich.console import Console

from turnrl.envs.registry import (
    EnvImportError,
    InvalidEnvKwargs,
    UnknownEnvironmentError,
    error_location,
    import_env_module,
    make,
    resolve,
)
from turnrl.envs.remote.protocol import RemoteEnvError

console = Console()


KwOption = Annotated[
    list[str] | None,
    typer.Option("--kw", "-k", help="Environment keyword argument KEY=VALUE (VALUE read as YAML); repeatable."),
]


def fail(message: str) -> NoReturn:
    """Print ``error: MESSAGE`` on one line and exit with status 2 (bad input, nothing was run)."""
    console.print("[red]error:[/red] ", end="")
    console.print(" ".join(message.split()), soft_wrap=True, markup=False, highlight=False)
    raise typer.Exit(2)


def _import_modules(modules: list[str] | None) -> list[str] | None:
    for name in modules or []:
        try:
            import_env_module(name, [Path.cwd()])
        except EnvImportError as e:
            fail(str(e))
    return modules


ImportOption = Annotated[
    list[str] | None,
    typer.Option(
        "--import",
        metavar="MODULE",
        callback=_import_modules,
        is_eager=True,
        help="Import MODULE first (from sys.path or the current folder), e.g. one that registers "
        "environments; repeatable.",
    ),
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


def check_game_id(config: str, env_id: str, search: list[Path]) -> None:
    """A game's adapter checks its id before anything loads (e.g. a ``pettingzoo:`` module, from the config's folder
    or the current one); a refusal is the one-line ``error:`` (exit 2) naming the config."""
    from turnrl.envs.registry import UnknownEnvironmentError, adapter_of

    try:
        adapter = adapter_of(env_id)
        if adapter is not None and adapter.multi_agent:
            adapter.check(env_id, search)
    except (ValueError, ImportError, UnknownEnvironmentError) as e:
        fail(f"{config}: {e}")


def make_env(env_id: str, kwargs: dict[str, Any], search: list[Path] | None = None) -> Any:
    """The environment, or the one-line ``error:`` (exit 2) saying what to change."""
    try:
        resolve(env_id, search if search is not None else [Path.cwd()])
        return make(env_id, **kwargs)
    except (
        UnknownEnvironmentError,
        InvalidEnvKwargs,
        EnvImportError,
        FileNotFoundError,
        ValueError,
        TypeError,
        RemoteEnvError,
    ) as e:
        fail(str(e))
    except Exception as e:  # the environment's own constructor failed: say where, in one line
        fail(f"making {env_id} raised {type(e).__name__}: {e}{error_location(e)}")


def parse_opponent(text: str) -> Any:
    """``--opponent`` read once, as a config's ``multi_agent.opponent`` is (:class:`~turnrl.rollout.opponents.Opponent`:
    a misspelt keyword, backend or ``script:`` form is the option's error, before anything loads)."""
    from turnrl.rollout.opponents import Opponent

    return Opponent(text)


def say(text: str) -> None:
    console.print(text, soft_wrap=True, markup=False, highlight=False)


def check_dataset_out(out: str) -> None:
    """A dataset path must name its format."""
    if not out.endswith((".parquet", ".jsonl")):
        fail(f"--out must end in .parquet or .jsonl, got {out!r}")


def dataset_run(
    env: str,
    env_kwargs: dict[str, Any],
    out: str,
    agent: str,
    batch_size: int,
    tokenizer: str | None,
    tasks: int,
    items: str,
    special: Callable[[Any], Any] | None = None,
) -> tuple[Any, Any, int]:
    """What `turnrl rollout` and `turnrl swirl generate` check before sampling: the environment (made first, to fail
    before a model loads), a warning when its ``items`` are held-out ones, the --out format, then the agent.
    ``special(env)``, where given, builds an agent of the caller's own (e.g. a teacher) instead of ``agent``'s spec,
    or returns None. Returns ``(env, agent, how many of the first ``tasks`` tasks exist)``."""
    from turnrl.agents import make_agent

    probe = make_env(env, env_kwargs)
    split, held = getattr(probe, "split", None), getattr(probe, "held_out_split", None)
    if split is not None and split == held:
        say(
            f"warning: these are {env}'s held-out ({split}) {items}; a policy trained on them is then evaluated on "
            "what it trained on (pass --kw split=train)"
        )
    check_dataset_out(out)
    try:
        the_agent = special(probe) if special is not None else None
        if the_agent is None:
            the_agent = make_agent(agent, batch_size=batch_size, tokenizer=tokenizer)
    except (ValueError, OSError, ImportError) as e:
        fail(str(e))
    return probe, the_agent, min(tasks, len(probe)) if hasattr(probe, "__len__") else tasks


DataTokenizerOption = Annotated[
    str,
    typer.Option(
        "--tokenizer",
        help="the tokenizer of the model that wrote the data: a model name or path, hf:PATH, tiny:TEMPLATE",
    ),
]


def _with_import_option(fn: Any) -> Any:
    """``fn`` with the ``--import`` option appended, for commands defined without it (e.g. in other modules)."""
    signature = inspect.signature(fn, eval_str=True)
    if any(p.annotation is ImportOption for p in signature.parameters.values()):
        return fn

    @functools.wraps(fn)
    def command(*args: Any, imports: list[str] | None = None, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)  # the modules were imported by the option's callback

    extra = inspect.Parameter("imports", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ImportOption)
    widened = signature.replace(parameters=[*signature.parameters.values(), extra])
    command.__signature__ = widened  # type: ignore[attr-defined]  # what inspect (and so typer) reads
    command.__annotations__ = {p.name: p.annotation for p in widened.parameters.values()}
    return command


def add_import_option(*apps: typer.Typer) -> None:
    """Give every command of ``apps`` the ``--import`` option (for commands defined without it)."""
    for app in apps:
        for info in app.registered_commands:
            info.callback = _with_import_option(info.callback)
