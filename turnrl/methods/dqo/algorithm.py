"""DQO: offline soft-Q learning on sampled, token-exact Trajectories (docs/algorithms.md §2; arXiv 2410.09302).

Modules (§2): the policy π_θ, a frozen reference π_ref, and a value model V_φ — a value head on the policy's
(detached) features, or a separate small model (``critic_model``); the Q-function is ``Q_θ(s, a) = β log
π_θ(a|s)/π_ref(a|s) + V_φ(s)``. Training is offline: epochs over a dataset sampled once (``data:`` in the run
config, e.g. from ``turnrl rollout``); there are no rollouts.

Each learner step (formulas in :mod:`turnrl.methods.dqo.soft_q`, which states the token MDP):

1. ``prepare`` (before any update, whole batch): ``V_φ(s_h)`` at every action and ``V_φ(s_{h+1})`` of the state after
   it — the value at the row's next generated token (environment and template tokens are part of the transition),
   0 after a terminal action, the critic's value after the last token for an episode cut by a limit. These are the
   stop-gradient values of both losses (a target critic refreshed every step).
2. per micro-batch, with the current π_θ (detached in the targets): soft rewards ``r̃ = r − β log π_θ/π_ref``; the
   λ-return recursion ``G^λ_h = r̃_h + (1−λ) V(s_{h+1}) + λ G^λ_{h+1}``; importance weights ``min(π_θ/μ, clip)`` from
   the stored behaviour log-probabilities (per token or per trajectory; 1 on-policy);
3. loss = policy loss ``w·(β log ρ_h + sg V(s_h) − r_h − sg Ĝ(s_{h+1}))²`` + ``vf_coef`` · value loss
   ``w·(V_φ(s_h) − sg G^λ(s_h))²``, aggregated over actions (``agg``).

Rewards: each turn's reward on its last generated token; with ``process_reward_coef > 0`` also the process rewards
an episode carries in ``metadata["process_rewards"]`` — ``[[token_index, reward], …]`` at step boundaries (the
generated token that ends a step) — scaled by the coefficient: the episode's turns are split at those tokens so each
step's reward sits on its last token ([recon]: the paper's synthetic process rewards are given at step ends; how
they are produced, e.g. by Monte-Carlo continuation from each step, is up to the data).

[recon] choices, all stated in :mod:`turnrl.methods.dqo.soft_q`: the policy target's λ-tail, importance weights on the
squared residuals (not inside the returns), truncation from above only. Defaults (§2, unverified): λ = 1, β = 0.05;
the paper used policy lr 5e-7 and value lr 1e-5 for 7B models (set ``optim.lr`` and ``critic_lr``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from pydantic import Field

from turnrl.methods.dqo.soft_q import (
    ImportanceMode,
    dqo_policy_loss,
    dqo_value_loss,
    importance_weights,
    lambda_returns,
    next_state_values,
    soft_rewards,
)
from turnrl.methods.offline.base import OfflineAlgorithm
from turnrl.rl.algorithms.base import AlgorithmConfig, CriticSpec, Experience, Forward
from turnrl.rl.core.batch import Batch
from turnrl.rl.formulas.losses import AggMode, agg_count
from turnrl.rl.sources.replay import OfflineDataError
from turnrl.types import Message, Trajectory, Turn


class DQOConfig(AlgorithmConfig):
    """DQO's options (docs/algorithms.md §2)."""

    name: Literal["dqo"] = "dqo"
    beta: float = Field(0.05, gt=0, description="β: the KL coefficient folded into the reward (§2: 0.03–0.1)")
    lam: float = Field(1.0, ge=0, le=1, description="λ of the λ-returns (the paper: λ = 1 beat 0.95)")
    importance_weights: ImportanceMode = Field(
        "token",
        description=(
            "π_θ/μ from the stored behaviour log-probabilities, per token or per trajectory; none = assume the data "
            "is on-policy (every weight 1; for data without behaviour log-probabilities)"
        ),
    )
    is_clip: float = Field(2.0, ge=1, description="importance weights are truncated at this value")
    vf_coef: float = Field(1.0, ge=0, description="weight of the value loss")
    agg: AggMode = Field("token-mean", description="aggregation of both losses over the actions")
    critic_model: str | None = Field(
        None,
        description="a separate value model (agent spec sharing the policy's "
        "tokenizer, e.g. a smaller model); default: a value head on the policy",
    )
    critic_lr: float | None = Field(
        None, gt=0, description="the value model's lr (§2 suggests ~20 x the policy's); default 2 x optim.lr"
    )
    process_reward_coef: float = Field(
        0.0,
        ge=0,
        description="scale of the process rewards an episode carries in "
        "metadata['process_rewards'] ([[token_index, reward], ...]); 0 = off",
    )


def missing_behaviour_logprobs(trajectories: Sequence[Trajectory]) -> int:
    """How many episodes have generated tokens but no behaviour log-probabilities (every one exactly 0.0, as a
    scripted or text-only agent records them)."""
    n = 0
    for t in trajectories:
        gen = [lp for lp, m in zip(t.logprobs or [], t.loss_mask or []) if m]
        n += bool(gen) and all(lp == 0.0 for lp in gen)
    return n


