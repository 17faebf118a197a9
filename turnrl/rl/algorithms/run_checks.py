"""The checks of a whole run config against its algorithm: what the algorithm and its experience source refuse,
and the combinations of run options that only some algorithms can train (a nucleus, process rewards, history
rewriting, agent programs). The registry installs :func:`check_run_config` as the configuration's hook
(:func:`turnrl.rl.config.algorithm.install_algorithm_hooks`), so :class:`~turnrl.rl.config.TrainConfig` runs it while
it validates.
"""

from __future__ import annotations

from turnrl.rl.algorithms.base import Algorithm
from turnrl.rl.config import TrainConfig, check_guard


def check_run_config(cfg: TrainConfig, cls: type[Algorithm]) -> None:
    """Raise ValueError where ``cfg`` cannot run with ``cls``, the algorithm its ``algorithm.name`` registers."""
    cls.check_config(cfg)  # its own checks and its experience source's
    check_guard(cfg, cls.source_class().sampled)
    if cfg.rollout.top_p < 1 and cls.source_class().sampled and not cfg.optim.recompute_logprobs:
        raise ValueError(
            f"rollout.top_p={cfg.rollout.top_p} samples from the nucleus, renormalized, so the "
            "sampler's log-probabilities (μ) are not the policy's and a ratio over them is off from "
            "the first step: set optim.recompute_logprobs=true (the learner's π_old in the ratio; "
            "algorithm.behaviour_is_cap then weighs by π_old/μ), or rollout.top_p=1"
        )
    if cfg.process_reward is not None and cls.critic is Algorithm.critic:
        raise ValueError(
            f"process_reward puts rewards on the line ends inside a reply, which only an algorithm "
            f"with a critic credits token by token; {cfg.algorithm.name!r} has none: use ppo or "
            "vapo"
        )
    if cfg.rollout.context is not None and (cls.source != Algorithm.source or cfg.placement != "local"):
        raise ValueError(
            "rollout.context (history rewriting) runs in the on-policy source's local rollouts: use "
            "placement=local and an algorithm that samples whole episodes (grpo, dapo, rloo, "
            "reinforce, ppo, vapo)"
        )
    if cfg.rollout.context is not None and cfg.program is not None:
        raise ValueError(
            "rollout.context rewrites turnrl's own environments' histories; a `program` manages its "
            "own history (the gateway records its rewrites as segments): drop one"
        )
    if cfg.program is not None:
        if cls.source != Algorithm.source:  # the on-policy source (its runner plays the program)
            raise ValueError(
                f"algorithm {cfg.algorithm.name!r} does not sample whole episodes on-policy, which "
                "is what a `program` gives; pick grpo, dapo, rloo, reinforce, ppo or vapo"
            )
        if cls.rollout_hook is not Algorithm.rollout_hook:
            raise ValueError(
                f"algorithm {cfg.algorithm.name!r} rewrites turns while they are sampled, which "
                "cannot be done to a program's calls"
            )
    if cfg.rollout.tree is not None:
        check_tree(cfg, cls)


def check_tree(cfg: TrainConfig, cls: type[Algorithm]) -> None:
    """What tree rollouts (``rollout.tree``) cannot be combined with, each refused with the reason."""
    if cls.source != Algorithm.source:
        raise ValueError(
            f"rollout.tree grows episodes as trees in the on-policy source; algorithm "
            f"{cfg.algorithm.name!r} samples otherwise (T-PPO's windows cut episodes across steps, "
            "offline and step-wise algorithms read stored data): pick grpo, dapo, rloo, reinforce, ppo or "
            "vapo"
        )
    if cls.rollout_hook is not Algorithm.rollout_hook:
        raise ValueError(
            f"algorithm {cfg.algorithm.name!r} rewrites turns while they are sampled (a rollout hook), "
            "which is not defined on a tree's shared history: drop rollout.tree"
        )
    if cfg.program is not None:
        raise ValueError(
            "rollout.tree forks turnrl's environments mid-episode; a `program` runs its own episode "
            "through the gateway, which cannot be forked: drop one"
        )
    if cfg.multi_agent is not None:
        raise ValueError(
            "rollout.tree grows one agent's episodes; games with several agents are played by their "
            "own source: drop one"
        )
