"""Opponents by name, for the seats of a multi-agent game that an evaluated or trained policy does not play
(docs/multi-agent.md): ``perfect`` and ``random`` (tic-tac-toe players that need no model,
:func:`turnrl.envs.multiagent.tictactoe.text_player`), ``script:MODULE:FUNCTION`` (a player of any game that needs no
model: ``FUNCTION(text)`` answers the text of its seat's view so far with its move; the module on ``sys.path`` or in
the current folder), or any agent spec (``hf:PATH``, ``run:OUT_DIR``, ``openai:URL#MODEL``, …), loaded frozen.

A run's config reads each opponent it names once, at load, into an :class:`Opponent` (a ``str`` with its
:attr:`~Opponent.kind`: ``self``, ``league``, ``scripted``, ``script`` or ``agent``), which every consumer asks
instead of testing the string against names again; whether a script's module imports or an agent loads is checked
before a model loads (:func:`check_opponent`), not at load: a config is read on machines that may not hold them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from turnrl.agents.spec import AgentSpec, ConfigStr, keyword_typo

if TYPE_CHECKING:
    from turnrl.agents.base import Agent

OpponentKind = Literal["self", "league", "scripted", "script", "agent"]
SCRIPTED = ("perfect", "random")
SCRIPT_PREFIX = "script:"


class Opponent(ConfigStr):
    """An opponent as written (a ``str``: it compares, prints and saves as the user wrote it), with its kind.

    Raises (at load, as a config error):
        ValueError: an empty name, a ``script:`` that is not ``script:MODULE:FUNCTION``, or an agent spec of an
            unknown backend or a malformed target (:class:`~turnrl.agents.spec.AgentSpec`).
    """

    __slots__ = ()

    def __new__(cls, name: str) -> Opponent:
        name = str(name).strip()
        if not name:
            raise ValueError(
                "an opponent needs a name: self, league, random, perfect, script:MODULE:FUNCTION or an "
                "agent spec (hf:PATH, run:OUT_DIR, openai:URL#MODEL)"
            )
        if name.startswith(SCRIPT_PREFIX):
            script_target(name)  # its form, checked here at load (its module is imported before a model loads)
        elif name not in ("self", "league", *SCRIPTED):
            if typo := keyword_typo(name, ("self", "league", *SCRIPTED), "opponent"):
                raise typo
            AgentSpec(name)  # an agent's: its backend and target's form (it loads before a model does)
        return super().__new__(cls, name)

    @property
    def kind(self) -> OpponentKind:
        """Which of the module docstring's kinds this opponent is."""
        if self == "self":
            return "self"
        if self == "league":
            return "league"
        if self in SCRIPTED:
            return "scripted"
        return "script" if self.startswith(SCRIPT_PREFIX) else "agent"

    @property
    def is_policy(self) -> bool:
        """The trained policy itself plays the other seats (``self``, or its past versions in a ``league``)."""
        return self.kind in ("self", "league")

    @property
    def needs_model(self) -> bool:
        """A frozen agent to load (``agent``): scripted and script players need none."""
        return self.kind == "agent"

    @property
    def is_scripted(self) -> bool:
        """A player that needs no model: a built-in one (``perfect``, ``random``) or a ``script:`` function."""
        return self.kind in ("scripted", "script")


def script_target(name: str) -> tuple[str, str]:
    """``(MODULE, FUNCTION)`` of a ``script:MODULE:FUNCTION`` opponent.

    Raises:
        ValueError: ``name`` is not of that form.
    """
    module, sep, fn = name.removeprefix(SCRIPT_PREFIX).partition(":")
    if not name.startswith(SCRIPT_PREFIX) or not module or not sep or not fn or ":" in fn:
        raise ValueError(f"opponent {name!r} is not of the form script:MODULE:FUNCTION (FUNCTION(text) -> move)")
    return module, fn


