"""Episodes from user programs: each job's task goes to the program through a gateway session, and what the session
recorded becomes the job's Trajectory — for training (:class:`GatewayRunner`, the on-policy source's runner) and for
held-out evaluation (:func:`play_programs`, under the seeding rule of :mod:`turnrl.rollout.play`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from turnrl.envs.core import close_all
from turnrl.envs.registry import make
from turnrl.gateway.program import Outcome, call_function, load_function, run_command
from turnrl.gateway.record import build_trajectory
from turnrl.gateway.server import Gateway
from turnrl.gateway.tools import ToolServer
from turnrl.types import Trajectory


class Program:
    """A user agent program: a function ``"module:function"`` or a command (see :mod:`turnrl.gateway.program`)."""

    def __init__(
        self, function: str | None = None, command: str | Sequence[str] | None = None, search: Sequence[str | Path] = ()
    ) -> None:
        if (function is None) == (command is None):
            raise ValueError("a program is a function ('module:function') or a command, exactly one of them")
        self.name = function or (command if isinstance(command, str) else " ".join(command or ()))
        self.fn = load_function(function, [Path.cwd(), *search]) if function is not None else None
        self.command = command

    def run(self, base_url: str, api_key: str, task: dict[str, Any], session: str, timeout: float) -> Outcome:
        """One run on ``task`` through ``base_url``."""
        if self.fn is not None:
            return call_function(self.fn, base_url, api_key, task, timeout)
        assert self.command is not None  # no function: a command
        return run_command(self.command, base_url, api_key, task, session, timeout)


def task_of(env: Any, obs: Sequence[Any], info: dict[str, Any], index: int, model: str) -> dict[str, Any]:
    """What a program is told of a task: its id and index, the opening messages in OpenAI's form, the last user
    message's text, the environment's tool schemas and the model name to ask for (never the reference answer)."""
    messages = [m.to_chat() for m in obs]
    users = [m["content"] for m in messages if m["role"] == "user"]
    return {
        "id": info.get("task_id"),
        "index": index,
        "messages": messages,
        "question": users[-1] if users else "",
        "tools": list(getattr(env.unwrapped, "tool_schemas", list)()),
        "model": model,
    }


def play_one(
    gateway: Gateway,
    program: Program,
    env: Any,
    *,
    env_seed: int | None,
    index: int,
    sample_seed: int | None,
    timeout: float,
    fields: dict[str, Any],
    sampling: dict[str, Any] | None = None,
    tools: ToolServer | None = None,
) -> Trajectory:
    """One episode: reset ``env`` on task ``index``, run the program in a fresh session, grade its answer with the
    environment where it returned one, and build the Trajectory of what the session recorded (``sampling``
    overrides the gateway's sampling settings for this session, e.g. greedy for evaluation; ``tools`` serves the
    environment's tools to the program over MCP for the episode, its calls recorded in ``metadata["mcp_calls"]``)."""
    t0 = time.perf_counter()
    spec = env.unwrapped.spec
    fields = {"env_id": spec.id if spec is not None else type(env.unwrapped).__name__, "seed": env_seed, **fields}
    try:
        obs, info = env.reset(seed=env_seed, options={"index": index})
    except Exception as e:
        return Trajectory(error=f"reset failed: {type(e).__name__}: {e}", **fields)
    sid = gateway.open(
        f"{fields.get('metadata', {}).get('job', 'episode')}-{uuid.uuid4().hex[:8]}",
        seed=sample_seed,
        sampling=sampling,
    )
    task = task_of(env, obs, info, index, gateway.model)
    mcp_calls: list[dict[str, Any]] = []
    try:
        if tools is not None:
            task["mcp_url"] = tools.attach(sid, env)
        outcome = program.run(gateway.base_url(sid), gateway.api_key, task, sid, timeout)
    finally:  # calls still running (a stream the program hung up on, a tool call) are recorded within its time
        if tools is not None:
            mcp_calls = tools.detach(sid, wait=t0 + timeout - time.perf_counter())
        session = gateway.close(sid, wait=t0 + timeout - time.perf_counter())
    reward, correct, error, last_info = outcome.reward, outcome.correct, outcome.error, {}
    if error is None and outcome.answer is not None and session.calls:
        try:
            _, env_reward, _, _, step_info = env.step(outcome.answer)
        except Exception as e:
            error = f"grading the program's answer failed: {type(e).__name__}: {e}"
        else:
            reward = env_reward if reward is None else reward
            correct = step_info.get("correct") if correct is None else correct
            last_info = {k: v for k, v in step_info.items() if k in ("extracted", "metrics", "error")}
    meta = dict(fields.pop("metadata", {}) or {})
    meta.update(
        program_seconds=round(time.perf_counter() - t0, 3),
        **({"answer": outcome.answer} if outcome.answer is not None else {}),
    )
    if tools is not None:
        meta["mcp_calls"] = mcp_calls
    traj = build_trajectory(
        session.calls,
        reward=reward or 0.0,
        correct=correct,
        eos_ids=gateway.eos_ids,
        tokenizer=gateway.agent.tokenizer,
        error=error,
        task_id=info.get("task_id"),
        metadata=meta,
        **fields,
    )
    if traj.turns and last_info:
        traj.turns[-1].info.update(last_info)
    return traj


def play_programs(
    gateway: Gateway,
    program: Program,
    env_id: str,
    env_kwargs: dict[str, Any],
    jobs: Sequence[Any],
    *,
    seed: int,
    concurrency: int,
    timeout: float,
    sink: Callable[[Trajectory], Any] | None = None,
    group_id: Callable[[Any], str] | None = None,
    sampling: dict[str, Any] | None = None,
    tools: ToolServer | None = None,
) -> list[Trajectory]:
    """Play ``jobs`` (:class:`~turnrl.rl.sources.base.Job`) with the program, ``concurrency`` at once; the
    Trajectories in job order. Environments are reset like native episodes (seed ``seed + task``, ``{"index":
    task}``) and each session samples from the job's own stream (:func:`~turnrl.rollout.play.sample_seed`)."""
    from turnrl.rollout.play import env_seed, sample_seed

    envs = [make(env_id, **env_kwargs) for _ in jobs]  # made here: making environments in threads is not safe

    def one(job: Any, env: Any) -> Trajectory:
        fields = {"group_id": (group_id or (lambda j: j.group_id))(job), "metadata": {"job": job.key}}
        try:
            traj = play_one(
                gateway,
                program,
                env,
                env_seed=env_seed(seed, job),
                index=job.task,
                sample_seed=sample_seed(seed, job),
                timeout=timeout,
                fields=fields,
                sampling=sampling,
                tools=tools,
            )
        except Exception as e:  # one episode's failure is its own, the step goes on
            traj = Trajectory(error=f"the episode failed: {type(e).__name__}: {e}", env_id=env_id, **fields)
        if sink is not None:
            sink(traj)
        return traj

    try:
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="turnrl-episode") as pool:
            futures = [pool.submit(one, job, env) for job, env in zip(jobs, envs)]
            gateway.engine.serve(futures)  # decodes here when the gateway has no engine thread of its own
            return [f.result() for f in futures]
    finally:
        close_all(envs)


