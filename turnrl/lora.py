"""LoRA: train low-rank adapters instead of the whole policy (peft; ``pip install 'turnrl[lora]'``).

``learner.lora: {r, alpha, dropout, target_modules}`` wraps the policy in adapters before training: only they train
(and sit in the optimizer), the KL reference is the same model with its adapters switched off (no second copy), and
a checkpoint stores the adapters alone with the settings that made them. Loading such a checkpoint
(``run:OUT_DIR``, ``init_from``) puts the adapters on the run's base model and merges them; ``turnrl lora merge``
writes the merged model as a folder every command loads by path.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from turnrl.weights import mark_weights_changed


class LoraConfig(BaseModel):
    """Low-rank adapters on the policy (peft's LoRA)."""

    model_config = ConfigDict(extra="forbid")

    r: int = Field(16, ge=1, description="the adapters' rank")
    alpha: float = Field(32.0, gt=0, description="the scale numerator: updates are scaled by alpha / r")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear",
        description="the module names (the last part, e.g. q_proj, v_proj) that get adapters; "
        "all-linear: every linear layer but the output head",
    )


def _peft() -> Any:
    try:
        import peft
    except ImportError as e:
        raise ImportError("learner.lora needs the peft package: pip install 'turnrl[lora]'") from e
    return peft


def is_lora(model: Any) -> bool:
    """Whether ``model`` carries LoRA adapters (a peft model)."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def linear_names(model: torch.nn.Module) -> list[str]:
    """The distinct last names of ``model``'s linear layers (what ``target_modules`` may name)."""
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})


def apply_lora(model: torch.nn.Module, cfg: LoraConfig | dict[str, Any]) -> Any:
    """Wrap ``model`` in fresh adapters (its own weights frozen; changed in place, the wrapper returned).

    Raises:
        ValueError: a target module that ``model`` does not have (the message lists those it has).
    """
    peft = _peft()
    cfg = cfg if isinstance(cfg, LoraConfig) else LoraConfig.model_validate(cfg)
    targets = cfg.target_modules
    if targets != "all-linear":
        have = linear_names(model)
        missing = [t for t in targets if t not in have]
        if missing:
            raise ValueError(
                f"learner.lora.target_modules: this model has no linear layer named "
                f"{', '.join(missing)}; its linear layers are {', '.join(have)} (or use all-linear)"
            )
        get_out, get_inp = getattr(model, "get_output_embeddings", None), getattr(model, "get_input_embeddings", None)
        out = get_out() if get_out is not None else None
        inp = get_inp() if get_inp is not None else None
        head = next((n.rsplit(".", 1)[-1] for n, m in model.named_modules() if out is not None and m is out), None)
        if head in targets and out is not None and inp is not None and out.weight is inp.weight:
            raise ValueError(
                f"learner.lora.target_modules: {head} shares its weight with the input embeddings "
                "(tied word embeddings), so its adapter cannot be merged without changing the embeddings "
                f"too; leave {head} out"
            )
    spec = peft.LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
        bias="none",
    )
    wrapped = peft.get_peft_model(model, spec)
    if not any(p.requires_grad for p in wrapped.parameters()):
        raise ValueError("learner.lora: no adapter was added (no target module matched)")
    return wrapped


def apply_seeded_lora(model: torch.nn.Module, cfg: LoraConfig | dict[str, Any], seed: int) -> Any:
    """:func:`apply_lora` with the adapters' initial weights drawn from ``seed`` alone (torch's random state is left as
    it was), so that a run's adapters depend on its seed and on nothing that touched the global stream before."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return apply_lora(model, cfg)


def adapter_state(model: Any) -> dict[str, torch.Tensor]:
    """The adapters' weights alone (what a checkpoint stores and what rollout workers receive)."""
    from peft import get_peft_model_state_dict

    # the base embeddings never train: peft would add them when the output head carries an adapter
    state = get_peft_model_state_dict(model, save_embedding_layers=False)
    return {k: v.detach().cpu() for k, v in state.items()}


def base_state(model: Any) -> dict[str, torch.Tensor]:
    """The base model's own weights of a LoRA policy, under the names they had before :func:`apply_lora` (adapters
    left out, not merged): what a rollout engine or a learner rank starts from before it takes adapters."""
    out = {}
    for name, tensor in model.get_base_model().state_dict().items():
        if ".lora_" not in name:
            out[name.replace(".base_layer.", ".")] = tensor.detach()
    return out


