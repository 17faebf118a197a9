"""The learner's weights and state (:class:`turnrl.rl.core.learner.Learner` derives from :class:`WeightsAndState`):
the new weights handed to rollout workers with their version (the adapters alone of a LoRA policy), and everything a
resumed run needs to continue exactly — the policy (or its adapters), optimizer, critic or value head, scheduler,
version and update count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from turnrl.lora import adapter_state, is_lora, policy_state, restore

if TYPE_CHECKING:
    from turnrl.lora import LoraConfig
    from turnrl.rl.core.critic import SeparateCritic, ValueHead


class TrainableState(Protocol):
    """What the weights-and-state side reads of a learner: its trainable state, set by the learner.

    Attributes:
        model: the policy (a LoRA policy: the base weights frozen, the adapters trained).
        lora: the run's ``learner.lora`` (set: the policy's saved state is its adapters).
        optimizer, scheduler: the policy's (and critic's) optimizer and learning-rate schedule.
        value_head, critic: the critic, where the algorithm has one.
        version, updates: the weights' version (rollout workers load it) and the training steps taken.
    """

    model: Any
    lora: LoraConfig | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    value_head: ValueHead | None
    critic: SeparateCritic | None
    version: int
    updates: int


class WeightsAndState:
    """What leaves a :class:`~turnrl.rl.core.learner.Learner`: its new weights for rollout workers and everything a
    resumed run needs. It reaches the learner only through ``self.trainable`` (:class:`TrainableState`, held to that
    list by the type checker); the learner reads nothing of it but its methods."""

    @property
    def trainable(self) -> TrainableState:
        """This learner's trainable state."""
        return cast(TrainableState, self)

    def export_weights(self) -> tuple[int, dict[str, torch.Tensor]]:
        """``(version, CPU copy of the policy's weights)`` for rollout workers."""
        t = self.trainable
        return t.version, {k: v.detach().to("cpu", copy=True) for k, v in t.model.state_dict().items()}

    def export_for_workers(self, put: Any) -> tuple[int, Any]:
        """``(version, put(CPU weights))``: what rollout workers load (``put``: e.g. Ray's object store); of a LoRA
        policy only the adapters (the workers hold the base weights from the start)."""
        # no copy of our own: ``put`` stores (copies) the tensors before the next update can change them
        t = self.trainable
        if is_lora(t.model):
            return t.version, put(adapter_state(t.model))
        return t.version, put({k: v.detach().cpu() for k, v in t.model.state_dict().items()})

    def connect_rollout(self, workers: list[Any]) -> None:
        """Open a direct weight channel to rollout workers (a learner in this process has none: they fetch
        :meth:`export_for_workers`)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything the learner needs to continue exactly."""
        t = self.trainable
        return {
            **policy_state(t.model, t.lora),  # of a LoRA policy: the adapters
            "optimizer": t.optimizer.state_dict(),
            "value_head": t.value_head.state_dict() if t.value_head is not None else None,
            "critic": t.critic.state_dict() if t.critic is not None else None,
            "scheduler": t.scheduler.state_dict(),
            "version": t.version,
            "updates": t.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            ValueError: the checkpoint is of a run with several policies (``multi_agent.policies``).
        """
        if "policies" in state and "optimizer" not in state:
            raise ValueError(
                f"the checkpoint holds policies {sorted(state['policies'])} and this run has one: resume "
                "with the same multi_agent.policies"
            )
        t = self.trainable
        restore(t.model, state, t.lora if is_lora(t.model) else None)  # marks the weights changed
        if t.value_head is not None:
            t.value_head.load_state_dict(state["value_head"])
        if t.critic is not None:
            t.critic.load_state_dict(state["critic"])
        t.optimizer.load_state_dict(state["optimizer"])
        t.scheduler.load_state_dict(state["scheduler"])
        t.version, t.updates = state["version"], state["updates"]
