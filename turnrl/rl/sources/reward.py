"""A run-level hybrid reward (``reward:``, :class:`~turnrl.rl.config.rewards.RewardConfig`): rule verifiers
where they apply, a generative judge with the reference answer elsewhere — RTV + GenRM of "Exploring Data Scaling
Trends and Effects in RLHF" (arXiv 2503.22230; docs/algorithms.md §8).

The on-policy sources call :meth:`RunReward.apply` on every round's episodes once they are played (before DAPO's
filter, the task sampler and Pre-PPO's scoring see them):

* **route** — each episode's task goes to ``route[member]`` (its mixture member's name, or the environment id of a
  single environment), else to ``default``; ``auto`` is ``rule`` where the task's reference answer is a number or a
  formula (:func:`~turnrl.verifiers.judge.rule_applies`) or the task has tests (code), else ``judge``.
* **rule** — the reward the environment's own verifier gave is kept.
* **judge** — the episodes that ended with an answer are judged in one batch: the judge reads the question (the
  task's prompt), the reference answer and the end of the episode's last reply, and answers YES or NO on its last
  line (:class:`~turnrl.verifiers.judge.OutcomeJudge`, parsed strictly). The reward of the episode's last turn
  becomes 1 for YES and 0 for NO or an unreadable judgement; ``info["correct"]`` follows, and the environment's own
  grading stays in ``info["rule_reward"]`` / ``info["rule_correct"]``. An episode cut before it answered keeps its
  reward (0). A judge that fails (an exception, a dead server) marks the episode's ``error``, so the learner leaves
  it out instead of training on a made-up 0.

Each episode's last turn records ``info["reward_source"]`` (``rule`` or ``judge``). Round figures:
``reward_judged`` (share of episodes judged), ``reward_rule_mean`` / ``reward_judge_mean`` (mean reward per source),
``reward_judge_unparseable``, ``reward_judge_failed`` and ``reward_judge_agreement`` (share of judged episodes
where the judge and the environment's rule agree — how far a judge can be trusted where both exist).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from turnrl.rl.config.rewards import ProcessRewardConfig, RewardConfig
from turnrl.rl.sources.base import Job
from turnrl.rl.sources.tasks import TaskPool
from turnrl.types import SamplingParams, Trajectory
from turnrl.verifiers.judge import OutcomeJudge, rule_applies


class RunReward:
    """The ``reward:`` spec of a run, bound to its environment (checked here, before any model loads).

    Args:
        cfg: the spec.
        env: the run's training environment (a probe instance: its tasks and mixture members).

    Raises:
        ValueError: ``route`` names something that is neither a mixture member nor the environment, or a task may
            go to the judge and the environment cannot give its tasks' questions and reference answers.
    """

    def __init__(self, cfg: RewardConfig, env: Any) -> None:
        self.cfg, self.env = cfg, env.unwrapped
        self.pool = TaskPool.of(env)
        unknown = sorted(set(cfg.route) - set(self.pool.names))
        if unknown:
            raise ValueError(
                f"reward.route names {unknown}, which the environment does not have: route by "
                f"{'mixture member' if len(self.pool.names) > 1 else 'environment id'} "
                f"({', '.join(self.pool.names)})"
            )
        routes = {cfg.route.get(name, cfg.default) for name in self.pool.names}
        for m, name in enumerate(self.pool.names):  # `auto` sends a task without a reference to the rule
            own = self.pool.tasks_of[m]
            if cfg.route.get(name, cfg.default) == "judge" and len(own) and self.env.task_at(int(own[0])) is None:
                raise ValueError(
                    f"reward routes the tasks of {name} to the judge, but that environment cannot give "
                    "the judge its tasks' questions and reference answers (no task_at): route them to "
                    f"`rule` (reward.route: {{{name}: rule}})"
                )
        self.uses_judge = bool(routes & {"judge", "auto"})
        self.agent: Any = None
        self._judge: OutcomeJudge | None = None

    def attach(self, policy: Any) -> None:
        """Build the judge (``policy``: the agent being trained); nothing when no task can reach it."""
        if not self.uses_judge:
            return
        if self.cfg.judge == "policy":
            self.agent = policy
        else:
            from turnrl.agents import make_agent

            self.agent = make_agent(self.cfg.judge)
        self._judge = OutcomeJudge(
            self.agent,
            template=self.cfg.template,
            params=SamplingParams(temperature=0.0, max_new_tokens=self.cfg.max_new_tokens),
        )

    def route(self, index: int) -> str:
        """``rule`` or ``judge`` for task ``index``."""
        member = self.pool.names[int(self.pool.member[index])]
        r = self.cfg.route.get(member, self.cfg.default)
        if r == "auto":
            task = self.env.task_at(index)
            r = "rule" if task is None or rule_applies(task.answer) or task.metadata.get("tests") else "judge"
        return r

    def apply(self, trajs: Sequence[Trajectory]) -> None:
        """Score ``trajs`` in place by the spec (see the module docstring)."""
        judged: list[Trajectory] = []
        for t in trajs:
            if t.error is not None or not t.turns:
                continue
            if self.route(Job.parse(t.metadata["job"]).task) == "judge" and t.terminated:
                judged.append(t)
            else:
                t.turns[-1].info["reward_source"] = "rule"
        if not judged:
            return
        if self._judge is None:
            raise RuntimeError("RunReward.apply before attach(): the judge is not built")
        if self.cfg.judge == "policy" or len(self._judge.cache) > 100_000:
            self._judge.cache.clear()  # the policy changed since its last judgements (or the cache is large)
        for t, j in zip(judged, self._judge.judge_many([self.item(t) for t in judged])):
            last = t.turns[-1]
            if j.error is not None:
                t.error = f"reward judge: {j.error}"
                last.info["reward_source"] = "judge"
                continue
            verdict = self._judge.verdict(j)
            last.info.update(
                reward_source="judge",
                rule_reward=last.reward,
                rule_correct=last.info.get("correct"),
                correct=verdict.correct,
                judge_label=j.label,
            )
            last.reward = verdict.score

    def item(self, traj: Trajectory) -> dict[str, str]:
        """The judge's fields for one episode: the task's question and reference, the end of its last reply."""
        task = self.env.task_at(Job.parse(traj.metadata["job"]).task)
        reply = traj.turns[-1].action.content
        limit = self.cfg.max_prediction_chars
        return {
            "question": task.prompt,
            "gold": task.answer,
            "prediction": reply if len(reply) <= limit else "…" + reply[-limit:],
        }


def reward_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """The figures of a step's episodes scored by a ``reward:`` spec (see the module docstring); none without one."""
    sources = [(t, t.turns[-1].info.get("reward_source")) for t in trajs if t.turns]
    rule = [t for t, s in sources if s == "rule" and t.error is None]
    judged = [t for t, s in sources if s == "judge"]
    if not rule and not judged:
        return {}
    ok = [t for t in judged if t.error is None]
    out = {"reward_judged": len(judged) / (len(rule) + len(judged))}
    if rule:
        out["reward_rule_mean"] = sum(t.total_reward for t in rule) / len(rule)
    if judged:
        out["reward_judge_failed"] = float(len(judged) - len(ok))
    if ok:
        out["reward_judge_mean"] = sum(t.turns[-1].reward for t in ok) / len(ok)
        out["reward_judge_unparseable"] = sum(t.turns[-1].info.get("judge_label") is None for t in ok) / len(ok)
    both = [t for t in ok if t.turns[-1].info.get("rule_correct") is not None]
    if both:
        out["reward_judge_agreement"] = sum(
            bool(t.turns[-1].info["rule_correct"]) == bool(t.turns[-1].info["correct"]) for t in both
        ) / len(both)
    return out


