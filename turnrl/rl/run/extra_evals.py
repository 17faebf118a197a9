"""The run's policy evaluated on other environments beside its own held-out evaluation (``extra_evals``;
docs/evaluation.md, docs/multi-agent.md).

Why: two arms of one comparison that train on different environments must still be scored under one protocol. A
solver trained alone on ``turnrl/Arithmetic-v0`` answers once in its own evaluation, while the solver–critic pair
(``turnrl/SolverCritic-v0``) answers, is reviewed and revises. With ::

    extra_evals:
      review: {env: turnrl/SolverCritic-v0, kwargs: {levels: [1], answer_format: auto}}

the solver alone is also evaluated through the review protocol — its own policy in both seats — on the game's
held-out problems, with the settings the pair's run evaluates with, so that ``turnrl compare OUT_ALONE/review
OUT_PAIR`` (the final answers) and ``turnrl compare --score first_correct OUT_ALONE/review OUT_PAIR`` (the solver's
first answers, before any review) pair the two problem by problem.

Where and when: wherever the run evaluates (step 0, every ``eval_every``, the end), into ``OUT_DIR/NAME/eval/step-N``,
and wherever it validates (``validate_every``), on the environment's validation split, into
``OUT_DIR/NAME/validation/step-N``; so ``OUT_DIR/NAME`` reads as a training run's evaluations in ``turnrl compare``
(``OUT_DIR/NAME@0``; ``OUT_DIR/NAME``, its last). The settings are those of the run's own evaluation (and of a
multi-agent run's): greedy, ``eval_tasks`` (``validation_tasks``) problems, ``rollout.max_new_tokens``,
``rollout.max_context`` and the run's seed. The figures join ``metrics.jsonl`` as ``eval_NAME_success`` and
``eval_NAME_<figure>`` (``val_NAME_…``): a game's shares (``eval_review_first_correct_rate``), a single-agent
environment's own figures.

Held out: each environment's evaluated problems, and its validation problems, are checked against the run's training
problems by canonical form (:func:`turnrl.rl.run.held_out.check_extra_evals`: before a model loads, and again at
the first evaluation; an offline run's stored episodes by :func:`~turnrl.rl.run.held_out.check_dataset_extra_evals`); a
problem the run trains on is refused where the environment calls that split held out, as for the run's own
evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from turnrl.agents.base import Agent, SamplingParams
from turnrl.rl.run.held_out import Planned, check_extra_evals, plan_extra_evals

if TYPE_CHECKING:
    from turnrl.rl.config import TrainConfig


class ExtraEvals:
    """A run's extra evaluations (see the module docstring): planned and checked at the first, then run wherever
    the run evaluates or validates.

    Args:
        cfg: the run's config (its ``extra_evals``).
        opponent: builds a frozen opponent from its name (built once per evaluation, on the policy's device).
    """

    def __init__(self, cfg: TrainConfig, opponent: Callable[[str], Agent]) -> None:
        self.cfg, self._opponent = cfg, opponent
        self._planned: list[Planned] | None = None
        self._opponents: dict[str, Agent] = {}
        self._floors: dict[str, Any] = {}  # a game's floor, played at its first held-out evaluation

    def run(self, agent: Agent, step: str, split: Literal["held-out", "validation"] = "held-out") -> dict[str, float]:
        """Evaluate ``agent`` on every extra environment for the run's evaluation folder ``step`` (``step-N``);
        return the figures, ``eval_NAME_…`` (``val_NAME_…`` for ``split="validation"``).

        Raises:
            HeldOutError, ValueError: (first call) what :func:`check_extra_evals` raises.
        """
        from turnrl.rl.run.evaluate import evaluate
        from turnrl.rl.run.evaluate_multi import evaluate_multi_agent

        cfg = self.cfg
        if self._planned is None:
            from turnrl.envs.registry import make

            planned = plan_extra_evals(cfg)
            train_env = make(cfg.env.id, **cfg.env.kwargs)
            try:
                check_extra_evals(cfg, train_env, planned)
            finally:
                train_env.close()
            self._planned = planned
        validating = split == "validation"
        prefix, folder = ("val_", "validation") if validating else ("eval_", "eval")
        n = cfg.validation_tasks if validating else cfg.eval_tasks
        params = SamplingParams(temperature=0.0, max_new_tokens=cfg.rollout.max_new_tokens)
        figures: dict[str, float] = {}
        for p in self._planned:
            kwargs = p.validation if validating else p.kwargs
            if kwargs is None:  # (refused by the check where the run validates)
                continue
            out = Path(cfg.out_dir) / p.name / folder / step
            if p.several:
                if p.opponent.kind != "self" and p.name not in self._opponents:
                    self._opponents[p.name] = self._opponent(p.opponent)
                m = evaluate_multi_agent(
                    agent,
                    p.env,
                    kwargs,
                    opponent=self._opponents.get(p.name, "self"),
                    seat=p.seat,
                    episodes=n,
                    seed=cfg.seed,
                    params=params,
                    max_context=cfg.rollout.max_context,
                    out_dir=out,
                    opponent_label=p.opponent,
                    opponent_checked=True,
                    agent_name=f"the run's policy ({cfg.out_dir})",
                    floor=False if validating else self._floors.get(p.name, True),
                )
                if not validating and "floor" in m:
                    self._floors[p.name] = m["floor"]
                success = m["success_rate"]
                own = {
                    k: v
                    for k, v in m.items()
                    if k.endswith(("_rate", "_mean")) and k != "success_rate" and not k.startswith("floor_")
                }
            else:
                m = evaluate(
                    agent,
                    p.env,
                    env_kwargs=kwargs,
                    limit=n,
                    seed=cfg.seed,
                    params=params,
                    batch_episodes=64,
                    max_context=cfg.rollout.max_context,
                    out=out,
                    env_timeout=cfg.rollout.env_timeout,
                )
                success, own = m["accuracy"], dict(m.get("env") or {})
            figures[f"{prefix}{p.name}_success"] = float(success)
            figures.update({f"{prefix}{p.name}_{k}": float(v) for k, v in own.items() if isinstance(v, (int, float))})
        return figures
