"""The learner's weights and state (:class:`turnrl.rl.core.learner.Learner` derives from :class:`WeightsAndState`):
the new weights handed to rollout workers with their version (the adapters alone of a LoRA policy), and everything a
resumed run needs to continue exactly — the policy (or its adapters), optimizer, critic or value head, scheduler,
version and update count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from turnrl.lora import adapter_state, is_lora, policy_state, restore

if TYPE_CHECKING:
    from turnrl.rl.config import TrainConfig
    from turnrl.rl.core.critic import SeparateCritic, ValueHead


class WeightsAndState:
    """The weights-and-state half of :class:`~turnrl.rl.core.learner.Learner`; it reads the learner's ``model``,
    ``cfg``, ``optimizer``, ``scheduler``, ``value_head``, ``critic``, ``version`` and ``updates``."""

    # what the learner sets (declared for the type checker)
    model: Any
    cfg: TrainConfig
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    value_head: ValueHead | None
    critic: SeparateCritic | None
    version: int
    updates: int

    def export_weights(self) -> tuple[int, dict[str, torch.Tensor]]:
        """``(version, CPU copy of the policy's weights)`` for rollout workers."""
        return self.version, {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def export_for_workers(self, put: Any) -> tuple[int, Any]:
        """``(version, put(CPU weights))``: what rollout workers load (``put``: e.g. Ray's object store); of a LoRA
        policy only the adapters (the workers hold the base weights from the start)."""
        # no copy of our own: ``put`` stores (copies) the tensors before the next update can change them
        if is_lora(self.model):
            return self.version, put(adapter_state(self.model))
        return self.version, put({k: v.detach().cpu() for k, v in self.model.state_dict().items()})

    def connect_rollout(self, workers: list[Any]) -> None:
        """Open a direct weight channel to rollout workers (a learner in this process has none: they fetch
        :meth:`export_for_workers`)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything the learner needs to continue exactly."""
        return {**policy_state(self.model, self.cfg.learner.lora),  # of a LoRA policy: the adapters
                "optimizer": self.optimizer.state_dict(),
                "value_head": self.value_head.state_dict() if self.value_head is not None else None,
                "critic": self.critic.state_dict() if self.critic is not None else None,
                "scheduler": self.scheduler.state_dict(), "version": self.version, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            ValueError: the checkpoint is of a run with several policies (``multi_agent.policies``).
        """
        if "policies" in state and "optimizer" not in state:
            raise ValueError(f"the checkpoint holds policies {sorted(state['policies'])} and this run has one: resume "
                             "with the same multi_agent.policies")
        restore(self.model, state, self.cfg.learner.lora if is_lora(self.model) else None)  # marks the weights changed
        if self.value_head is not None:
            self.value_head.load_state_dict(state["value_head"])
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.version, self.updates = state["version"], state["updates"]
