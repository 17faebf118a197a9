"""SWiRL's step-wise RL (docs/algorithms.md §1, §10); its SFT baseline is ``sft`` (:mod:`turnrl.methods.offline`).

* ``swirl`` — J(θ) = E_{s∼D, a∼π_θ(·|s)}[R(a | s)]: each training step draws ``rollout.prompts_per_step`` stored
  states s (the token prefixes of the steps of filtered trajectories, ``data.path``), samples ``rollout.group_size``
  fresh actions a from the current policy for each, rewards each action alone (``reward``: ``rule`` — the rule-based
  process scorer; ``judge`` — the generative process judge with the agent ``judge``; ``rollout`` — the outcome of
  playing the episode on from s ⊕ a with the current policy), subtracts a per-state baseline over the G samples
  (``baseline``: ``rloo`` leave-one-out, or ``normalize`` GRPO's mean/std) and takes the clipped surrogate, with
  an optional k3 KL to the reference. With ``final_outcome`` w [ours] a final step's judged reward becomes
  GOOD × (1 − w + w·R_env) (w = 1: process ∧ outcome). The experience source is
  :class:`turnrl.methods.swirl.source.StateSource`. With ``data_action`` [ours] the stored step itself takes the place of
  one of the G samples: judged like them, its advantage is positive exactly when it beats the policy's own steps, so
  a policy that never writes a good step (a small model without demonstrations) is pulled toward the data's steps
  until its own are as good.
* ``sft`` — the paper's baseline: NLL on the step tokens of the stored (filtered, decomposed) rows, every row.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, model_validator

from turnrl.methods.swirl.judges import StepJudgeSpec
from turnrl.rl.algorithms.base import PolicyGradient, PolicyGradientConfig
from turnrl.rl.core.batch import Batch
from turnrl.rl.formulas.advantages import group_normalize, leave_one_out


class SWiRLConfig(PolicyGradientConfig):
    """SWiRL's options (docs/algorithms.md §1, §10)."""

    name: Literal["swirl"] = "swirl"
    reward: Literal["rule", "judge", "rollout"] = Field(
        "rule",
        description=(
            "the step reward: rule (rule-based process scorer), judge (LLM process judge: set `judge`), rollout (the "
            "outcome of finishing the episode from the sampled step with the current policy)"
        ),
    )
    judge: StepJudgeSpec | None = Field(
        None,
        description="the process judge for reward: judge — a registered judge's name "
        "(STEP_JUDGES: rule, or a plug-in's) or an agent spec (e.g. "
        "openai:http://127.0.0.1:8000/v1#MODEL, hf:PATH, smollm2-135m-instruct)",
    )
    judge_options: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "options of the step judge: for rule, max_answer_words (default 8) and max_searches (default none: how "
            "many searches of an episode can be GOOD); for an LLM judge, those of turnrl.verifiers.judge"
        ),
    )
    baseline: Literal["rloo", "normalize"] = Field(
        "rloo", description="per-state baseline over the G samples: leave-one-out mean, or GRPO's (R − mean) / std"
    )
    execute: bool = Field(
        True,
        description="run each sampled step in the state's replayed environment, so the "
        "judge sees its tool result (and rollout can continue from it)",
    )
    data_action: bool = Field(
        False,
        description=(
            "[ours] one of each state's G samples is the stored step itself (rewarded like the others, its old "
            "log-probabilities from the current policy): a policy that never samples a good step still has one to "
            "reinforce (off-policy guidance, as in LUFFY, without its policy shaping)"
        ),
    )
    final_outcome: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description=(
            "[ours] the weight w of the environment's own reward R (e.g. the answer's F1 against the gold one) in the "
            "reward of a step that ends the episode: GOOD × (1 − w + w·R). 0: the judge alone; 1: GOOD and right "
            "(process AND outcome); between: a grounded answer earns 1 − w, a right one up to 1. Needs reward rule or "
            "judge"
        ),
    )

    @model_validator(mode="after")
    def _judge(self) -> SWiRLConfig:
        if self.reward == "judge" and not self.judge:
            raise ValueError(
                "swirl with reward: judge needs `judge`: the agent that judges each step (an agent "
                "spec such as openai:URL#MODEL or hf:PATH); or use reward: rule"
            )
        if self.reward == "rule" and self.judge_options:
            from turnrl.methods.swirl.judges import RuleStepJudge

            try:
                RuleStepJudge(**self.judge_options)
            except TypeError as e:
                raise ValueError(
                    f"judge_options for the rule judge: {e} (it takes max_answer_words, max_searches)"
                ) from e
        if self.final_outcome > 0 and (self.reward == "rollout" or not self.execute):
            raise ValueError(
                "swirl final_outcome weighs the judge's label of an answer by the environment's reward "
                "for it: it needs reward rule or judge, and execute on (rollout rewards are outcomes "
                "already)"
            )
        if self.reward == "rollout" and not self.execute:
            raise ValueError("swirl with reward: rollout plays the episode on from the sampled step: keep execute on")
        return self


def state_advantages(scores: torch.Tensor, group_ids: torch.Tensor, baseline: str) -> torch.Tensor:
    """``(B,)`` advantages of G sampled steps per state (docs/algorithms.md §1 [recon]): leave-one-out or normalized."""
    return leave_one_out(scores, group_ids) if baseline == "rloo" else group_normalize(scores, group_ids)


class SWiRL(PolicyGradient):
    """Step-wise RL on stored states (see the module docstring)."""

    name = "swirl"
    Config = SWiRLConfig
    source: ClassVar[str] = "turnrl.methods.swirl.source:StateSource"
    cfg: SWiRLConfig

    def advantages(
        self,
        batch: Batch,
        max_new_tokens: int,
        values: torch.Tensor | None = None,
        bootstrap: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, None]:
        """Each sampled step's baseline-subtracted reward on its tokens ``(B, T)``."""
        return state_advantages(batch.scores, batch.group_ids, self.cfg.baseline)[:, None] * batch.loss_mask, None
