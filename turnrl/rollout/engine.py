"""Token-exact multi-turn rollouts (docs/concepts.md §5).

``Rollout.run(envs)`` plays one episode in each environment with one agent. Every turn, the prompts of all live
episodes go to the agent in one batched ``generate`` call; then the environments step concurrently (``astep``,
bounded by ``env_concurrency``, each with a timeout). Each episode's token sequence is only ever appended to:

* the generated tokens, with loss mask 1 and their logprobs;
* the chat-template tokens of the environment's new messages, with loss mask 0 (see :mod:`turnrl.tokens`).

The conversation is never re-tokenized from text, so the trainer sees exactly what the model saw and produced.
A failing environment (exception or timeout) ends only its own episode, recorded in ``Trajectory.error``.
Finished trajectories go to ``sink`` (e.g. a :class:`turnrl.storage.TrajectoryWriter`) as they finish.

Continuous batching (``continuous=True``): each episode plays its own turn loop and its next turn joins the agent's
running batch as soon as its environment answered, never waiting for the round's slowest episode.

KV reuse: with an agent that keeps sessions (``capabilities.sessions``, the HF agent), every episode names its
session in each ``generate`` call, so the agent feeds only the tokens added since the episode's last turn; the
session is released when the episode ends. Each trajectory records ``metadata["prefill_tokens"]`` (prompt tokens
run through the model) and ``["cached_tokens"]`` (served from its cache), and ``["kv_events"]`` where its cache was
rewritten, evicted, invalidated or too large.

Windows (T-PPO's successive batching): :meth:`Rollout.start` resets the envs, :meth:`Rollout.advance` plays until
each episode finished or generated ``budget`` more tokens — a window may end inside a turn, which the next call
continues token-exactly — and :meth:`Rollout.snapshot` gives a trainable copy of an episode still in play.

This module holds the turn loop; its siblings hold the pieces it plays with: an episode's state
(:mod:`~turnrl.rollout.episode`), the calls to the agent (:mod:`~turnrl.rollout.generation`), the environment's reply
appended or the history rewritten (:mod:`~turnrl.rollout.context`), stop strings (:mod:`~turnrl.rollout.stops`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from turnrl.agents.base import Agent, Completion, SamplingParams, capabilities_of, end_of_turn_ids
from turnrl.envs.core import TextEnv
from turnrl.rollout.context import ContextBudget, append_observation
from turnrl.rollout.episode import Episode, RolloutStats, record_unanswered
from turnrl.rollout.generation import generate_one, generate_round
from turnrl.rollout.rewrite import Rewrite, rewrite_round, unsampled
from turnrl.rollout.stops import past_stop, stopped_across_pieces
from turnrl.tokens import ChatRenderer
from turnrl.types import Message, Trajectory, Turn
from turnrl.utils import run_with_daemon_threads

if TYPE_CHECKING:  # the agents that capabilities say more of
    from turnrl.agents.base import SessionAgent


class Rollout:
    """Run episodes of any environments with one agent, producing token-exact Trajectories.

    Args:
        agent: generates from token prompts; its ``tokenizer`` renders the chat template.
        params: sampling parameters for every turn (``n`` must be 1: a group is several envs on one task); an
            env's own ``stop`` strings are added to ``params.stop`` for its episodes.
        max_turns: an extra cap on agent turns (the env's own ``max_turns`` applies too).
        max_context: the most tokens an episode may hold; a turn's generation budget shrinks to fit, and an
            episode with no room left ends ``truncated`` with ``metadata["truncated_by"] = "context"``.
        env_concurrency: how many environment steps run at once.
        env_timeout: seconds one environment step may take before its episode is ended with an error.
        sink: called with each Trajectory as soon as it finishes (streaming storage, progress bars).
        keep_prompts: record each turn's full prompt in ``Trajectory.metadata["prompts"]`` (for tests/debugging).
        policy_version: recorded as ``metadata["policy_version"] = [at start, at end]`` of every episode (the
            weights' version; a callable is read at the start and at the end of each episode, and before each
            generation round: ``Trajectory.token_versions`` holds the version that sampled each generated token).
        rewrite: called after each generation round with every live episode's env, role, token prompt and
            completion; a completion it returns replaces the sampled one (its tokens and log-probabilities go into
            the trajectory as they are, the turn is marked ``info["rewritten"]``), None keeps it. Turns the hook
            declares it writes itself are not sampled (:mod:`turnrl.rollout.rewrite`).
        continuous: continuous batching across turns: each episode's next turn joins the agent's running batch as
            soon as its environment answered, instead of waiting for the round's slowest episode (the agent needs
            ``agenerate_one``, as the HF agent has; not with ``rewrite``, which sees whole rounds). Sampling is then
            batch-invariant only with ``sample_seeds`` (the order requests join depends on the environments' timing).
        context: keep each context under a token budget by rewriting the history (a new segment of the episode;
            :mod:`turnrl.rollout.context`); ``max_context`` then applies to each context.

    What code that plays a turn of its own (the context rewriter) may use: ``eos_ids`` (the token ids that end a
    turn), ``uses_sessions`` (the agent keeps each episode's KV cache between turns), ``passes_seeds`` (its
    ``generate`` takes ``seeds=``), :meth:`current_version` and :meth:`finish`.
    """

    def __init__(
        self,
        agent: Agent,
        params: SamplingParams,
        *,
        max_turns: int | None = None,
        max_context: int = 4096,
        env_concurrency: int = 16,
        env_timeout: float | None = 60.0,
        sink: Callable[[Trajectory], Any] | None = None,
        keep_prompts: bool = False,
        policy_version: int | Callable[[], int] | None = None,
        rewrite: Rewrite | None = None,
        continuous: bool = False,
        context: ContextBudget | None = None,
    ) -> None:
        if params.n != 1:
            raise ValueError("Rollout samples one completion per episode (params.n == 1); use several envs per task")
        self.agent, self.params = agent, params
        self.max_turns, self.max_context = max_turns, max_context
        self.env_concurrency, self.env_timeout = env_concurrency, env_timeout
        self.sink, self.keep_prompts = sink, keep_prompts
        self.policy_version = policy_version
        self._sampled_by = -1  # the version generating the current round (set before each round)
        self.rewrite = rewrite
        self.capabilities = capabilities_of(agent)  # what the agent can do beyond generate, declared
        if continuous and not self.capabilities.join_batch:
            raise ValueError(
                f"continuous batching needs an agent that decodes requests as they come "
                f"(agenerate_one, as the HF agent has); {type(agent).__name__} has none"
            )
        if continuous and rewrite is not None:
            raise ValueError(
                "a rollout hook that rewrites turns sees whole rounds: it cannot run with continuous batching"
            )
        self.continuous, self.context = continuous, context
        self.passes_seeds = self.capabilities.seeds
        self.stats = RolloutStats()
        self.eos_ids = end_of_turn_ids(agent)
        self.uses_sessions = self.capabilities.sessions

    def run(
        self,
        envs: Sequence[TextEnv],
        *,
        seeds: Sequence[int | None] | None = None,
        options: Sequence[dict[str, Any] | None] | None = None,
        group_ids: Sequence[str | None] | None = None,
        sample_seeds: Sequence[int] | None = None,
        metadata: Sequence[dict[str, Any]] | None = None,
    ) -> list[Trajectory]:
        """Play one episode per env (reset with ``seeds[i]``/``options[i]``); return the trajectories in env order.

        ``metadata[i]`` is copied into episode i's ``Trajectory.metadata`` when it starts (e.g. a job key, so that
        a streamed episode can be matched to its job).

        ``sample_seeds`` (one per env) gives each episode its own sampling stream (turn k of episode i is sampled
        with seed ``turnrl.utils.turn_seed(sample_seeds[i], k)``), so an episode's tokens do not depend on the rest
        of the batch; the agent's ``generate`` must accept ``seeds=``.
        """
        return run_with_daemon_threads(
            self.arun(
                envs, seeds=seeds, options=options, group_ids=group_ids, sample_seeds=sample_seeds, metadata=metadata
            )
        )

    async def arun(
        self,
        envs: Sequence[TextEnv],
        *,
        seeds: Sequence[int | None] | None = None,
        options: Sequence[dict[str, Any] | None] | None = None,
        group_ids: Sequence[str | None] | None = None,
        sample_seeds: Sequence[int] | None = None,
        metadata: Sequence[dict[str, Any]] | None = None,
    ) -> list[Trajectory]:
        """Async :meth:`run` (for callers already inside an event loop)."""
        n = len(envs)
        seeds = list(seeds) if seeds is not None else [None] * n
        options = list(options) if options is not None else [None] * n
        group_ids = list(group_ids) if group_ids is not None else [None] * n
        per_episode = list(sample_seeds) if sample_seeds is not None else [None] * n
        extra = list(metadata) if metadata is not None else [{}] * n
        if not len(seeds) == len(options) == len(group_ids) == len(per_episode) == len(extra) == n:
            raise ValueError("seeds, options, group_ids, sample_seeds and metadata must have one entry per env")
        self.stats = RolloutStats()
        episodes = self.start(
            envs, seeds=seeds, options=options, group_ids=group_ids, sample_seeds=per_episode, metadata=extra
        )
        await self.advance(episodes)
        return [ep.traj for ep in episodes]

    def start(
        self,
        envs: Sequence[TextEnv],
        *,
        seeds: Sequence[int | None],
        options: Sequence[dict[str, Any] | None],
        group_ids: Sequence[str | None],
        sample_seeds: Sequence[int | None],
        metadata: Sequence[dict[str, Any]],
    ) -> list[Episode]:
        """Reset each env and render its prompt: the episodes, ready for :meth:`advance` (one argument per env; an
        episode whose reset failed or whose prompt fills the context is finished already)."""
        episodes = [self._start(env, s, o, g, m) for env, s, o, g, m in zip(envs, seeds, options, group_ids, metadata)]
        for ep, sample_seed in zip(episodes, sample_seeds):
            ep.sample_seed = sample_seed
            if ep.traj.error is not None or ep.traj.truncated:
                self.finish(ep)
        return episodes

    async def advance(
        self, episodes: Sequence[Episode], budget: int | None = None, until_turn: int | None = None
    ) -> None:
        """Play ``episodes`` until each is finished, or — with ``budget`` (T-PPO's window W) — has generated
        ``budget`` more tokens, or — with ``until_turn`` (a tree's branch turn, :mod:`turnrl.rollout.tree`) — has
        played that many turns. A window may end inside a turn: the turn is paused (its tokens so far stay in the
        episode, generated, with their log-probabilities and versions) and the next :meth:`advance` continues it
        from there; the environment steps only once the turn is complete. The turn's per-turn limit
        (``params.max_new_tokens``) counts the tokens of all its pieces.
        """
        if budget is not None and until_turn is not None:
            raise ValueError("play either to a token budget (windows) or to a turn (trees), not both")
        if budget is not None and budget < 1:
            raise ValueError(f"a window must allow at least one token (got budget={budget})")
        if budget is not None and self.rewrite is not None:
            raise ValueError("a rollout hook that rewrites turns cannot run in windows (it would see half turns)")

        def more(ep: Episode) -> bool:  # whether an episode in play plays another turn in this call
            return until_turn is None or len(ep.traj.turns) < until_turn

        live = [ep for ep in episodes if not ep.done and more(ep)]
        for ep in live:
            ep.window_start, ep.window_used = (len(ep.tokens) if budget is not None else 0), 0
        semaphore = asyncio.Semaphore(self.env_concurrency)
        if self.continuous:
            t0 = time.perf_counter()
            await asyncio.gather(*(self._play_alone(ep, budget, semaphore, until_turn) for ep in live))
            self.stats.generate_s += time.perf_counter() - t0  # generation and environments overlap
            return
        while live:
            completions = await self._generate(live, budget)
            if completions is None:
                break
            results = await asyncio.gather(*(self._step(ep, c, semaphore) for ep, c in zip(live, completions)))
            live = [
                ep
                for ep, keep in zip(live, results)
                if keep and (budget is None or ep.window_used < budget) and more(ep)
            ]

    def play(self, episodes: Sequence[Episode], budget: int | None = None) -> None:
        """:meth:`advance` from synchronous code."""
        run_with_daemon_threads(self.advance(episodes, budget))

    def snapshot(self, ep: Episode) -> Trajectory:
        """A trainable copy of an unfinished episode as it stands: its tokens so far, the turns completed so far,
        ``metadata["partial"] = True`` and ``metadata["window_start"]`` (where the last window began)."""
        return ep.snapshot(with_versions=self.policy_version is not None)

    # ---- pieces of one turn ----

    def _start(
        self,
        env: TextEnv,
        seed: int | None,
        options: dict[str, Any] | None,
        group_id: str | None,
        metadata: dict[str, Any] | None = None,
    ) -> Episode:
        spec = env.unwrapped.spec
        traj = Trajectory(
            env_id=spec.id if spec is not None else type(env.unwrapped).__name__,
            seed=seed,
            group_id=group_id,
            metadata=dict(metadata or {}),
        )
        if self.policy_version is not None:
            traj.metadata["policy_version"] = [self.current_version(), None]
        ep = Episode(env=env, traj=traj)
        try:
            obs, info = env.reset(seed=seed, options=options)
            ep.renderer = ChatRenderer(self.agent.tokenizer, getattr(env.unwrapped, "tool_schemas", list)())
            traj.task_id, traj.prompt = info.get("task_id"), list(obs)
            ep.role = info.get("next_role") or info.get("role") or "policy"
            t0 = time.perf_counter()
            ep.append(ep.renderer.prompt_tokens(obs), 0)
            self.stats.bookkeeping_s += time.perf_counter() - t0
        except Exception as e:  # one bad env must not sink the batch
            traj.error = f"reset failed: {type(e).__name__}: {e}"
            return ep
        if len(ep.tokens) >= self.max_context:
            traj.truncated = True
            traj.metadata["truncated_by"] = "context"
        return ep

    async def _generate(self, live: list[Episode], window: int | None = None) -> list[Completion] | None:
        self._sampled_by = self.current_version()  # the weights generating now
        t0 = time.perf_counter()
        try:
            envs, roles = [ep.env for ep in live], [ep.role for ep in live]
            skipped = unsampled(self.rewrite, envs, roles)  # turns the hook writes itself: not sampled
            requests = [ep.request(self.params, self.max_context, window) for ep in live]
            completions = await generate_round(self, live, self.params, requests, skipped)
            if self.rewrite is not None:
                new = rewrite_round(self.rewrite, envs, roles, [list(ep.tokens) for ep in live], completions, skipped)
                for i, written in enumerate(new):
                    live[i].rewritten = written is not None
                    if written is not None:
                        completions[i] = written
        except Exception as e:  # keep everything collected so far
            for ep in live:
                ep.traj.error = f"generation failed: {type(e).__name__}: {e}"
                self.finish(ep)
            return None
        self.stats.generate_s += time.perf_counter() - t0
        return completions  # type: ignore[return-value]  # each turn sampled or written by the rewrite

    async def _generate_one(self, ep: Episode, window: int | None) -> Completion | None:
        """Continuous batching: the next generation of one episode, joined to the agent's running batch."""
        budget, stop, seed = ep.request(self.params, self.max_context, window)
        params = self.params.model_copy(update={"max_new_tokens": budget, "stop": stop})
        version = self.current_version()
        try:
            c = await generate_one(self, ep, params, seed)  # joins the agent's running batch
        except Exception as e:  # this episode ends; what it collected is kept
            ep.traj.error = f"generation failed: {type(e).__name__}: {e}"
            self.finish(ep)
            return None
        if c.policy_version is None:
            c.policy_version = version
        return c

    async def _play_alone(
        self, ep: Episode, budget: int | None, semaphore: asyncio.Semaphore, until_turn: int | None = None
    ) -> None:
        """Continuous batching: one episode's turns, each generated as soon as its environment answered."""
        while (budget is None or ep.window_used < budget) and (until_turn is None or len(ep.traj.turns) < until_turn):
            completion = await self._generate_one(ep, budget)
            if completion is None or not await self._step(ep, completion, semaphore):
                return

    async def _step(self, ep: Episode, completion: Completion, semaphore: asyncio.Semaphore) -> bool:
        """Record the completion, step the env, append its observation. Returns whether the episode goes on."""
        t0 = time.perf_counter()
        if self.keep_prompts and ep.turn_start is None:
            ep.prompts_seen.append(list(ep.tokens[ep.context_start :]))
        start = len(ep.tokens) if ep.turn_start is None else ep.turn_start
        if ep.turn_start is not None:  # a turn a window paused: a stop string may straddle the pieces
            completion = stopped_across_pieces(
                self.agent.tokenizer, ep.tokens[ep.turn_start :], completion, ep.stops(self.params.stop)
            )
        version: int | list[int] = (
            completion.policy_version if completion.policy_version is not None else self._sampled_by
        )
        version = completion.token_versions or version  # per token where the weights changed inside the call
        ep.append(completion.token_ids, 1, completion.logprobs, version)
        ep.window_used += len(completion.token_ids)
        self.stats.generated_tokens += len(completion.token_ids)
        self.stats.bookkeeping_s += time.perf_counter() - t0
        paused = ep.cut_by_window and completion.finish_reason == "length"  # the window ended inside the turn
        if paused:
            ep.turn_start, ep.segments = start, ep.segments + 1
            return True
        span = (start, len(ep.tokens))
        text = completion.text
        if ep.turn_start is not None:  # the turn's pieces, decoded as one
            text = self.agent.tokenizer.decode(ep.tokens[start:], skip_special_tokens=True)
        ep.turn_start, ep.segments = None, 0
        self.stats.turns += 1
        action = Message(role="assistant", content=text)
        t1 = time.perf_counter()
        try:
            async with semaphore:
                obs, reward, terminated, truncated, info = await asyncio.wait_for(
                    ep.env.astep(text), timeout=self.env_timeout
                )
        except Exception as e:
            reason = (
                f"timed out after {self.env_timeout}s" if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
            )
            ep.traj.turns.append(
                Turn(
                    index=len(ep.traj.turns),
                    role=ep.role,
                    action=action,
                    token_span=span,
                    info={"finish_reason": completion.finish_reason},
                )
            )
            ep.traj.error = f"env step failed: {reason}"
            self.finish(ep)
            return False
        self.stats.env_s += time.perf_counter() - t1
        t2 = time.perf_counter()
        turn = Turn(
            index=len(ep.traj.turns),
            role=info.get("role", ep.role),
            action=action,
            observation=list(obs),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            info={
                **info,
                "finish_reason": completion.finish_reason,
                **({"rewritten": True} if ep.rewritten else {}),
                **({"cut_by": "context"} if completion.finish_reason == "length" and ep.cut_by_context else {}),
            },
            token_span=span,
        )
        ep.rewritten = False
        past = past_stop(
            partial(self.agent.tokenizer.decode, skip_special_tokens=False),
            ep.tokens[span[0] : span[1]],
            ep.stops(self.params.stop),
        )
        if past:  # a turn that ran on past its stop string: the consistency guard reports it
            turn.info["past_stop"] = past
        ep.traj.turns.append(turn)
        ep.role = info.get("next_role") or "policy"
        over_turns = (
            self.max_turns is not None and sum(not t.info.get("summary") for t in ep.traj.turns) >= self.max_turns
        )
        if terminated or truncated or over_turns:
            ep.traj.terminated, ep.traj.truncated = terminated, truncated or (over_turns and not terminated)
            self.finish(ep)
            return False
        self.stats.bookkeeping_s += time.perf_counter() - t2
        return await append_observation(self, ep, turn, obs, rewrote_history=bool(info.get("history")))

    def current_version(self) -> int:
        """The policy's version now (``policy_version``, read if it is a callable); -1 when the rollout has none (what
        it samples then carries no version)."""
        v = self.policy_version
        if v is None:
            return -1
        return int(v() if callable(v) else v)

    def finish(self, ep: Episode) -> None:
        """End the episode: record the environment's figures where the rollout cut it (:func:`record_unanswered`),
        release its agent session, write its Trajectory (:meth:`Episode.write_trajectory`) and hand that to
        ``sink``."""
        ep.done = True
        record_unanswered(ep)
        if self.uses_sessions:
            cast("SessionAgent", self.agent).release([ep.session])
        version = self.current_version() if self.policy_version is not None else None
        ep.write_trajectory(version, keep_prompts=self.keep_prompts)
        if self.sink is not None:
            self.sink(ep.traj)
