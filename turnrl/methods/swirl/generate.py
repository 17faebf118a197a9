"""SWiRL's data stage (docs/algorithms.md §1): K trajectories per question with live tools, from any agent.

Built on :func:`turnrl.rl.sources.collect.rollout_dataset` (resumable Parquet of token-exact Trajectories; questions already
in the file are skipped). What this adds:

* a teacher that fails mid-generation (an endpoint that goes down: its ``generate`` raises) is retried question by
  question — each round re-runs only the questions whose episodes ended in ``"generation failed"``; a question
  still failing after ``retries`` rounds is dropped from the file and counted in ``skipped_questions`` (a later run
  with the same settings samples it again), and everything already written stays;
* each trajectory carries what the later stages need in ``metadata``: the task's gold answer (``"gold"``, for
  reports and the outcome filter — the process judge never sees it) and the question (``"question"``);
* the few-shot demonstrations that the environment put before the question (``prompt_demos``: what lets a small
  model produce usable data) are taken out of each stored trajectory (``keep_demos=False``, the default): the
  prompt is re-rendered without them and the generated and environment tokens after it are kept as they were, so
  a policy is trained on the states it will meet without demonstrations, where it is evaluated. The teacher saw
  the demonstrations; the student's states do not hold them (``metadata["demos"] == "removed"``).

Use an environment in SWiRL's format (``tool_style="swirl"``): it declares the stop strings that end a turn at its
tool call or answer, so each agent turn is one step.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from turnrl.agents.base import SamplingParams
from turnrl.envs.registry import make
from turnrl.rl.sources.collect import dataset_summary, rollout_dataset
from turnrl.storage import load, save
from turnrl.tokens import ChatRenderer
from turnrl.types import Message, Trajectory


def failed_generation(traj: Trajectory) -> bool:
    """Whether the agent (not the environment) failed during the episode (the rollout's ``"generation failed"``)."""
    return traj.error is not None and traj.error.startswith("generation failed")


def annotate(trajectories: list[Trajectory], env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Add ``metadata["gold"]`` (the task's reference answer) and ``metadata["question"]`` (its prompt) to each
    trajectory of ``turnrl rollout``/:func:`generate` (identified by ``metadata["task_index"]``) that lacks them;
    in place."""
    env = None
    tasks: dict[int, tuple[Any, str]] = {}
    for t in trajectories:
        i = t.metadata.get("task_index")
        if i is None or ("gold" in t.metadata and "question" in t.metadata):
            continue
        if i not in tasks:
            env = env or make(env_id, **env_kwargs)
            obs, _ = env.reset(seed=t.seed, options={"index": i})
            task = getattr(env.unwrapped, "task", None)
            tasks[i] = (getattr(task, "answer", None), getattr(task, "prompt", None) or obs[-1].content)
        t.metadata["gold"], t.metadata["question"] = tasks[i]


def without_demos(traj: Trajectory, demos: tuple[Message, ...], renderer: ChatRenderer) -> Trajectory:
    """``traj`` with the demonstration messages ``demos`` taken out of its prompt: the prompt tokens re-rendered,
    every token after the prompt (generated and environment ones) kept, token spans shifted. A trajectory without
    those demonstrations comes back as it is.

    Raises:
        ValueError: the stored prompt tokens are not the chat template's rendering of the stored prompt (another
            tokenizer), so they cannot be replaced exactly; or the episode has several context segments.
    """
    prompt, k = list(traj.prompt), len(demos)
    start = next((i for i in range(len(prompt) - k + 1) if tuple(prompt[i : i + k]) == tuple(demos)), None)
    if not demos or start is None or traj.token_ids is None:
        return traj
    if traj.segments is not None and len(traj.segments) > 1:
        raise ValueError(
            f"trajectory {traj.id} has {len(traj.segments)} context segments (its history was "
            "rewritten): each segment's prompt tokens would need re-rendering without the demonstrations"
        )
    old = renderer.prompt_tokens(prompt)
    assert traj.loss_mask is not None and traj.logprobs is not None  # the token fields come together
    if list(traj.token_ids[: len(old)]) != old:
        raise ValueError(
            f"trajectory {traj.id}: its prompt tokens are not this tokenizer's rendering of its prompt; "
            "pass the tokenizer that generated it"
        )
    new_prompt = prompt[:start] + prompt[start + k :]
    new = renderer.prompt_tokens(new_prompt)
    shift = len(new) - len(old)
    data = traj.model_dump()
    data.update(
        prompt=new_prompt,
        token_ids=new + list(traj.token_ids[len(old) :]),
        loss_mask=[0] * len(new) + list(traj.loss_mask[len(old) :]),
        logprobs=[0.0] * len(new) + list(traj.logprobs[len(old) :]),
        token_versions=None,  # re-rendered tokens: the versions of the sampling run no longer line up
        metadata={
            **traj.metadata,
            "demos": "removed",
            **({"prompt_length": traj.metadata["prompt_length"] + shift} if "prompt_length" in traj.metadata else {}),
        },
    )
    for turn in data["turns"]:
        if turn["token_span"] is not None:
            turn["token_span"] = (turn["token_span"][0] + shift, turn["token_span"][1] + shift)
    return Trajectory.model_validate(data)


def generate(
    agent: Any,
    agent_name: str,
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    out: str | Path,
    tasks: int,
    samples: int = 5,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 256,
    seed: int = 0,
    retries: int = 2,
    batch_episodes: int = 64,
    max_context: int = 2048,
    keep_demos: bool = False,
    on_episode: Callable[[Trajectory], Any] | None = None,
) -> dict[str, Any]:
    """Sample ``samples`` trajectories of each of the first ``tasks`` questions of ``env_id`` into ``out``.

    Args:
        agent: any agent of :func:`turnrl.agents.make_agent` (HF, vLLM, an OpenAI-compatible endpoint with a
            tokenizer, a scripted one); it generates from token prompts.
        agent_name: its identity, recorded in each trajectory (a rerun must use the same to resume).
        env_id / env_kwargs: the environment, e.g. ``"turnrl/Arithmetic-v0"``, ``{"tool_style": "swirl"}``.
        out: ``.parquet`` or ``.jsonl``; an existing file made with the same settings is resumed.
        tasks / samples: questions ``0..tasks-1``, ``samples`` trajectories each (the paper: K=5).
        temperature / top_p / max_new_tokens: sampling, per step (the env's ``stop`` strings are added by the
            rollout).
        seed: seeds every episode.
        retries: rounds that re-ask the questions whose generation failed, before they are skipped.
        batch_episodes: episodes rolled out together (whole questions).
        max_context: the most tokens a trajectory may hold (demonstrations included).
        keep_demos: keep the environment's demonstration messages in the stored prompts (see the module docstring).
        on_episode: called with each finished episode (progress bars).

    Returns:
        :func:`~turnrl.rl.sources.collect.dataset_summary` of the file plus ``steps_per_trajectory``, ``tool_call_rate``
        (share of trajectories with a tool call), ``skipped_questions`` (failed after every retry, not in the
        file), ``retried_questions``, ``wall_seconds`` of all rounds and ``out``.

    Raises:
        ValueError: ``out`` holds trajectories sampled with other settings, or has another suffix.
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    env_kwargs = dict(env_kwargs or {})
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    out = Path(out)
    probe = None if keep_demos else make(env_id, **env_kwargs).unwrapped
    demos = tuple(getattr(probe, "prompt_demos", ()))
    renderer = ChatRenderer(agent.tokenizer, getattr(probe, "tool_schemas", list)()) if demos else None
    retried: set[int] = set()
    failed: set[int] = set()
    wall = 0.0
    for attempt in range(retries + 1):
        summary = rollout_dataset(
            agent,
            agent_name,
            env_id,
            out=out,
            tasks=tasks,
            samples=samples,
            params=params,
            env_kwargs=env_kwargs,
            seed=seed,
            batch_episodes=batch_episodes,
            max_context=max_context,
            on_episode=on_episode,
        )
        wall += summary["wall_seconds"]
        trajs = load(out)
        failed = {t.metadata["task_index"] for t in trajs if failed_generation(t)}
        if failed:  # drop the failed questions' episodes: the next round (or a later run) samples them again
            trajs = [t for t in trajs if t.metadata["task_index"] not in failed]
            if attempt < retries:
                retried |= failed
        annotate(trajs, env_id, env_kwargs)
        if renderer is not None:
            trajs = [without_demos(t, demos, renderer) for t in trajs]
        tmp = out.with_name(out.name + ".tmp" + out.suffix)  # an interruption here must not cost the file
        save(trajs, tmp)
        tmp.replace(out)
        if not failed:
            break
    trajs = load(out)
    n = max(len(trajs), 1)
    return {
        **dataset_summary(trajs),
        "steps_per_trajectory": sum(t.num_turns for t in trajs) / n,
        "tool_call_rate": sum(any(turn.info.get("tool_calls") for turn in t.turns) for t in trajs) / n,
        "skipped_questions": float(len(failed)),
        "retried_questions": float(len(retried)),
        "wall_seconds": round(wall, 2),
        "out": str(out),
    }
