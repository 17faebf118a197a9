"""PAG: train the policy as its own generative verifier (docs/algorithms.md §7; Jiang et al., 2025, arXiv 2506.10406).

Episodes come from :class:`~turnrl.envs.formats.self_verify.SelfVerify` (``turnrl/*-PAG-v0``): answer (role "policy") →
verify (role "verifier") → revise (role "policy", only after "wrong"), each turn's reward on its last token.

* ``pag`` — PPO with a critic (a value head on the policy, or ``critic_model``), **turn-independent** GAE with
  γ = λ = 1 (values and advantages never cross a turn boundary: each turn's advantage is its own reward minus the
  critic's baseline), **RoleAdvNorm** (advantages whitened separately over policy-turn and verifier-turn tokens),
  clip 0.2/0.28, token-mean, no KL. Ablations, one switch each: ``turn_independent: false`` (GAE flows across
  turns — the paper's verifier then says "wrong" to everything), ``reward: final-only`` (only the final answer's
  correctness, on the episode's last token — the verifier then says "correct" to everything) and
  ``role_norm: false`` (one whitening over all tokens). Option [ours]: ``verifier_balance: true`` weighs each
  verifier turn's reward by the inverse share of its answer's truth in the batch, so that the verifier's objective is
  its balanced accuracy: a verdict that ignores the answer ("correct" to everything) then earns nothing, and only
  telling right answers from wrong ones is reinforced (see :func:`balance_verifier_rewards`). Option [ours]:
  ``verdict_explore: p`` replaces the sampled verdict of a share p of verify turns by the other one, scored by the
  current policy and played out (:mod:`turnrl.methods.pag.explore`): the verifier sees the reward of a verdict it never
  samples. Option [ours]: ``verifier_baseline: truth`` normalizes the advantages of verify turns that judged right
  first answers apart from those that judged wrong ones (:func:`truth_roles`): within each truth every verdict is
  measured against the others on the same truth, so a constant verdict earns zero net advantage on either truth;
  with ``verifier_balance`` as well, the weights go on the normalized advantages instead of the rewards
  (:func:`balance_truth_advantages`: the normalization would divide a reward weight out, and the majority truth
  would still pull harder).
* ``pag-grpo`` — the critic-free comparison: each turn's reward normalized within its group over the turns of the
  same role (policy turns together, verifier turns together), on that turn's tokens only; GRPO's surrogate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import BaseModel, Field, model_validator

from turnrl.methods.pag.explore import verdict_explorer
from turnrl.rl.algorithms.grpo import GRPO, GRPOConfig
from turnrl.rl.algorithms.ppo import PPO, PPOConfig
from turnrl.rl.core.batch import Batch
from turnrl.rl.formulas.advantages import group_normalize, masked_whiten, role_whiten
from turnrl.rl.formulas.losses import AggMode

if TYPE_CHECKING:
    from turnrl.rollout.engine import Rewrite


class VerifierOptions(BaseModel):
    """The verifier options [ours] that ``pag`` and ``pag-grpo`` share."""

    verdict_explore: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description=(
            "[ours] the share of verify turns whose sampled verdict is replaced by the other one (scored by the current "
            "policy, played out and rewarded like any verdict): the verifier learns the reward of a verdict it never "
            "samples (turnrl.methods.pag.explore); held-out evaluations never explore"
        ),
    )
    verifier_balance: bool = Field(
        False,
        description=(
            "[ours] weigh verifier rewards by the inverse share of their answer's truth in the batch (the verifier "
            "optimizes balanced accuracy); with verifier_baseline: truth the weights go on the normalized advantages"
        ),
    )
    verifier_baseline: Literal["role", "truth"] = Field(
        "role",
        description=(
            "[ours] what verify turns' advantages are normalized against: all verify turns (role, RoleAdvNorm as in "
            "the paper), or the verify turns that judged a first answer of the same truth (truth: right-answer and "
            "wrong-answer verdicts normalized apart, so a verdict that ignores the answer earns zero net advantage)"
        ),
    )

    @model_validator(mode="after")
    def _truth_needs_roles(self) -> VerifierOptions:
        if self.verifier_baseline == "truth" and not getattr(self, "role_norm", True):
            raise ValueError(
                "verifier_baseline: truth normalizes verify turns per truth inside the per-role "
                "normalization; it needs role_norm: true"
            )
        return self


class PAGConfig(PPOConfig, VerifierOptions):
    """PAG's options (docs/algorithms.md §7 defaults)."""

    name: Literal["pag"] = "pag"  # type: ignore[assignment]  # its own name: the discriminator
    lam_actor: float = Field(1.0, ge=0, le=1)
    lam_critic: float = Field(1.0, ge=0, le=1)
    eps_high: float = Field(0.28, gt=0)
    agg: AggMode = "token-mean"
    turn_independent: bool = Field(True, description="cut GAE at turn boundaries (ablation: false)")
    whiten_advantages: bool = Field(False, description="one whitening over all tokens (used when role_norm is off)")
    role_norm: bool = Field(
        True, description="RoleAdvNorm: whiten policy-turn and verifier-turn advantages separately (ablation: false)"
    )
    reward: Literal["per-turn", "final-only"] = Field(
        "per-turn", description="each turn's own reward, or only the final answer's correctness (ablation)"
    )