def load_adapter(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Set ``model``'s adapters to ``state`` (from :func:`adapter_state`).

    Raises:
        ValueError: the adapters are of another shape or another model (different layers or rank).
    """
    from peft import set_peft_model_state_dict

    own = adapter_state(model)
    if set(own) != set(state):
        extra, missing = sorted(set(state) - set(own)), sorted(set(own) - set(state))
        raise ValueError(
            f"the adapter does not fit this model: {len(missing)} of its adapter weights are missing "
            f"(e.g. {missing[:2]}), {len(extra)} are of layers it lacks (e.g. {extra[:2]}); an adapter "
            "of another base model or other target_modules?"
        )
    bad = [k for k in own if tuple(own[k].shape) != tuple(state[k].shape)]
    if bad:
        raise ValueError(
            f"the adapter does not fit this model: {bad[0]} is {tuple(state[bad[0]].shape)}, the model's "
            f"is {tuple(own[bad[0]].shape)} (another rank or another base model)"
        )
    set_peft_model_state_dict(model, state)
    mark_weights_changed(model)  # session KV caches computed with the old adapters are stale


def merge_into_base(model: Any, trainable: dict[str, bool] | None = None) -> torch.nn.Module:
    """The base model with the adapters merged into its weights (in place; the adapters are gone). ``trainable``:
    the base parameters' ``requires_grad`` before :func:`apply_lora` froze them, restored here (peft leaves them
    frozen)."""
    base = model.merge_and_unload()
    for name, p in base.named_parameters():
        p.requires_grad_(True if trainable is None else trainable.get(name, True))
    return base


class AdapterOff:
    """The policy with its adapters switched off: the KL reference of a LoRA run, sharing every weight with it.

    Calling it runs the policy inside ``disable_adapter()`` without gradients; it is not an ``nn.Module`` on purpose
    (so nothing moves, freezes or saves the shared weights through it).
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return self.policy.parameters()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.off(), torch.no_grad():
            return self.policy(*args, **kwargs)

    @contextmanager
    def off(self) -> Iterator[None]:
        with self.policy.disable_adapter():
            yield

    def eval(self) -> AdapterOff:
        return self


def policy_state(model: Any, cfg: LoraConfig | None) -> dict[str, Any]:
    """What a learner checkpoint keeps of the policy: ``{"model": …, "lora": …}`` — of a LoRA policy (``cfg``: its
    settings) the adapters and the settings, else every weight and None. :func:`restore` reads it back."""
    if cfg is not None and is_lora(model):
        return {"model": adapter_state(model), "lora": cfg.model_dump()}
    return {"model": model.state_dict(), "lora": None}


def check_resume(state: dict[str, Any], cfg: LoraConfig | None) -> None:
    """Refuse a checkpoint made with other ``learner.lora`` settings (on/off, or its values) than ``cfg``.

    Raises:
        ValueError: they differ.
    """
    own = cfg.model_dump() if cfg is not None else None
    if own != (state.get("lora") or None):
        raise ValueError(
            f"the checkpoint was made with learner.lora={state.get('lora')}, this run has {own}: "
            "resume with the same learner.lora"
        )


def restore(model: Any, state: dict[str, Any], cfg: LoraConfig | None) -> None:
    """Load a learner checkpoint's policy (``state["model"]``, adapters where ``state["lora"]``) into ``model``.

    Raises:
        ValueError: the checkpoint and the run differ in ``learner.lora`` (:func:`check_resume`).
    """
    check_resume(state, cfg)
    if cfg is not None:
        load_adapter(model, state["model"])
    else:
        model.load_state_dict(state["model"])
        mark_weights_changed(model)


def share_frozen_base(first: torch.nn.Module, other: torch.nn.Module) -> int:
    """Point ``other``'s frozen parameters at ``first``'s where names and values agree (the base under LoRA); the
    number of tensors now shared."""
    mine = dict(first.named_parameters())
    shared = 0
    for name, p in other.named_parameters():
        base = mine.get(name)
        if p.requires_grad or base is None or base.requires_grad or base.shape != p.shape:
            continue
        if base.data_ptr() != p.data_ptr() and torch.equal(base, p):
            p.data = base.data
            shared += 1
    return shared
