"""``turnrl play``: play an environment yourself, a turn at a time, from a terminal or from a pipe.

What the environment and the agent wrote is printed as text, never read as rich markup (a ``[dim]`` in a message or
a tool result stays as written); turnrl's own labels are styled on a terminal and plain text in a pipe. Read from a
pipe, each turn is echoed after its prompt, so the transcript shows what was played.

Its namesake :mod:`turnrl.rollout.play` is another concept: the function that plays a batch of jobs with a policy
(``cli/`` names each module after its command).
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
    parse_opponent,
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
    env_id: Annotated[
        str, typer.Argument(help="e.g. turnrl/Arithmetic-v0, turnrl/TicTacToe-v0, or mymodule:myproject/Name-v0")
    ],
    kw: KwOption = None,
    seed: int = 0,
    index: Annotated[int | None, typer.Option(help="task index (default: drawn from the seed)")] = None,
    seat: Annotated[
        str | None, typer.Option(help="a game with several agents: the seat you play (default: the first)")
    ] = None,
    opponent: Annotated[
        str,
        typer.Option(
            parser=parse_opponent,
            help="a game with several agents: who plays the other seats — random or "
            "perfect (tic-tac-toe), script:MODULE:FUNCTION (any game), or an agent "
            "spec such as run:OUT_DIR or smollm2-135m-instruct",
        ),
    ] = "random",
    max_new_tokens: Annotated[int, typer.Option(help="the most tokens of an opponent's move")] = 64,
    imports: ImportOption = None,
) -> None:
    """Play an environment yourself: type the agent's turns (end a line with \\ to continue it; :q quits). In a game
    with several agents you take one seat and --opponent the others."""
    from turnrl.envs.multiagent.registry import is_multi_agent

    if is_multi_agent(env_id):
        _play_game(env_id, parse_kwargs(kw), seed, index, seat, opponent, max_new_tokens)
        return
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


def _play_game(
    env_id: str,
    kwargs: dict[str, Any],
    seed: int,
    index: int | None,
    seat: str | None,
    opponent: str,
    max_new_tokens: int,
) -> None:
    """A person in ``seat`` of a multi-agent game, ``opponent`` in the others (greedy, each from its own view)."""
    from turnrl.agents.base import SamplingParams
    from turnrl.envs.multiagent import make_multi_agent
    from turnrl.rollout.opponents import Opponent, check_opponent, make_opponent
    from turnrl.tokens import ChatRenderer
    from turnrl.types import Message

    try:
        env = make_multi_agent(env_id, **kwargs)
    except (ValueError, ImportError) as e:
        fail(str(e))
    seats = list(env.possible_agents)
    mine = seat or seats[0]
    if mine not in seats:
        fail(f"{env_id} has no seat {mine!r}; its seats: {', '.join(seats)}")
    try:
        check_opponent(opponent, env_id)
        if Opponent(opponent).is_scripted:
            from turnrl.agents.tiny import tiny_tokenizer

            other = make_opponent(opponent, tiny_tokenizer("chatml"), seed)  # scripted: any tokenizer reads the text
        else:
            other = make_opponent(opponent, None, seed)
    except (ValueError, OSError, ImportError) as e:  # an agent spec that does not load
        fail(f"--opponent {opponent}: {e}")
    if other.tokenizer is None:
        fail(
            f"--opponent {opponent}: an endpoint without a tokenizer cannot read its seat's view; play against a "
            "model by name or path, or run:OUT_DIR"
        )
    renderer = ChatRenderer(other.tokenizer)
    views: dict[str, list[Message]] = {s: [] for s in seats}
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    try:
        env.reset(seed=seed, options={"index": index} if index is not None else None)
    except ValueError as e:
        fail(str(e))
    _say(f"{env_id}: you play {mine}, {opponent} plays {', '.join(s for s in seats if s != mine)} — ':q' quits", "dim")
    for agent in env.agent_iter():
        observation, _, termination, truncation, info = env.last()
        views[agent].extend(observation)
        if agent == mine:
            _show_messages(observation)
        if termination or truncation:
            if agent == mine:
                _say(
                    "game over:",
                    "bold",
                    f"{info.get('outcome') or ('truncated' if truncation else 'ended')} "
                    f"(your reward {env._cumulative_rewards.get(agent, 0.0):g}, invalid moves "
                    f"{info.get('invalid_moves', 0)})",
                )
            env.step(None)
            continue
        if agent == mine:
            text = _read_turn()
            if text is None:
                _say("bye", "dim")
                return
        else:
            text = other.generate([renderer.prompt_tokens(views[agent])], params)[0].text
            _say(f"[{agent}: {opponent}]", "bold cyan", text)
        views[agent].append(Message(role="assistant", content=text))
        env.step(text)
