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
    run's adapters are put on ``model`` and merged into its weights). A run with several trainable policies
    (``multi_agent.policies``) is read as ``OUT_DIR#POLICY``.

    Raises:
        FileNotFoundError: no checkpoint there.
        ValueError: the checkpoint's weights do not fit ``model`` (a run of another model), or a run of several
            policies without the name of one (the message lists them).
    """
    where, _, policy = str(run).partition("#")
    path = Path(where)
    path = path / "checkpoint.pt" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"init_from: no checkpoint at {path} (a finished run's OUT_DIR holds checkpoint.pt)")
    state = _one_policy(torch.load(path, map_location="cpu", weights_only=False), path, where, policy)
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
            raise ValueError(
                f"init_from: {path}: {e} (it was a run of {state.get('config', {}).get('model')!r})"
            ) from None
        merge_into_base(wrapped, trainable)
        mark_weights_changed(model)
        return
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as e:
        raise ValueError(
            f"init_from: the weights in {path} do not fit this model ({str(e)[:200]}); was that run "
            f"of another `model`? (it was {state.get('config', {}).get('model')!r})"
        ) from e
    mark_weights_changed(model)


def _one_policy(state: dict[str, Any], path: Path, where: str, policy: str) -> dict[str, Any]:
    """The state of the policy ``policy`` names in a checkpoint of several (its own ``init_from`` as the run's), or
    the checkpoint itself when it holds one."""
    if "policies" not in state:
        if policy:
            raise ValueError(f"{path} holds the policy of a run with one; drop '#{policy}'")
        return state
    names = sorted(state["policies"])
    if not policy:
        raise ValueError(f"{path} holds several policies ({', '.join(names)}): name one, as {where}#{names[0]}")
    if policy not in state["policies"]:
        raise ValueError(f"{path} has no policy {policy!r}; it holds {', '.join(names)}")
    config = dict(state.get("config") or {})
    own = (((config.get("multi_agent") or {}).get("policies") or {}).get(policy) or {}).get("init_from")
    if own:
        config["init_from"] = own
    return {**state["policies"][policy], "config": config}
