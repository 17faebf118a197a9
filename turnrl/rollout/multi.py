"""Token-exact rollouts of environments with several agents (docs/multi-agent.md): each seat's view is a
:class:`~turnrl.types.Trajectory` of its own.

``MultiAgentRollout(policies, params).run(envs)`` plays one episode of each
:class:`~turnrl.envs.multiagent.MultiAgentTextEnv`. A seat's tokens are only ever appended to, from its own
messages: the chat-template tokens of the messages told to it (loss mask 0) and the tokens its policy sampled
(loss mask 1, with their log-probabilities) — what other seats wrote reaches it only as the environment tells it.
Every round, the seats whose turn it is are batched by policy: one ``generate`` call per policy, each prompt the
seat's whole sequence so far.

Credit: a seat's move is rewarded with what it collects until its next move (PettingZoo's rewards accumulated for it
in between), placed on the move's last token; at the end each seat's last move gets what the game paid at its dead
step; when the rollout cuts a game (``max_moves``, ``max_context``), every seat still in play collects what the game
paid it since it last read its rewards. ``group_id`` is ``"{episode group}/{seat}"``, so GRPO-style groups are formed
per seat and per starting state.

Bad input is an answer: an environment that raises, or a frozen policy whose ``generate`` raises (an endpoint that
went away; a trained policy's failure is raised), ends the episodes concerned (``Trajectory.error`` on every seat's
view, naming the policy; nothing else lost); a seat whose context would pass ``max_context`` ends the episode
truncated.

Its namesake :mod:`turnrl.rl.sources.multi` is the same concept a layer up: the experience source that plays these
rollouts for training.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from turnrl.agents.base import Agent, Completion, SamplingParams, capabilities_of, end_of_turn_ids
from turnrl.envs.multiagent.core import MultiAgentTextEnv
from turnrl.rollout.episode import ended_with_eos, token_crc
from turnrl.tokens import ChatRenderer
from turnrl.types import Message, Trajectory, Turn


@dataclass
class SeatView:
    """One seat's view of an episode in play: its token sequence and its turns."""

    seat: str
    policy: str
    renderer: ChatRenderer
    eos_ids: set[int]
    max_context: int = 4096  # the most tokens its sequence may hold (the rollout's max_context)
    prompt: list[Message] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    sampled_crc: int = 0
    versions: list[int] = field(default_factory=list)  # per token: the policy version that sampled it (-1: none)
    versioned: bool = False  # whether the seat's policy records versions (a trained one)
    outcome: str | None = None  # the game's word for how it ended for this seat (its last info's "outcome")
    invalid: int = 0  # invalid moves the game counted
    truncated: bool = False  # the episode was cut (a turn limit, max_moves or max_context) before the game ended
    collected: float = 0.0  # every reward the game paid this seat (also what came before its first move, or
    # without any move of its own: a seat can win by its opponent's forfeit)
    scores: dict[str, Any] = field(default_factory=dict)  # the game's item scores in this seat's infos at the end

    def hear(self, messages: Sequence[Message]) -> bool:
        """Append the messages told to this seat since it last acted (the opening prompt before its first move).
        Returns False, appending nothing, when they would leave no room under ``max_context`` to generate."""
        if not self.turns:
            self.prompt.extend(messages)
            return True
        if not messages:
            return True
        last = self.turns[-1]
        ids = self.renderer.observation_tokens(list(messages), ended_with_eos=self._last_ended_with_eos())
        if len(self.tokens) + len(ids) >= self.max_context:
            return False
        last.observation.extend(messages)
        last.obs_span = (len(self.tokens), len(self.tokens) + len(ids))
        self._extend(ids, 0, [0.0] * len(ids))
        return True

    def request(self) -> list[int] | None:
        """The token prompt of this seat's next move: everything it has seen and said, then a generation prompt;
        None, appending nothing, when that leaves no room under ``max_context`` to generate."""
        if not self.tokens:
            ids = self.renderer.prompt_tokens(self.prompt)
            if len(ids) >= self.max_context:
                return None
            self._extend(ids, 0, None)
        elif self.turns and self.turns[-1].obs_span is None:  # nothing told since its last move: a bare new turn
            ids = self.renderer.observation_tokens([], ended_with_eos=self._last_ended_with_eos())
            if len(self.tokens) + len(ids) >= self.max_context:
                return None
            self.turns[-1].obs_span = (len(self.tokens), len(self.tokens) + len(ids))
            self._extend(ids, 0, None)
        return list(self.tokens)

    def room(self, max_new_tokens: int) -> int:
        """The token budget of this seat's next move: ``max_new_tokens``, or less where ``max_context`` ends first."""
        return min(max_new_tokens, self.max_context - len(self.tokens))

    def act(self, completion: Completion, version: int | None = None) -> Turn:
        """Append the tokens the seat's policy sampled, as a new turn (``version``: the policy's version that
        sampled them, recorded per token)."""
        start = len(self.tokens)
        self._extend(list(completion.token_ids), 1, list(completion.logprobs), -1 if version is None else version)
        self.versioned = self.versioned or version is not None
        self.sampled_crc = token_crc(completion.token_ids, self.sampled_crc)
        turn = Turn(
            index=len(self.turns),
            role=self.seat,
            action=Message(role="assistant", content=completion.text),
            token_span=(start, len(self.tokens)),
        )
        self.turns.append(turn)
        return turn

    def _last_ended_with_eos(self) -> bool:
        return bool(self.turns) and ended_with_eos(self.tokens, self.turns[-1].token_span, self.eos_ids)

    def _extend(self, ids: list[int], mask: int, logprobs: list[float] | None, version: int = -1) -> None:
        self.tokens.extend(ids)
        self.mask.extend([mask] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        self.versions.extend([version] * len(ids))


class MultiAgentRollout:
    """Play multi-agent episodes with a policy per seat (see the module docstring).

    Args:
        policies: the agents by policy name (one for a shared policy, or one per seat).
        params: sampling parameters of every move (``n`` must be 1).
        seats: each seat's policy name; default: a seat plays the policy of its own name, or the only policy.
        max_context: the most tokens one seat's whole sequence may hold, as in the single-agent rollout: a move's
            generation budget shrinks to fit, and a message or a move that leaves no room to generate ends the
            episode, truncated (a seat whose game is over does not append what it is told last when it does not fit).
        max_moves: moves of all seats together after which the episode is truncated.
        versions: for policies being trained, a callable giving the policy's current version, recorded for every
            token it samples (``Trajectory.token_versions``) and at each episode's start and end
            (``metadata["policy_version"]``).
        policy_params: the sampling of some policies by name instead of ``params`` (an evaluation's frozen opponent
            played greedily while the evaluated policy samples); ``max_new_tokens`` is ``params``'s for every policy.
    """

    def __init__(
        self,
        policies: Mapping[str, Agent],
        params: SamplingParams,
        *,
        seats: Mapping[str, str] | None = None,
        max_context: int = 4096,
        max_moves: int = 200,
        versions: Mapping[str, Callable[[], int]] | None = None,
        policy_params: Mapping[str, SamplingParams] | None = None,
    ) -> None:
        if params.n != 1 or any(p.n != 1 for p in (policy_params or {}).values()):
            raise ValueError("a multi-agent rollout samples one completion per move: use params.n = 1")
        self.policy_params = {
            name: p.model_copy(update={"max_new_tokens": params.max_new_tokens})
            for name, p in (policy_params or {}).items()
        }
        if not policies:
            raise ValueError("no policies: give at least one agent")
        self.policies, self.params = dict(policies), params
        self.seats = dict(seats or {})
        unknown = sorted({p for p in self.seats.values() if p not in self.policies})
        if unknown:
            raise ValueError(
                f"seats map to policies that are not given: {', '.join(unknown)} (policies: {', '.join(self.policies)})"
            )
        self.max_context, self.max_moves = max_context, max_moves
        self.versions = dict(versions or {})
        unknown = sorted(set(self.versions) - set(self.policies))
        if unknown:
            raise ValueError(f"versions given for policies that are not given: {', '.join(unknown)}")

    def policy_of(self, seat: str, seats: Mapping[str, str] | None = None) -> str:
        """The policy that plays ``seat`` (by ``seats`` where given, else the rollout's own map).

        Raises:
            ValueError: the seat is mapped to no policy.
        """
        seats = self.seats if seats is None else seats
        if seat in seats:
            if seats[seat] not in self.policies:
                raise ValueError(
                    f"seat {seat!r} is mapped to policy {seats[seat]!r}, which is not given (policies: "
                    f"{', '.join(self.policies)})"
                )
            return seats[seat]
        if seat in self.policies:
            return seat
        if len(self.policies) == 1:
            return next(iter(self.policies))
        raise ValueError(
            f"seat {seat!r} is mapped to no policy: give seats={{{seat!r}: POLICY}} (policies: "
            f"{', '.join(self.policies)})"
        )

    def run(
        self,
        envs: Sequence[MultiAgentTextEnv],
        *,
        seeds: Sequence[int | None] | None = None,
        options: Sequence[dict[str, Any] | None] | None = None,
        group_ids: Sequence[str | None] | None = None,
        sample_seeds: Sequence[int | None] | None = None,
        seat_maps: Sequence[Mapping[str, str] | None] | None = None,
    ) -> list[Trajectory]:
        """One episode per environment; every seat's view of each, episode by episode, seats in the environment's
        order. ``sample_seeds[i]`` gives episode ``i`` its own random streams (one per seat and move) where the
        policy takes per-prompt seeds; ``seat_maps[i]`` maps episode ``i``'s seats to policies where it differs
        from the rollout's map (a league: who plays which seat changes from game to game). Moves of one policy are
        batched across all episodes."""
        n = len(envs)
        seeds, options = list(seeds or [None] * n), list(options or [None] * n)
        group_ids = list(group_ids or [None] * n)
        streams: list[int | None] = list(sample_seeds or [None] * n)  # None: the episode has no streams of its own
        maps = list(seat_maps or [None] * n)
        for i, env in enumerate(envs):  # every seat of every game has a policy, before anything is played
            for name in env.possible_agents:
                self.policy_of(name, maps[i])
        views: list[dict[str, SeatView]] = []
        live: list[int] = []
        errors: list[str | None] = [None] * n
        starts: list[dict[str, int]] = []
        for i, env in enumerate(envs):
            env.reset(seed=seeds[i], options=options[i])
            views.append({seat: self._view(seat, self.policy_of(seat, maps[i])) for seat in env.possible_agents})
            starts.append({p: v() for p, v in self.versions.items()})
            live.append(i)
        moves = [0] * n
        while live:
            asks: dict[tuple[str, int], list[tuple[int, str]]] = {}  # by policy and generation budget
            for i in list(live):
                seat = self._next_seat(envs[i], views[i], moves[i])
                if seat is None:
                    live.remove(i)
                    continue
                if views[i][seat].request() is None:  # no room left under max_context
                    self._truncate(envs[i], views[i], read=seat)
                    live.remove(i)
                    continue
                budget = views[i][seat].room(self.params.max_new_tokens)
                asks.setdefault((views[i][seat].policy, budget), []).append((i, seat))
            for (policy, budget), jobs in asks.items():
                agent = self.policies[policy]
                prompts = [views[i][seat].tokens for i, seat in jobs]
                kwargs: dict[str, Any] = {}
                if capabilities_of(agent).seeds and all(streams[i] is not None for i, _ in jobs):
                    kwargs["seeds"] = [_move_seed(cast(int, streams[i]), seat, moves[i]) for i, seat in jobs]
                own = self.policy_params.get(policy, self.params)
                params = own if budget == own.max_new_tokens else own.model_copy(update={"max_new_tokens": budget})
                try:
                    outs = agent.generate([list(p) for p in prompts], params, **kwargs)
                except Exception as e:  # e.g. an endpoint gone: its games end with the error
                    if policy in self.versions:  # a policy being trained fails: a bug or out of memory, not a game's
                        raise
                    for i, _ in jobs:
                        errors[i] = f"policy {policy!r} failed to move: {type(e).__name__}: {e}"
                        live.remove(i)
                    continue
                version = self.versions[policy]() if policy in self.versions else None
                for (i, seat), completion in zip(jobs, outs):
                    sampled_by = (
                        version if completion.policy_version is None or version is None else completion.policy_version
                    )  # the weights that sampled it (a worker may load new ones)
                    turn = views[i][seat].act(completion, sampled_by)
                    turn.info["move"] = moves[i]  # its place among every seat's moves (the viewer interleaves them)
                    if budget < self.params.max_new_tokens and completion.finish_reason == "length":
                        turn.info["cut_by"] = "context"
                    moves[i] += 1
                    try:
                        envs[i].step(completion.text)
                    except Exception as e:  # the episode ends with the error; the others go on
                        errors[i] = f"{type(e).__name__}: {e}"
                        live.remove(i)
                        continue
                    turn.info.update(
                        {
                            k: v
                            for k, v in envs[i].infos.get(seat, {}).items()
                            if isinstance(v, (str, int, float, bool, type(None)))
                        }
                    )
        out = []
        for i, env in enumerate(envs):
            for traj in self._trajectories(env, views[i], errors[i], seeds[i], group_ids[i], i):
                policy = traj.metadata["policy"]
                if policy in self.versions:
                    traj.metadata["policy_version"] = [starts[i][policy], self.versions[policy]()]
                out.append(traj)
        return out

    def _view(self, seat: str, policy: str) -> SeatView:
        agent = self.policies[policy]
        return SeatView(seat, policy, ChatRenderer(agent.tokenizer), end_of_turn_ids(agent), self.max_context)

    def _next_seat(self, env: MultiAgentTextEnv, views: dict[str, SeatView], moves: int) -> str | None:
        """Take the dead steps (crediting each finished seat), tell the next seat its messages; None once the game
        is over."""
        if moves >= self.max_moves and env.agents:
            self._truncate(env, views)
            return None
        while env.agents:
            seat = env.agent_selection
            observation, reward, termination, truncation, info = env.last()
            view = views[seat]
            _collect(view, float(reward))
            heard = view.hear(list(observation))
            if not heard and not (termination or truncation):  # no room to take it in and move: the game is cut
                self._truncate(env, views, read=seat)
                return None
            if termination or truncation:
                if view.turns:
                    view.turns[-1].terminated, view.turns[-1].truncated = bool(termination), bool(truncation)
                view.outcome, view.invalid = info.get("outcome"), int(info.get("invalid_moves", 0))
                view.scores = _scores(env, info)
                view.truncated = view.truncated or bool(truncation)
                env.step(None)
                continue
            return seat
        return None

    def _truncate(self, env: MultiAgentTextEnv, views: dict[str, SeatView], read: str | None = None) -> None:
        """The episode is cut here: every seat still in play is truncated (the environment is left as it is) and
        collects what the game paid it since it last read its rewards (``read``: the seat whose ``last()`` was just
        read, so already credited)."""
        for seat in env.agents:
            view = views[seat]
            if seat != read:
                _collect(view, float(env._cumulative_rewards.get(seat, 0.0)))
            view.truncated = True
            view.invalid = int(env.infos.get(seat, {}).get("invalid_moves", 0))
            view.scores = _scores(env, env.infos.get(seat, {}))

    def _trajectories(
        self,
        env: MultiAgentTextEnv,
        views: dict[str, SeatView],
        error: str | None,
        seed: int | None,
        group: str | None,
        index: int,
    ) -> list[Trajectory]:
        out = []
        episode = f"{group if group is not None else index}"
        for seat, view in views.items():
            truncated = view.truncated
            traj = Trajectory(
                env_id=type(env).__name__,
                task_id=str(index),
                seed=seed,
                group_id=f"{episode}/{seat}",
                prompt=view.prompt,
                turns=view.turns,
                terminated=not truncated and error is None,
                truncated=truncated,
                error=error,
                token_ids=view.tokens if view.turns else None,
                loss_mask=view.mask if view.turns else None,
                logprobs=view.logprobs if view.turns else None,
                token_versions=view.versions if view.turns and view.versioned else None,
            )
            traj.metadata.update(
                seat=seat,
                policy=view.policy,
                episode=episode,
                sampled_crc=view.sampled_crc,
                outcome=view.outcome,
                invalid_moves=view.invalid,
                seat_reward=view.collected,
            )
            if getattr(env, "item_scores", ()):  # a game that scores its episodes beside the outcome
                traj.metadata["scores"] = dict(view.scores)
            out.append(traj)
        return out


def _scores(env: MultiAgentTextEnv, info: Mapping[str, Any]) -> dict[str, Any]:
    """The game's item scores (``item_scores``) that ``info``, one seat's infos as the game ended, holds."""
    return {k: info[k] for k in getattr(env, "item_scores", ()) if k in info}


def _collect(view: SeatView, reward: float) -> None:
    """Credit ``reward`` to the seat: to what it collected and to its last move (none before its first)."""
    view.collected += reward
    if view.turns:
        view.turns[-1].reward += reward


def _move_seed(sample_seed: int, seat: str, move: int) -> int:
    """The random stream of one move: the episode's seed, the seat and the move's number."""
    return (sample_seed * 1_000_003 + sum(ord(c) * 31**k for k, c in enumerate(seat)) * 7919 + move) % 2**61