def with_process_rewards(traj: Trajectory, coef: float) -> Trajectory:
    """The episode with each turn split at its step boundaries, so that ``coef`` × each process reward of
    ``metadata["process_rewards"]`` sits on the generated token that ends its step (see the module docstring).

    The pieces before a turn's last step are turns with empty text and the step's reward; the last piece keeps the
    turn's text, observation, info and reward (plus a process reward on the turn's own last token).

    Raises:
        OfflineDataError: a boundary that is not a generated token of some turn.
    """
    marks = traj.metadata.get("process_rewards") or []
    if not marks or coef == 0:
        return traj
    spans = [t.token_span for t in traj.turns if t.token_span is not None]
    bonus: dict[int, float] = {}
    for idx, reward in marks:
        if not any(s <= idx < e for s, e in spans):
            raise OfflineDataError(
                f"episode {traj.id}: process reward at token {idx}, which is not a generated token "
                f"of any turn (turn spans {spans})"
            )
        bonus[int(idx)] = bonus.get(int(idx), 0.0) + coef * float(reward)
    turns: list[Turn] = []
    for turn in traj.turns:
        if turn.token_span is None:
            turns.append(turn.model_copy(update={"index": len(turns)}))
            continue
        start, end = turn.token_span
        for cut in sorted(i for i in bonus if start <= i < end - 1):
            turns.append(
                Turn(
                    index=len(turns),
                    role=turn.role,
                    action=Message(role="assistant", content=""),
                    token_span=(start, cut + 1),
                    reward=bonus[cut],
                    info={"process_step": True},
                )
            )
            start = cut + 1
        turns.append(
            turn.model_copy(
                update={
                    "index": len(turns),
                    "token_span": (start, end),
                    "reward": turn.reward + bonus.get(end - 1, 0.0),
                }
            )
        )
    return traj.model_copy(update={"turns": turns})


class DQO(OfflineAlgorithm):
    """Direct Q-function Optimization (see the module docstring)."""

    name = "dqo"
    Config = DQOConfig
    cfg: DQOConfig

    def critic(self) -> CriticSpec:
        """The value model V_φ: a value head on the policy, or ``critic_model``, at ``critic_lr``."""
        return CriticSpec(self.cfg.critic_model, self.cfg.critic_lr)

    @property
    def needs_reference(self) -> bool:
        """The soft reward is measured against a frozen reference."""
        return True

    @property
    def uses_behaviour_logprobs(self) -> bool:
        """The importance weights π_θ/μ read the stored behaviour log-probabilities (unless switched off)."""
        return self.cfg.importance_weights != "none"

    def check_data(self, trajectories: Sequence[Trajectory]) -> None:
        """Behaviour log-probabilities for the importance weights; process rewards if they are switched on.

        Raises:
            OfflineDataError: episodes without behaviour log-probabilities (unless ``importance_weights: none``),
                or ``process_reward_coef > 0`` and no episode carries process rewards.
        """
        if self.cfg.importance_weights != "none" and (n := missing_behaviour_logprobs(trajectories)):
            raise OfflineDataError(
                f"{n} of {len(trajectories)} episodes carry no behaviour log-probabilities (every generated token's "
                f"logprob is 0), but dqo's importance weights π_θ/μ need them ({self.cfg.importance_weights!r}); "
                "produce the data with `turnrl rollout` (it records the sampling agent's log-probabilities), or set "
                "algorithm.importance_weights=none to assume the data is on-policy (every weight 1)"
            )
        if self.cfg.process_reward_coef > 0 and not any(t.metadata.get("process_rewards") for t in trajectories):
            raise OfflineDataError(
                "algorithm.process_reward_coef > 0 but no episode carries process rewards "
                "(metadata['process_rewards'] = [[token_index, reward], ...]); set it to 0 or "
                "add them to the data"
            )

    def training_view(self, traj: Trajectory) -> Trajectory:
        """With process rewards on, each step's reward on its last token (:func:`with_process_rewards`)."""
        return with_process_rewards(traj, self.cfg.process_reward_coef)

    def advantages(
        self,
        batch: Batch,
        max_new_tokens: int,
        values: torch.Tensor | None = None,
        bootstrap: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(zeros, V(s_{h+1}))``: DQO estimates no advantages (its soft advantage β log π_θ/π_ref is learned);
        the ``returns`` slot carries the next-state values of the prepare-time critic (the sg targets' values)."""
        if values is None:
            raise ValueError("dqo needs the value model's values")
        return torch.zeros_like(batch.loss_mask), next_state_values(values, batch.loss_mask, bootstrap)

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        """``policy``: the normalizer of both losses over the actions."""
        return {"policy": agg_count(batch.loss_mask, self.cfg.agg)}

    def loss(
        self, fwd: Forward, exp: Experience, counts: dict[str, torch.Tensor], train_policy: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Policy loss + ``vf_coef`` · value loss of the micro-batch (see the module docstring)."""
        if fwd.values is None or exp.old_values is None or exp.returns is None or exp.ref_logp is None:
            raise ValueError("dqo needs values, prepare-time values and next values, and reference log-probabilities")
        cfg, b = self.cfg, exp.batch
        m, rewards = b.loss_mask, b.token_rewards
        log_ratio = (fwd.logp - exp.ref_logp) * m
        soft_r = soft_rewards(rewards, log_ratio.detach(), m, cfg.beta)
        G, N = lambda_returns(soft_r, exp.returns, m, cfg.lam)
        w = importance_weights(fwd.logp, b.behaviour_logp, m, cfg.importance_weights, cfg.is_clip)  # μ, never π_old
        vloss, metrics = dqo_value_loss(fwd.values, G, m, w, cfg.agg, counts["policy"])
        ploss, pmetrics = dqo_policy_loss(
            log_ratio, exp.old_values, rewards, N, m, w, cfg.beta, cfg.agg, counts["policy"]
        )
        n = m.sum().clamp(min=1)
        metrics.update(
            pmetrics,
            value_loss=vloss.detach(),
            policy_loss=ploss.detach(),
            is_weight_mean=(w * m).sum() / n,
            is_clip_frac=((w >= cfg.is_clip - 1e-6).float() * m).sum() / n,
        )
        if not train_policy:
            return cfg.vf_coef * vloss, metrics
        return ploss + cfg.vf_coef * vloss, metrics