class ProcessRewards:
    """A run's ``process_reward:``: the PRM's dense rewards at the line ends of every generated reply (stored as the
    episode's ``metadata["dense_rewards"]``, which :meth:`~turnrl.types.Trajectory.token_rewards` adds), built when
    the policy's tokenizer is known.

    Raises:
        FileNotFoundError: the PRM folder holds no model.
        ValueError: the PRM reads another tokenizer than the policy's.
    """

    def __init__(self, cfg: ProcessRewardConfig) -> None:
        self.cfg = cfg
        self.prm: Any = None
        self.tokenizer: Any = None

    def attach(self, tokenizer: Any) -> None:
        """Load the PRM and check that it reads the policy's tokens."""
        from turnrl.rl.core.value_model import ValueModel

        self.prm, self.tokenizer = ValueModel.load(self.cfg.model), tokenizer
        if len(self.prm.tokenizer) != len(tokenizer) or self.prm.tokenizer.eos_token != tokenizer.eos_token:
            raise ValueError(
                f"the process reward model in {self.cfg.model} was trained on {self.prm.base!r}, whose "
                "tokenizer is not the policy's: train the PRM on the policy's own model"
            )

    def apply(self, trajs: Sequence[Trajectory]) -> None:
        """Put the dense rewards on ``trajs`` (episodes with tokens and no error)."""
        from turnrl.rl.core.value_model import line_ends
        from turnrl.rl.formulas.rewards import dense_rewards

        live = [t for t in trajs if t.error is None and t.token_ids is not None]
        spans = [
            [(s, e) for s, e in (turn.token_span for turn in t.turns if turn.token_span is not None) if e > s]
            for t in live
        ]
        plans = [
            [[s - 1, *line_ends(cast(list[int], t.token_ids), (s, e), self.tokenizer)] for s, e in sp]  # (live)
            for t, sp in zip(live, spans)
        ]  # then its line ends
        values = self.prm.scores(live, [[p for turn in plan for p in turn] for plan in plans])
        for t, sp, plan, vs in zip(live, spans, plans, values):
            marks: list[list[float]] = []
            k = 0
            for (_, end), turn in zip(sp, plan):
                v, k = vs[k : k + len(turn)], k + len(turn)
                lines, last = dense_rewards(v[1:], v[0], self.cfg.form, self.cfg.coef)
                marks += [[p, r] for p, r in zip(turn[1:], lines)] + ([[end - 1, last]] if last else [])
            t.metadata["dense_rewards"] = marks


def process_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """``process_reward_mean`` (the dense rewards' sum per episode) and ``process_rewarded_tokens`` (per episode)."""
    scored = [t for t in trajs if "dense_rewards" in t.metadata]
    if not scored:
        return {}
    return {
        "process_reward_mean": sum(r for t in scored for _, r in t.metadata["dense_rewards"]) / len(scored),
        "process_rewarded_tokens": sum(len(t.metadata["dense_rewards"]) for t in scored) / len(scored),
    }


def process_rewards(cfg: ProcessRewardConfig | None) -> ProcessRewards | None:
    """The run's process rewards, or None; a PRM folder without a model fails here, before the policy loads.

    Raises:
        FileNotFoundError: no ``prm.pt`` in the folder.
    """
    if cfg is None:
        return None
    from turnrl.rl.core.value_model import check_folder

    check_folder(cfg.model)
    return ProcessRewards(cfg)


def run_reward(cfg: RewardConfig | None, env: Any) -> RunReward | None:
    """The run's reward spec bound to ``env``, or None (the environment's own rewards)."""
    return None if cfg is None else RunReward(cfg, env)
