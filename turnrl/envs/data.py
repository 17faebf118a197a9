"""Where dataset-backed environments find their data.

Resolution order for a dataset split:

1. an explicit ``path`` argument (a JSONL file);
2. the folder named by the environment variable ``TURNRL_DATA_DIR``, holding ``gsm8k/{train,test}.jsonl``,
   ``math500/test.jsonl`` and ``hotpotqa/{dev,train}*.jsonl`` (docs/environments.md, "Where the data comes from");
3. Hugging Face ``datasets`` by the dataset's hub name (needs the ``hub`` extra and network access).

If all fail, :class:`DataNotFoundError` says what was tried and what to set.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA_ENV_VAR = "TURNRL_DATA_DIR"


class DataNotFoundError(FileNotFoundError):
    """No data file could be found for a dataset split; the message says what to set."""


class DataFormatError(ValueError):
    """A data file has a malformed line; the message names the file and line number."""


@dataclass(frozen=True)
class DatasetInfo:
    """Where one dataset lives locally (``folder/pattern`` under the data dir) and on the hub."""

    folder: str
    splits: dict[str, str]  # split -> file name or glob pattern inside the folder
    hub_name: str
    hub_config: str | None = None
    hub_splits: dict[str, str] | None = None  # our split name -> the hub's, where they differ


DATASETS: dict[str, DatasetInfo] = {
    "gsm8k": DatasetInfo("gsm8k", {"train": "train.jsonl", "test": "test.jsonl"}, "openai/gsm8k", "main"),
    "math500": DatasetInfo("math500", {"test": "test.jsonl"}, "HuggingFaceH4/MATH-500"),
    "hotpotqa": DatasetInfo(
        "hotpotqa", {"dev": "dev*.jsonl", "train": "train*.jsonl"}, "hotpot_qa", "distractor", {"dev": "validation"}
    ),
}


@functools.lru_cache(maxsize=16)
def _read_jsonl_cached(path: str, mtime_ns: int, size: int) -> tuple[dict[str, Any], ...]:
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFormatError(f"{path}:{lineno}: malformed JSON line ({e.msg} at column {e.colno})") from e
            if not isinstance(row, dict):
                raise DataFormatError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return tuple(rows)


def read_jsonl_rows(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file of objects (cached by path, size and modification time).

    Raises:
        DataNotFoundError: the file does not exist.
        DataFormatError: a line is not a JSON object; the message gives the line number.
    """
    p = Path(path)
    if not p.is_file():
        raise DataNotFoundError(f"data file {p} does not exist")
    st = p.stat()
    return [dict(r) for r in _read_jsonl_cached(str(p.resolve()), st.st_mtime_ns, st.st_size)]


def local_file(dataset: str, split: str, data_dir: str | Path) -> Path | None:
    """The file for ``dataset``/``split`` under ``data_dir``, or None if there is none."""
    info = dataset_info(dataset)
    pattern = _split_pattern(info, dataset, split)
    matches = sorted((Path(data_dir) / info.folder).glob(pattern))
    return matches[0] if matches else None


def dataset_info(dataset: str) -> DatasetInfo:
    """The :class:`DatasetInfo` of a known dataset name."""
    try:
        return DATASETS[dataset]
    except KeyError:
        raise ValueError(f"unknown dataset {dataset!r}; known: {sorted(DATASETS)}") from None


def _split_pattern(info: DatasetInfo, dataset: str, split: str) -> str:
    if split not in info.splits:
        raise ValueError(f"dataset {dataset!r} has no split {split!r}; choose one of {sorted(info.splits)}")
    return info.splits[split]


def _from_hub(info: DatasetInfo, split: str) -> list[dict[str, Any]]:
    import datasets  # lazy: an optional dependency (turnrl[hub])

    hub_split = (info.hub_splits or {}).get(split, split)
    ds = datasets.load_dataset(info.hub_name, info.hub_config, split=hub_split)
    return [dict(r) for r in ds]


def load_rows(dataset: str, split: str, path: str | Path | None = None) -> list[dict[str, Any]]:
    """The rows of a dataset split, resolved as described in the module docstring.

    Raises:
        DataNotFoundError: nothing found; the message lists what was tried and how to fix it.
        DataFormatError: the file has a malformed line.
    """
    info = dataset_info(dataset)
    pattern = _split_pattern(info, dataset, split)
    if path is not None:
        return read_jsonl_rows(path)
    tried = []
    data_dir = os.environ.get(DATA_ENV_VAR)
    if data_dir:
        found = local_file(dataset, split, data_dir)
        if found is not None:
            return read_jsonl_rows(found)
        tried.append(f"${DATA_ENV_VAR}={data_dir} has no {info.folder}/{pattern}")
    else:
        tried.append(f"${DATA_ENV_VAR} is not set")
    try:
        return _from_hub(info, split)
    except ImportError:
        tried.append("the Hugging Face `datasets` package is not installed (pip install 'turnrl[hub]')")
    except Exception as e:  # offline, unknown dataset, ...: report, do not crash differently
        tried.append(f"Hugging Face datasets could not load {info.hub_name!r}: {type(e).__name__}: {str(e)[:200]}")
    raise DataNotFoundError(
        f"no data for {dataset!r} split {split!r}. Tried: " + "; ".join(tried) + ". "
        f"Fix: pass path='.../{pattern}', or set {DATA_ENV_VAR} to a folder containing {info.folder}/{pattern} "
        "(docs/environments.md, 'Where the data comes from')."
    )
