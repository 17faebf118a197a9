"""Run checkpoints as a policy: load the weights a training run saved (``OUT_DIR/checkpoint.pt``) into a model.

Both the trainer (``init_from``) and the agents (``run:OUT_DIR`` specs) read checkpoints through here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from turnrl.weights import mark_weights_changed


def load_policy(model: Any, run: str | Path) -> None:
    """Load the policy weights of another run (its folder or its ``checkpoint.pt``) into ``model``, in place (a LoRA
    run's adapters are put on ``model`` and merged into its weights).

    Raises:
        FileNotFoundError: no checkpoint there.
        ValueError: the checkpoint's weights do not fit ``model`` (a run of another model).
    """
    path = Path(run)
    path = path / "checkpoint.pt" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"init_from: no checkpoint at {path} (a finished run's OUT_DIR holds checkpoint.pt)")
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state.get("lora"):  # a LoRA run: its adapters on the base it trained on (this model + its init_from), merged
        from turnrl.lora import apply_lora, load_adapter, merge_into_base

        start = (state.get("config") or {}).get("init_from")
        if start:
            load_policy(model, start)
        trainable = {n: p.requires_grad for n, p in model.named_parameters()}
        wrapped = apply_lora(model, state["lora"])
        try:
            load_adapter(wrapped, state["model"])
        except ValueError as e:
            raise ValueError(f"init_from: {path}: {e} (it was a run of {state.get('config', {}).get('model')!r})") \
                from None
        merge_into_base(wrapped, trainable)
        mark_weights_changed(model)
        return
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as e:
        raise ValueError(f"init_from: the weights in {path} do not fit this model ({str(e)[:200]}); was that run "
                         f"of another `model`? (it was {state.get('config', {}).get('model')!r})") from e
    mark_weights_changed(model)

