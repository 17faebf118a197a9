"""SWiRL's experience source: fresh steps of the current policy from stored states (docs/algorithms.md §1, §10).

Each training step takes the next ``rollout.prompts_per_step`` step rows (a seeded shuffle, reshuffled every epoch)
and samples ``rollout.group_size`` actions from each row's *state* — the token prefix before the stored step,
exactly as the model saw it — in one batched ``generate`` call, stopping at the environment's stop strings (one
call or one answer per step). Each sample becomes a Trajectory of that state plus the new step (loss mask on the new
step only; the samples of one state form a group). With ``execute`` on, the state's environment is replayed (reset
with the episode's seed and task, the stored actions stepped again, their observations checked) and the sampled step
is run in it, so its tool result is part of the sample and the judge sees it. The reward (the step's only reward):

* ``rule`` / ``judge`` — the step judge's GOOD (1) or BAD/unparseable (0), from the context alone;
* ``rollout`` — 1 if the episode, played on from the sampled step with the current policy, ends correct;
* with ``algorithm.final_outcome`` w > 0, the ``rule`` / ``judge`` reward of a step that ends the episode is
  GOOD × (1 − w + w·R), R the environment's reward for it (``info["env_reward"]``, e.g. the answer's F1).

With ``algorithm.data_action`` the last of each state's G samples is the stored step itself (its tokens as stored,
its log-probabilities scored by the current policy at the sampling temperature), executed and rewarded like the rest.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from turnrl.agents.base import SamplingParams, capabilities_of
from turnrl.envs.core import Obs, StepResult, TextEnv
from turnrl.envs.registry import make
from turnrl.methods.swirl.judges import StepJudge, StepLabel, make_step_judge
from turnrl.methods.swirl.reading import parse_step
from turnrl.rl.config import TrainConfig
from turnrl.rl.sources.base import ExperienceSource, RunParts, rollout_metrics
from turnrl.rl.sources.replay import OfflineDataError
from turnrl.types import Message, Trajectory, Turn


class StateError(OfflineDataError):
    """Stored states that cannot be trained on; the message says what is wrong."""


def state_of(row: Trajectory) -> tuple[list[int], Turn]:
    """``(prefix tokens, the stored step)`` of a step row: its last turn is the step, the tokens before it the state.

    Raises:
        StateError: the row has no tokens or its last turn no token span.
    """
    if row.token_ids is None or not row.turns or row.turns[-1].token_span is None:
        raise StateError(
            f"row {row.id} is not a step row (token fields and a last turn with a token span); write "
            "step rows with `turnrl swirl decompose`"
        )
    return list(row.token_ids[: row.turns[-1].token_span[0]]), row.turns[-1]


def replay_spec(
    row: Trajectory, default_env: str, default_kwargs: dict[str, Any]
) -> tuple[str, dict[str, Any], int | None, dict]:
    """How to rebuild a row's environment: ``(env id, kwargs, reset seed, reset options)``, from what the rollout
    recorded (``metadata["dataset"]`` and ``metadata["task_index"]``), else the run's env and the row's task id."""
    data = row.metadata.get("dataset") or {}
    env_id = data.get("env_id") or default_env
    kwargs = data.get("env_kwargs") if data.get("env_id") else default_kwargs
    index = row.metadata.get("task_index")
    if index is None:
        raise StateError(
            f"row {row.id} does not say which task it is (metadata task_index); generate the data with "
            "`turnrl swirl generate` or `turnrl rollout`, or set algorithm.execute=false"
        )
    return env_id, dict(kwargs or {}), row.seed, {"index": int(index)}


def replay(row: Trajectory, context: Sequence[Turn], default_env: str, default_kwargs: dict[str, Any]) -> TextEnv:
    """The row's environment, reset to its task and stepped through the ``context`` turns again.

    Raises:
        StateError: the task or an observation differs from the stored one (an environment that is not
            deterministic cannot be replayed), or the episode ended before the state.
    """
    env_id, kwargs, seed, options = replay_spec(row, default_env, default_kwargs)
    env = make(env_id, **kwargs)
    _, info = env.reset(seed=seed, options=options)
    if row.task_id is not None and info.get("task_id") != row.task_id:
        raise StateError(
            f"replaying row {row.id}: the environment posed task {info.get('task_id')!r}, the row "
            f"holds {row.task_id!r} (were the env kwargs changed?)"
        )
    for turn in context:
        obs, _, terminated, truncated, _ = env.step(turn.action.content)
        if [m.content for m in obs] != [m.content for m in turn.observation]:
            raise StateError(
                f"replaying row {row.id}: turn {turn.index} gave another observation than the stored "
                "one; the environment is not deterministic, so its states cannot be replayed (set "
                "algorithm.execute=false)"
            )
        if terminated or truncated:
            raise StateError(f"replaying row {row.id}: the episode ended at turn {turn.index}, before the state")
    return env


class Resumed(TextEnv):
    """An environment already stepped to a state, posed as a fresh episode whose opening is the conversation so
    far (used to play an episode on from a sampled step; the continuation is scored, not trained on)."""

    def __init__(self, env: TextEnv, messages: Sequence[Message]) -> None:
        super().__init__(max_turns=max(1, env.max_turns - env.turn))
        self.inner, self.messages = env, list(messages)
        self.stop = tuple(getattr(env, "stop", ()) or ())

    def _reset(self, options: dict[str, Any]) -> tuple[Obs, dict[str, Any]]:
        return tuple(self.messages), {"role": "policy"}

    def _step(self, action: str) -> StepResult:
        return self.inner.step(action)


class StateSource(ExperienceSource):
    """Fresh steps from stored states (see the module docstring).

    Args:
        cfg: the run (``data.path``: step rows; ``rollout``: states per step, samples per state, sampling).
        agent: the current policy (shares the learner's weights; or given later by :meth:`attach`).
        judge: the step judge (default: from ``algorithm.reward`` / ``algorithm.judge``).
        version: the policy version, recorded on each sample.

    Raises:
        StateError: no file, or no usable step row in it.
    """

    reads_data = True

    @classmethod
    def check_config(cls, cfg: TrainConfig) -> None:
        """What a states run needs: ``data.path`` (the stored step rows), no ``data.batch_size`` (states per step are
        ``rollout.prompts_per_step``); samples are drawn in the driver's process (``placement: ray`` only for the
        ranks of a DeepSpeed learner group, whose weights the driver's copy loads after every update)."""
        name = cfg.algorithm.name
        if cfg.data is None:
            raise ValueError(
                f"algorithm {name!r} samples fresh steps from stored states: set data.path to step rows "
                "written by `turnrl swirl decompose`"
            )
        super().check_config(cfg)
        if "batch_size" in cfg.data.model_fields_set:
            raise ValueError(
                f"algorithm {name!r} draws rollout.prompts_per_step states per step and "
                "rollout.group_size samples of each; drop data.batch_size"
            )
        if cfg.placement != "local" and cfg.learner.backend != "deepspeed":
            raise ValueError(
                f"algorithm {name!r} samples in the driver's process: use placement: local (placement: "
                "ray only hosts a learner.backend: deepspeed group)"
            )

    @classmethod
    def open(cls, cfg: TrainConfig, algorithm: Any) -> StateSource:
        """Read and check the stored states before the model loads."""
        return cls(cfg, None)

    def configure(self, cfg: TrainConfig) -> TrainConfig:
        """``data.epochs`` resolved to ``steps`` (the run's config.yaml records them)."""
        if cfg.data is not None and cfg.data.epochs is not None:
            cfg = cfg.model_copy(
                update={"steps": self.steps_for(cfg.data.epochs), "data": cfg.data.model_copy(update={"epochs": None})}
            )
        self.cfg = cfg
        return cfg

    def attach(self, parts: RunParts) -> None:
        """Sample with the policy being trained; record its version."""
        self.agent, self.version = parts.agent, parts.version

    def __init__(
        self, cfg: TrainConfig, agent: Any, *, judge: StepJudge | None = None, version: Callable[[], int] = lambda: 0
    ) -> None:
        from turnrl.storage import load

        if cfg.data is None:
            raise StateError("StateSource needs data.path (step rows from `turnrl swirl decompose`)")
        alg: Any = cfg.algorithm  # SWiRL's settings, read by duck typing (a plug-in's config may lack some)
        self.cfg, self.agent, self.version = cfg, agent, version
        self.reward, self.execute = getattr(alg, "reward", "rule"), getattr(alg, "execute", True)
        self.data_action = bool(getattr(alg, "data_action", False))
        self.final_outcome = float(getattr(alg, "final_outcome", 0.0))
        files = [cfg.data.path] if isinstance(cfg.data.path, str) else list(cfg.data.path)
        rows: list[Trajectory] = []
        for f in files:
            if not Path(f).is_file():
                raise StateError(f"no such file: {f} (step rows from `turnrl swirl decompose`)")
            rows += load(f)
        self.rows = [
            r
            for r in rows
            if r.error is None and r.token_ids is not None and r.turns and r.turns[-1].token_span is not None
        ]
        if not self.rows:
            raise StateError(
                f"no step row in {files}: every row needs token fields and a last turn with a token span "
                "(write them with `turnrl swirl decompose`)"
            )
        self.left_out = len(rows) - len(self.rows)
        if judge is None and self.reward != "rollout":
            judge = make_step_judge("rule" if self.reward == "rule" else alg.judge, **getattr(alg, "judge_options", {}))
        self.judge = judge
        self.env = probe = make(cfg.env.id, **cfg.env.kwargs)  # its stop strings and its own episode figures
        self.stop = tuple(getattr(probe.unwrapped, "stop", ()) or ())
        self.epoch, self.position = 0, 0
        self._order = self._shuffled(0)

    def __len__(self) -> int:
        return len(self.rows)

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.rows)))
        if self.cfg.data is None or self.cfg.data.shuffle:
            random.Random(self.cfg.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def steps_for(self, epochs: float) -> int:
        """Training steps that visit every state ``epochs`` times."""
        return max(1, math.ceil(epochs * len(self.rows) / self.cfg.rollout.prompts_per_step))

    def next_states(self) -> list[Trajectory]:
        """The next ``prompts_per_step`` rows (the order reshuffles at each epoch's end)."""
        out = []
        for _ in range(min(self.cfg.rollout.prompts_per_step, len(self.rows))):
            out.append(self.rows[self._order[self.position]])
            self.position += 1
            if self.position == len(self._order):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffled(self.epoch)
        return out

    def sample(self, states: Sequence[Trajectory], step: int) -> list[Trajectory]:
        """``group_size`` steps of each state, as Trajectories (not yet rewarded): fresh ones from the policy, and
        with ``data_action`` the stored step as the last of each group."""
        r, G = self.cfg.rollout, self.cfg.rollout.group_size
        fresh = G - 1 if self.data_action else G
        prefixes = [state_of(s)[0] for s in states]
        longest = max(len(p) for p in prefixes)
        budget = max(1, min(r.max_new_tokens, r.max_context - longest))
        params = SamplingParams(
            temperature=r.temperature,
            top_p=r.top_p,
            max_new_tokens=budget,
            stop=self.stop,
            seed=self.cfg.seed * 1_000_003 + step,
        )
        completions = self.agent.generate([p for p in prefixes for _ in range(fresh)], params)
        steps: list[tuple[str, list[int], list[float], str | None, bool]] = [
            (c.text, list(c.token_ids), list(c.logprobs), c.finish_reason, False) for c in completions
        ]
        if self.data_action:
            stored = self.stored_steps(states, prefixes)
            steps = [x for i in range(len(states)) for x in (*steps[i * fresh : (i + 1) * fresh], stored[i])]
        version = self.version()
        out = []
        for k, (text, ids, logprobs, finish, from_data) in enumerate(steps):
            row, prefix = states[k // G], prefixes[k // G]
            context = [t.model_copy(update={"token_span": None, "obs_span": None}) for t in row.turns[:-1]]
            turn = Turn(
                index=len(context),
                role=row.turns[-1].role,
                action=Message(role="assistant", content=text),
                token_span=(len(prefix), len(prefix) + len(ids)),
                info={"finish_reason": finish, "kind": parse_step(text).kind},
            )
            swirl = {**row.metadata.get("swirl", {}), "state": row.id, "sample": k % G, "data_action": from_data}
            out.append(
                Trajectory(
                    env_id=row.env_id,
                    task_id=row.task_id,
                    seed=row.seed,
                    group_id=f"{step}-{row.id}",
                    prompt=row.prompt,
                    turns=[*context, turn],
                    token_ids=prefix + ids,
                    loss_mask=[0] * len(prefix) + [1] * len(ids),
                    logprobs=[0.0] * len(prefix) + logprobs,
                    metadata={
                        **{
                            k2: v
                            for k2, v in row.metadata.items()  # not the stored episode's sampling record
                            if k2 not in ("swirl", "policy_version", "sampled_crc")
                        },
                        "swirl": swirl,
                        "prompt_length": len(prefix),
                        "policy_version": [version, version],
                    },
                )
            )
        return out

    def stored_steps(
        self, states: Sequence[Trajectory], prefixes: Sequence[list[int]]
    ) -> list[tuple[str, list[int], list[float], str | None, bool]]:
        """Each row's own step: its text and tokens as stored, its log-probabilities under the current policy (the
        stored ones were the teacher's, often with demonstrations in its context), all scored in one forward pass."""
        from turnrl.rl.core.forward import sequence_logprobs

        model = self.agent.model if capabilities_of(self.agent).local_model else None
        if model is None:
            raise StateError(
                "algorithm.data_action scores the stored steps with the policy's model; the agent "
                f"{type(self.agent).__name__} has none (use the local HF policy)"
            )
        ids: list[list[int]] = []
        for row in states:
            span, tokens = row.turns[-1].token_span, row.token_ids
            assert span is not None and tokens is not None  # a step row (checked when the rows were read)
            ids.append(list(tokens[span[0] : span[1]]))
        scored = sequence_logprobs(model, [p + x for p, x in zip(prefixes, ids)], self.cfg.rollout.temperature)
        return [
            (row.turns[-1].action.content, x, logp[len(p) :], "stop", True)
            for row, p, x, logp in zip(states, prefixes, ids, scored)
        ]

    def run_steps(self, samples: list[Trajectory]) -> list[TextEnv | None]:
        """Run each sampled step in its replayed environment (observation, flags and info go on the turn)."""
        envs: list[TextEnv | None] = []
        for t in samples:
            turn = t.turns[-1]
            try:
                env = replay(t, t.turns[:-1], self.cfg.env.id, self.cfg.env.kwargs)
                obs, reward, terminated, truncated, info = env.step(turn.action.content)
            except StateError:
                raise
            except Exception as e:  # a failing step ends only its own sample
                t.error = f"env step failed: {type(e).__name__}: {e}"
                envs.append(None)
                continue
            t.turns[-1] = turn.model_copy(
                update={
                    "observation": list(obs),
                    "terminated": terminated,
                    "truncated": truncated,
                    "info": {**info, **turn.info, "env_reward": reward},
                }
            )
            t.terminated, t.truncated = terminated, truncated
            envs.append(None if terminated or truncated else env)
        return envs

    def play_on(self, samples: list[Trajectory], envs: list[TextEnv | None]) -> list[float]:
        """``rollout`` rewards: each sample's outcome, its episode played on with the current policy where it did
        not end at the sampled step."""
        from turnrl.rollout.engine import Rollout

        rewards = [1.0 if t.correct else 0.0 for t in samples]
        live = [i for i, e in enumerate(envs) if e is not None and samples[i].error is None]
        if live:
            r = self.cfg.rollout
            params = SamplingParams(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens)
            resumed = [Resumed(env, samples[i].messages) for i in live if (env := envs[i]) is not None]  # all live
            ends = Rollout(self.agent, params, max_context=r.max_context, env_timeout=r.env_timeout).run(resumed)
            for i, end in zip(live, ends):
                rewards[i] = 1.0 if end.correct else 0.0
                samples[i].metadata["swirl"]["rollout_turns"] = end.num_turns
        return rewards

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """This step's sampled steps, each rewarded alone; metrics on the steps and their labels."""
        states = self.next_states()
        t0 = time.perf_counter()
        samples = self.sample(states, step)
        generate_s = time.perf_counter() - t0
        envs: list[TextEnv | None] = self.run_steps(samples) if self.execute else [None] * len(samples)
        if self.reward == "rollout":
            scores = self.play_on(samples, envs)
            labels = [
                StepLabel(s > 0, "the episode ends correct" if s > 0 else "the episode ends wrong") for s in scores
            ]
        else:
            assert self.judge is not None
            labels = self.judge.label_rows(samples)
        for t, label in zip(samples, labels):
            turn = t.turns[-1]
            score = label.score if t.error is None else 0.0
            if self.final_outcome > 0 and turn.terminated:
                w = self.final_outcome
                score *= 1.0 - w + w * float(turn.info.get("env_reward") or 0.0)
            t.turns[-1] = turn.model_copy(
                update={
                    "reward": score,
                    "info": {**turn.info, "step_good": label.good, "step_reason": label.reason[:300]},
                }
            )
        # the policy's own steps measure the policy; the stored steps (data_action) are reported apart
        from_data = [bool(t.metadata["swirl"].get("data_action")) for t in samples]
        own = [t for t, d in zip(samples, from_data) if not d]
        own_labels = [lb for lb, d in zip(labels, from_data) if not d]
        data_labels = [lb for lb, d in zip(labels, from_data) if d]
        n = max(len(own), 1)
        kinds = [t.turns[-1].info.get("kind") for t in own]
        metrics = {
            **rollout_metrics(own, self.env),
            "epoch": float(self.epoch),
            "states": float(len(states)),
            "generate_s": generate_s,
            "generated_tokens": float(sum(sum(t.loss_mask or []) for t in own)),
            "step_good": sum(bool(lb.good) for lb in own_labels) / n,
            "step_unparseable": sum(lb.good is None for lb in own_labels) / n,
            **{f"step_{k}": kinds.count(k) / n for k in ("calculator", "search", "answer", "invalid")},
        }
        if data_labels:
            metrics["data_step_good"] = sum(bool(lb.good) for lb in data_labels) / len(data_labels)
        return samples, metrics

    def close(self) -> None:
        """Close the probe environment."""
        self.env.close()

    def state_dict(self) -> dict[str, Any]:
        """Epoch and position in it."""
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.epoch, self.position = state["epoch"], state["position"]
        self._order = self._shuffled(self.epoch)