class PAGGRPOConfig(GRPOConfig, VerifierOptions):
    """``pag-grpo``'s options: GRPO's, with DAPO's clip-higher and token-mean as in PAG."""

    name: Literal["pag-grpo"] = "pag-grpo"  # type: ignore[assignment]  # its own name: the discriminator
    eps_high: float = Field(0.28, gt=0)
    agg: AggMode = "token-mean"
    role_norm: bool = Field(
        True,
        description="normalize each turn's reward over the group's turns of its role "
        "(false: over all of the group's turns)",
    )


def final_only_rewards(loss_mask: torch.Tensor, correct: torch.Tensor) -> torch.Tensor:
    """PAG's "final-only" ablation (§7): the final answer's correctness (``(B,)``) on each sequence's last generated
    token, no other reward."""
    positions = torch.arange(loss_mask.shape[1], device=loss_mask.device).expand_as(loss_mask)
    last = torch.where(loss_mask.bool(), positions, torch.full_like(positions, -1)).max(-1).values
    out = torch.zeros(loss_mask.shape, dtype=torch.float32, device=loss_mask.device)
    rows = torch.nonzero(last >= 0).squeeze(-1)
    out[rows, last[rows]] = correct[rows].to(out.dtype)
    return out


def spread_verdict_reward(
    token_rewards: torch.Tensor, turn_ids: torch.Tensor, roles: torch.Tensor, mask: torch.Tensor, verifier_role: int = 1
) -> torch.Tensor:
    """Every verifier turn of a sequence rewarded with its verdict (§7 with verify tools [ours]).

    With ``verify_tools`` the verify phase is several verifier turns — tool calls, then the verdict — and the
    environment can reward only the verdict turn (R_v, known last). Each verifier turn's reward becomes the sum of
    the sequence's verifier rewards (R_v: the tool turns' own are 0), on that turn's last token, so that with
    turn-independent advantages a tool call is credited with the verdict it led to. A sequence with one verifier
    turn is unchanged; other roles' rewards are untouched.
    """
    m = mask.bool() & (turn_ids >= 0)
    ver = m & (roles == verifier_role)
    if not ver.any():
        return token_rewards
    total = (token_rewards * ver).sum(-1, keepdim=True)  # (B, 1) R_v
    nxt = torch.nn.functional.pad(turn_ids[:, 1:], (0, 1), value=-1)  # the next position's turn (−1 past the end)
    nxt_in = torch.nn.functional.pad(m[:, 1:], (0, 1), value=False)
    last = ver & ~(nxt_in & (nxt == turn_ids))  # the last generated token of each verifier turn
    return torch.where(
        ver, torch.where(last, total.expand_as(token_rewards), torch.zeros_like(token_rewards)), token_rewards
    )