class GatewayRunner:
    """The on-policy source's runner when the run trains a user program (``program:`` in the run config): one
    gateway over the policy for the whole run, the step's jobs played by the program, ``program.concurrency`` at
    once. Episodes are sampled at the run's temperature and top-p whatever the program asks for.

    Args:
        program: the run config's ``program`` section (the function or command, the gateway's address, key, model
            name and timeout, ``concurrency``, ``mcp_tools``).
        env: its ``env`` section (``id`` and ``kwargs``: the environments the program's episodes are scored in).
        rollout: its ``rollout`` section (``temperature``, ``top_p``, ``max_new_tokens``, ``max_context``).
        agent: the policy the gateway serves.
        version: the policy's current version.
        seed: the run's seed (the environments' seeds derive from it).

    The sections are read by name, not by type: the gateway sits below ``rl/``, which defines them.
    """

    def __init__(
        self, program: Any, env: Any, rollout: Any, agent: Any, version: Callable[[], int], *, seed: int = 0
    ) -> None:
        self.program_cfg, self.env_cfg, self.rollout, self.seed = program, env, rollout, seed
        self.agent, self.version = agent, version
        self.program = Program(program.function, program.command)
        self.gateway: Gateway | None = None
        self.tools: ToolServer | None = None  # the environments' tools over MCP (program.mcp_tools)

    def open(self) -> Gateway:
        """The run's gateway (started on first use)."""
        if self.gateway is None:
            pc, r = self.program_cfg, self.rollout
            self.gateway = Gateway(
                self.agent,
                pc.model_name,
                host=pc.host,
                port=pc.port,
                api_key=pc.api_key,
                version=self.version,
                sampling={"temperature": r.temperature, "top_p": r.top_p, "top_k": 0},
                max_new_tokens=r.max_new_tokens,
                max_context=r.max_context,
                timeout=pc.timeout,
                engine_thread=False,
            ).start()
            if pc.mcp_tools:
                self.tools = ToolServer(
                    pc.host, api_key=self.gateway.api_key, call_timeout=pc.timeout, workers=pc.concurrency
                ).start()
        return self.gateway

    def run(self, jobs: Sequence[Any]) -> tuple[list[Trajectory], dict[str, float]]:
        """Play every job once with the program."""
        pc = self.program_cfg
        t0 = time.perf_counter()
        trajs = play_programs(
            self.open(),
            self.program,
            self.env_cfg.id,
            self.env_cfg.kwargs,
            jobs,
            seed=self.seed,
            concurrency=pc.concurrency,
            timeout=pc.timeout,
            tools=self.tools,
        )
        return trajs, {
            "generated_tokens": float(sum(sum(t.loss_mask or []) for t in trajs)),
            "generate_s": time.perf_counter() - t0,
        }

    def player(self, greedy: bool = True) -> Callable[..., tuple[list[Trajectory], int]]:
        """Evaluation's player (:func:`turnrl.rl.run.evaluate.evaluate`): the program on held-out jobs, greedy."""
        pc = self.program_cfg

        def play(
            jobs: Sequence[Any], env_kwargs: dict[str, Any], sink: Callable[[Trajectory], Any]
        ) -> tuple[list[Trajectory], int]:
            trajs = play_programs(
                self.open(),
                self.program,
                self.env_cfg.id,
                env_kwargs,
                jobs,
                seed=self.seed,
                concurrency=pc.concurrency,
                timeout=pc.timeout,
                sink=sink,
                group_id=lambda j: str(j.task),
                sampling={"temperature": 0.0} if greedy else None,
                tools=self.tools,
            )
            return trajs, sum(sum(t.loss_mask or []) for t in trajs)

        return play

    def prefetch(self, jobs: Sequence[Any], start: bool = True) -> None:
        """Nothing: programs run while nothing updates the policy."""

    def state_dict(self) -> dict[str, Any]:
        """Nothing to keep."""
        return {}

    def reset(self) -> None:
        """Nothing to forget."""

    def windows(self) -> None:
        """None: a program's episodes are not played in windows."""
        return None

    def close(self) -> None:
        """Stop the gateway."""
        if self.tools is not None:
            self.tools.stop()
            self.tools = None
        if self.gateway is not None:
            self.gateway.stop()
            self.gateway = None