def script_player(name: str) -> Callable[[str], str]:
    """The function a ``script:MODULE:FUNCTION`` opponent names (its module imported from ``sys.path``, else from
    the current folder).

    Raises:
        ValueError: not of that form, no such module (or it fails to import), or no such function.
    """
    from turnrl.utils import import_from

    module, fn = script_target(name)
    try:
        found = import_from(module, [Path.cwd()])
    except Exception as e:  # the module exists and fails to import: say why, in one line
        raise ValueError(f"opponent {name}: importing {module!r} raised {type(e).__name__}: {e}") from e
    if found is None:
        raise ValueError(f"opponent {name}: no module named {module!r} on sys.path or in {Path.cwd()}")
    player = getattr(found, fn, None)
    if not callable(player):
        raise ValueError(f"opponent {name}: module {module!r} has no function {fn!r}")
    return player


def make_opponent(name: str, tokenizer: Any, seed: int = 0, device: str = "cpu") -> Agent:
    """The opponent ``name`` names: ``perfect`` or ``random`` (tic-tac-toe players), ``script:MODULE:FUNCTION``, else
    an agent spec (its weights on ``device``).

    Raises:
        ValueError: an agent spec that does not load (its message).
    """
    if Opponent(name).is_scripted:
        from turnrl.agents.scripted import ScriptedAgent
        from turnrl.envs.multiagent.tictactoe import text_player

        if tokenizer is None:  # (a script reads text: any tokenizer renders its view)
            from turnrl.agents.tiny import tiny_tokenizer

            tokenizer = tiny_tokenizer("chatml")
        player = script_player(name) if name.startswith(SCRIPT_PREFIX) else text_player(name, seed)  # type: ignore[arg-type]  # it refuses others
        return ScriptedAgent(tokenizer, player)
    from turnrl.agents import make_agent

    agent = make_agent(name, device=device)
    if getattr(agent, "tokenizer", None) is None and tokenizer is not None:  # an endpoint: prompts in the run's
        agent.tokenizer = tokenizer  # template (the seat's view is rendered and read with this tokenizer)
    return agent


def check_opponent(name: str, env_id: str, timeout: float = 5.0) -> None:
    """Fail now, before any model loads, where an opponent cannot play ``env_id``: a tic-tac-toe player on another
    game, a ``script:`` player that is not found, a model name that is no built-in, path or cached hub id, an
    ``openai:URL#MODEL`` endpoint that does not answer ``GET URL/models`` (or refuses it), a ``run:OUT_DIR`` that is
    no run folder.

    Raises:
        ValueError: the opponent cannot play, and why (with its address or path).
    """
    kind = Opponent(name).kind
    if kind == "script":
        script_player(name)
        return
    if kind == "scripted":
        if env_id != "turnrl/TicTacToe-v0":
            raise ValueError(
                f"opponent {name!r} is a tic-tac-toe player and {env_id} is another game: name self or an agent spec"
            )
        return
    backend, sep, rest = name.partition(":")
    if not sep or backend == "hf":
        from turnrl.agents.models import resolve_model_path

        try:
            resolve_model_path(rest if sep else name)
        except OSError as e:
            raise ValueError(f"opponent {name}: {e}") from None
    elif backend == "openai":
        import httpx

        url = rest.partition("#")[0].rstrip("/")
        try:
            answer = httpx.get(f"{url}/models", timeout=timeout)
        except httpx.HTTPError as e:
            raise ValueError(
                f"opponent {name}: the endpoint {url} does not answer ({type(e).__name__}: {e}); start "
                "it, or name another opponent"
            ) from None
        if answer.status_code in (401, 403) or answer.status_code >= 500:
            raise ValueError(f"opponent {name}: the endpoint {url} answers {answer.status_code} to GET /models")
    elif backend == "run":
        from pathlib import Path

        if not (Path(rest.partition("#")[0]) / "config.yaml").is_file():
            raise ValueError(
                f"opponent {name}: {rest} is not a run folder (no config.yaml); give the OUT_DIR of a turnrl train run"
            )
