"""Trajectory files: JSONL (one trajectory per line) and Parquet, both lossless.

Parquet keeps the scalar fields and the token arrays as native columns (queryable, compact) and the nested
parts (prompt, turns, metadata) as JSON text, so arbitrary ``info`` dicts survive unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from turnrl.types import Trajectory

_SCALARS = ("id", "env_id", "task_id", "seed", "group_id", "terminated", "truncated", "error")
_JSON_FIELDS = ("prompt", "turns", "metadata")

PARQUET_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("env_id", pa.string()),
        ("task_id", pa.string()),
        ("seed", pa.int64()),
        ("group_id", pa.string()),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
        ("error", pa.string()),
        ("token_ids", pa.list_(pa.int64())),
        ("loss_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float64())),
        ("token_versions", pa.list_(pa.int64())),
        ("segments", pa.list_(pa.int64())),
        ("prompt", pa.string()),
        ("turns", pa.string()),
        ("metadata", pa.string()),
    ]
)


def _dumps(obj: object) -> str:
    # allow_nan: NaN/inf rewards or metrics must survive, not crash the writer.
    return json.dumps(obj, ensure_ascii=False, allow_nan=True)


def write_jsonl(trajectories: Iterable[Trajectory], path: str | Path, *, append: bool = False) -> int:
    """Write trajectories to ``path``, one JSON object per line. Returns the number written.

    With ``append=True`` each line is flushed as it is written, so an interrupted run keeps what finished.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for traj in trajectories:
            f.write(_dumps(traj.model_dump(mode="json")) + "\n")
            f.flush()
            n += 1
    return n


def iter_jsonl(path: str | Path) -> Iterator[Trajectory]:
    """Yield trajectories from a JSONL file.

    Raises:
        ValueError: a line is not valid JSON or not a valid Trajectory; the message names the line number.
    """
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield Trajectory.model_validate(json.loads(line))
            except (json.JSONDecodeError, ValueError) as e:
                raise ValueError(f"{path}:{lineno}: not a valid trajectory: {e}") from e


def read_jsonl(path: str | Path) -> list[Trajectory]:
    """Read all trajectories of a JSONL file (see :func:`iter_jsonl`)."""
    return list(iter_jsonl(path))


def _to_row(traj: Trajectory) -> dict[str, object]:
    data = traj.model_dump(mode="json")
    row = {k: data[k] for k in _SCALARS}
    row.update({k: data[k] for k in ("token_ids", "loss_mask", "logprobs", "token_versions", "segments")})
    row.update({k: _dumps(data[k]) for k in _JSON_FIELDS})
    return row


def _from_row(row: dict[str, object]) -> Trajectory:
    data = {k: row[k] for k in _SCALARS}
    data.update({k: row[k] for k in ("token_ids", "loss_mask", "logprobs")})
    data["token_versions"] = row.get("token_versions")  # files written before versions were recorded have none
    data["segments"] = row.get("segments")  # nor before context segments
    data.update({k: json.loads(row[k]) for k in _JSON_FIELDS})  # type: ignore[arg-type]  # JSON text columns
    return Trajectory.model_validate(data)


def write_parquet(trajectories: Iterable[Trajectory], path: str | Path) -> int:
    """Write trajectories to a Parquet file (replacing it). Returns the number written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [_to_row(t) for t in trajectories]
    table = pa.Table.from_pylist(rows, schema=PARQUET_SCHEMA)
    pq.write_table(table, path)
    return len(rows)


def read_parquet(path: str | Path) -> list[Trajectory]:
    """Read all trajectories of a Parquet file written by :func:`write_parquet`."""
    table = pq.read_table(path)
    return [_from_row(r) for r in table.to_pylist()]


def save(trajectories: Iterable[Trajectory], path: str | Path) -> int:
    """Write by suffix: ``.jsonl`` or ``.parquet``."""
    suffix = Path(path).suffix
    if suffix == ".jsonl":
        return write_jsonl(trajectories, path)
    if suffix == ".parquet":
        return write_parquet(trajectories, path)
    raise ValueError(f"unknown trajectory file type {suffix!r} for {path}; use .jsonl or .parquet")


def load(path: str | Path) -> list[Trajectory]:
    """Read by suffix: ``.jsonl`` or ``.parquet``."""
    suffix = Path(path).suffix
    if suffix == ".jsonl":
        return read_jsonl(path)
    if suffix == ".parquet":
        return read_parquet(path)
    raise ValueError(f"unknown trajectory file type {suffix!r} for {path}; use .jsonl or .parquet")


__all__ = [
    "TrajectoryWriter",
    "iter_jsonl",
    "load",
    "read_jsonl",
    "read_parquet",
    "save",
    "write_jsonl",
    "write_parquet",
]


class TrajectoryWriter:
    """Write trajectories as they finish, so that an interrupted run keeps everything that finished.

    ``.jsonl``: each trajectory is appended and flushed at once. ``.parquet``: trajectories stream to
    ``<path>.partial.jsonl`` and become the Parquet file on :meth:`close` (the partial file is then removed; after
    an interruption it holds every finished trajectory). Use as a context manager or call :meth:`close`.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.suffix not in (".jsonl", ".parquet"):
            raise ValueError(f"unknown trajectory file type {self.path.suffix!r}; use .jsonl or .parquet")
        self.stream_path = (
            self.path if self.path.suffix == ".jsonl" else self.path.with_name(self.path.name + ".partial.jsonl")
        )
        self.stream_path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.stream_path.open("w", encoding="utf-8")
        self.count = 0

    def __call__(self, traj: Trajectory) -> None:
        """Append one trajectory (flushed)."""
        self._file.write(_dumps(traj.model_dump(mode="json")) + "\n")
        self._file.flush()
        self.count += 1

    def close(self) -> None:
        """Finish the file (for Parquet: convert the streamed JSONL and remove it)."""
        if self._file.closed:
            return
        self._file.close()
        if self.path.suffix == ".parquet":
            write_parquet(iter_jsonl(self.stream_path), self.path)
            self.stream_path.unlink()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