def first_answer_right(token_rewards: torch.Tensor, turn_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B,)`` bool: the first answer (turn 0) was right — its reward R_y is 1 (§7); what a verdict judges."""
    return (token_rewards * (mask.bool() & (turn_ids == 0))).sum(-1) > 0.5


def truth_roles(roles: torch.Tensor, right: torch.Tensor, mask: torch.Tensor, verifier_role: int = 1) -> torch.Tensor:
    """Roles with the verify turns split by the truth they judged (§7, option ``verifier_baseline: truth`` [ours]).

    Verifier tokens of rows whose first answer was wrong get a role of their own (one above every role present), so
    a per-role normalization — RoleAdvNorm's whitening, ``pag-grpo``'s group normalization — measures each verdict
    against the verdicts on answers of the same truth. A verdict that ignores the answer then has the same reward as
    every other verdict of its truth and zero net advantage on each, and only verdicts that beat their truth's
    average gain: the verifier's baseline no longer rewards saying the majority truth's verdict. Other roles, and
    tokens outside ``mask``, keep theirs.
    """
    wrong_role = int(roles.max()) + 1 if roles.numel() else verifier_role + 1
    split = mask.bool() & (roles == verifier_role) & ~right[:, None]
    return torch.where(split, torch.full_like(roles, max(wrong_role, verifier_role + 1)), roles)


def truth_weights(right: torch.Tensor, has_verifier: torch.Tensor) -> torch.Tensor | None:
    """``(B,)`` weights ``n / (2 n_c)`` that make both truths weigh the same (§7, option ``verifier_balance`` [ours]).

    ``n`` is the number of rows with a verifier turn, ``n_c`` those among them whose first answer has truth ``c``
    (``right``). None when only one truth occurs (nothing to balance).
    """
    n_right, n_wrong = int((has_verifier & right).sum()), int((has_verifier & ~right).sum())
    if n_right == 0 or n_wrong == 0:
        return None
    n = n_right + n_wrong
    return torch.where(right, n / (2 * n_right), n / (2 * n_wrong))


def balance_verifier_rewards(
    token_rewards: torch.Tensor, turn_ids: torch.Tensor, roles: torch.Tensor, mask: torch.Tensor, verifier_role: int = 1
) -> torch.Tensor:
    """Weigh each verifier turn's reward by the inverse share of its answer's truth in the batch (§7, option [ours]).

    The truth a verdict judges is the first answer's reward (turn 0: R_y = 1 if correct). With ``n`` verifier turns,
    ``n_c`` of them judging answers of truth ``c``, a verifier reward is multiplied by ``n / (2 n_c)``: both truths
    then weigh the same in the batch, a verdict that ignores the answer has the same expected reward whatever it says,
    and only verdicts that depend on the answer's truth gain. Without it a verifier whose verdicts cannot yet tell the
    truths apart is pulled to the majority truth's verdict (the collapse §7 describes). Rows without a verifier turn,
    and a batch in which only one truth occurs, are returned unchanged. Other roles' rewards are untouched.
    """
    return _weigh_verifier_turns(token_rewards, token_rewards, turn_ids, roles, mask, verifier_role)


def balance_truth_advantages(
    adv: torch.Tensor,
    token_rewards: torch.Tensor,
    turn_ids: torch.Tensor,
    roles: torch.Tensor,
    mask: torch.Tensor,
    verifier_role: int = 1,
) -> torch.Tensor:
    """``verifier_balance`` under ``verifier_baseline: truth`` (§7, options [ours]): the weights on the advantages.

    A per-truth normalization gives each truth's verify turns mean-0, variance-1 advantages, so a weight put on the
    rewards before it is divided out again — yet the truth with more rows still moves the shared weights more: a
    verifier that says "wrong" half the time whatever the truth gets +1 for "wrong" on every wrong answer and −1 on
    every right one, a net pull to "wrong" when wrong answers are the majority. Multiplying each verify turn's
    normalized advantages by ``n / (2 n_c)`` (:func:`truth_weights`) makes both truths pull equally: a verdict that
    ignores the truth then has zero net push, whatever the shares. ``roles`` are the batch's own (not split by
    truth); other roles' advantages, and a batch with one truth, are unchanged.
    """
    return _weigh_verifier_turns(adv, token_rewards, turn_ids, roles, mask, verifier_role)


def _weigh_verifier_turns(
    x: torch.Tensor,
    token_rewards: torch.Tensor,
    turn_ids: torch.Tensor,
    roles: torch.Tensor,
    mask: torch.Tensor,
    verifier_role: int,
) -> torch.Tensor:
    """``x`` with every verifier token multiplied by its row's :func:`truth_weights` (the truth read from
    ``token_rewards``' first turn); unchanged where only one truth occurs."""
    ver = mask.bool() & (roles == verifier_role)
    weight = truth_weights(first_answer_right(token_rewards, turn_ids, mask), ver.any(-1))
    if weight is None:
        return x
    return torch.where(ver, x * weight.to(x.dtype)[:, None], x)


def turn_group_advantages(
    token_rewards: torch.Tensor,
    turn_ids: torch.Tensor,
    roles: torch.Tensor,
    group_ids: torch.Tensor,
    mask: torch.Tensor,
    by_role: bool = True,
) -> torch.Tensor:
    """Per-turn group-relative advantages (``pag-grpo``, §7 with §0's group normalization).

    Each turn's reward (the sum of its tokens' rewards) is normalized against the turns of the same group — and,
    with ``by_role``, of the same role — and placed on every generated token of that turn. Nothing crosses turns.
    """
    m = mask.bool() & (turn_ids >= 0)
    B = token_rewards.shape[0]
    K = int(turn_ids[m].max()) + 1 if m.any() else 1
    idx = turn_ids.clamp(min=0)
    zero = torch.zeros(B, K, dtype=torch.float32, device=token_rewards.device)
    reward = zero.scatter_add(1, idx, (token_rewards * m).float())
    present = zero.scatter_add(1, idx, m.float()) > 0
    role = torch.zeros(B, K, dtype=torch.long, device=token_rewards.device).scatter(1, idx, torch.where(m, roles, 0))
    n_roles = int(roles.max()) + 1 if by_role and roles.numel() else 1
    keys = group_ids[:, None].expand(B, K) * max(n_roles, 1) + (role if by_role else 0)
    adv = torch.zeros_like(reward)
    adv[present] = group_normalize(reward[present], keys[present])
    return adv.gather(1, idx) * m


class ExploresVerdicts:
    """What ``pag`` and ``pag-grpo`` share: verdict exploration (``verdict_explore`` > 0), the verifier's rewards
    and balance (``verifier_balance``) and its baseline (``verifier_baseline``)."""

    cfg: VerifierOptions

    def roles(self, batch: Batch) -> torch.Tensor:
        """The roles advantages are normalized over: the batch's, verify turns split by truth where asked."""
        if self.cfg.verifier_baseline == "role":
            return batch.roles
        return truth_roles(
            batch.roles, first_answer_right(batch.token_rewards, batch.turn_ids, batch.loss_mask), batch.loss_mask
        )

    def verifier_rewards(self, batch: Batch) -> torch.Tensor:
        """Each turn's reward on its last token, every verifier turn credited with the verdict
        (:func:`spread_verdict_reward`); with ``verifier_balance`` under the ``role`` baseline, weighed by truth
        (:func:`balance_verifier_rewards` — under ``truth`` the weights go on the advantages, :meth:`balance`)."""
        rewards = spread_verdict_reward(batch.token_rewards, batch.turn_ids, batch.roles, batch.loss_mask)
        if self.cfg.verifier_balance and self.cfg.verifier_baseline == "role":
            return balance_verifier_rewards(rewards, batch.turn_ids, batch.roles, batch.loss_mask)
        return rewards

    def balance(self, adv: torch.Tensor, batch: Batch) -> torch.Tensor:
        """With ``verifier_balance`` and ``verifier_baseline: truth``: both truths' normalized verdict advantages
        weighed equally (:func:`balance_truth_advantages`); else ``adv`` unchanged (under ``role`` the balance is
        on the rewards, before the normalization)."""
        if not (self.cfg.verifier_balance and self.cfg.verifier_baseline == "truth"):
            return adv
        return balance_truth_advantages(adv, batch.token_rewards, batch.turn_ids, batch.roles, batch.loss_mask)

    def rollout_hook(self, agent: Any, temperature: float, seed: int) -> Rewrite | None:
        """A :class:`~turnrl.methods.pag.explore.VerdictExplorer` for one generation batch, or None."""
        return verdict_explorer(self.cfg.verdict_explore, agent, temperature, seed)


class PAG(ExploresVerdicts, PPO):
    """PPO for self-verification episodes (see the module docstring)."""

    name = "pag"
    Config = PAGConfig
    cfg: PAGConfig

    def token_rewards(self, batch: Batch) -> torch.Tensor:
        """Each turn's reward on its last token, or (``reward: final-only``) the final answer's correctness."""
        if self.cfg.reward == "final-only":
            return final_only_rewards(batch.loss_mask, batch.correct)
        return self.verifier_rewards(batch)

    def normalize(self, adv: torch.Tensor, batch: Batch) -> torch.Tensor:
        """RoleAdvNorm (``role_norm``; verify turns split by truth with ``verifier_baseline: truth``), else one
        whitening (``whiten_advantages``), else none."""
        if self.cfg.role_norm:
            return self.balance(role_whiten(adv, batch.loss_mask, self.roles(batch)), batch)
        return masked_whiten(adv, batch.loss_mask) if self.cfg.whiten_advantages else adv


class PAGGRPO(ExploresVerdicts, GRPO):
    """Critic-free multi-turn GRPO on PAG episodes (see the module docstring)."""

    name = "pag-grpo"
    Config = PAGGRPOConfig
    cfg: PAGGRPOConfig

    def advantages(
        self,
        batch: Batch,
        max_new_tokens: int,
        values: torch.Tensor | None = None,
        bootstrap: torch.Tensor | None = None,
        ref_logp: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, None]:
        """Per-turn, per-role group-normalized rewards on each turn's tokens."""
        adv = turn_group_advantages(
            self.verifier_rewards(batch),
            batch.turn_ids,
            self.roles(batch),
            batch.group_ids,
            batch.loss_mask,
            self.cfg.role_norm,
        )
        return self.balance(adv, batch), None
