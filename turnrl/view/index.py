"""The episode index behind ``turnrl view``: find trajectory files, summarize every episode once, load one lazily.

A path is a run folder (``metrics.jsonl``, ``eval/step-N/trajectories.jsonl``, training trajectories anywhere
below), an eval folder, a folder of several runs, or one trajectories file (``.jsonl`` or ``.parquet``). Every episode
says which run it came from: the outermost folder at or below the path that a run or an evaluation leaves behind
(``config.yaml``, ``metrics.jsonl``, ``items.jsonl``, ``metrics.json``). Indexing reads each file once,
keeping per episode only a small summary (for the list and its filters), its lower-cased text (for search) and
where it lies in the file (a byte offset for JSONL, a row for Parquet). Opening an episode seeks to it and
validates just that one :class:`~turnrl.types.Trajectory`. Indexing runs in a background thread, so the page
opens at once and fills in as the index grows.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnrl.types import Trajectory

_STEP = re.compile(r"step[-_]?(\d+)")
_FILE_SUFFIXES = (".jsonl", ".parquet")
_RUN_MARKERS = ("config.yaml", "metrics.jsonl", "items.jsonl", "metrics.json")  # a training run's, `turnrl eval`'s


@dataclass(frozen=True)
class Source:
    """One trajectories file: where it is, what it holds (``kind`` is ``"eval"`` or ``"train"``) and the run it
    belongs to (its folder, relative to the viewed path; the viewed folder's own name where that is the run)."""

    path: Path
    kind: str
    step: int | None
    label: str
    run: str = ""


def discover(path: str | Path) -> list[Source]:
    """The trajectories files under ``path`` (or ``path`` itself), ordered by kind, step and name.

    Raises:
        FileNotFoundError: ``path`` does not exist or holds no trajectories file.
    """
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist; give a run folder, an eval folder or a trajectories file")
    if root.is_file():
        files = [root]
        base = root.parent
    else:
        files = [p for p in root.rglob("*") if p.is_file() and p.suffix in _FILE_SUFFIXES and _is_trajectory_file(p)]
        base = root
    if not files:
        raise FileNotFoundError(f"no trajectories file (*trajectories*.jsonl or .parquet) under {root}")
    sources = []
    for f in files:
        rel = f.relative_to(base) if f != base and base in f.parents else Path(f.name)
        parts = [p.lower() for p in rel.parts]
        match = next((m for p in reversed(rel.parts) if (m := _STEP.search(p))), None)
        # `turnrl eval` and the trainer's held-out evaluations write items.jsonl beside their trajectories
        kind = "eval" if "eval" in parts[:-1] or (f.parent / "items.jsonl").is_file() else "train"
        sources.append(Source(f, kind, int(match.group(1)) if match else None, str(rel), _run_of(f, base)))
    return sorted(sources, key=lambda s: (s.kind, s.step if s.step is not None else -1, s.label))


def _run_of(f: Path, base: Path) -> str:
    """The run ``f`` came from: the outermost folder from ``base`` down to ``f``'s that holds a run's files (else
    the first folder below ``base``, or ``base``), named relative to ``base`` (``base`` by its own name)."""
    folders = [base] + [p for p in reversed(f.parents) if base in p.parents]
    run = next(
        (d for d in folders if any((d / m).is_file() for m in _RUN_MARKERS)), folders[1] if len(folders) > 1 else base
    )
    return base.resolve().name if run == base else str(run.relative_to(base))


def _is_trajectory_file(p: Path) -> bool:
    """Trajectories files by name; ``items.jsonl`` and ``metrics.jsonl`` are summaries, not episodes."""
    name = p.name.lower()
    return "traj" in name or "episodes" in name or "rollout" in name


def summarize(data: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The list row of one trajectory (a JSON dict, unvalidated) and its lower-cased searchable text."""
    turns = data.get("turns") or []
    correct = None
    for turn in reversed(turns):
        c = (turn.get("info") or {}).get("correct")
        if c is not None:
            correct = bool(c)
            break
    tool_calls = sum(
        len((t.get("info") or {}).get("tool_calls") or (t.get("action") or {}).get("tool_calls") or []) for t in turns
    )
    mask = data.get("loss_mask") or []
    meta = data.get("metadata") or {}
    if data.get("error"):
        outcome = "error"
    elif isinstance(meta.get("outcome"), str) and meta.get("seat") is not None:  # a seat of a game: its result
        outcome = meta["outcome"]
    else:
        outcome = {True: "correct", False: "wrong", None: "unknown"}[correct]
    texts = [m.get("content") or "" for m in data.get("prompt") or []]
    for t in turns:
        texts.append((t.get("action") or {}).get("content") or "")
        texts += [m.get("content") or "" for m in t.get("observation") or []]
    last = (turns[-1].get("action") or {}).get("content") if turns else ""
    row = {
        "id": data.get("id"),
        "env_id": data.get("env_id"),
        "task_id": data.get("task_id"),
        "member": mixture_member(data),
        "group_id": data.get("group_id"),
        "reward": float(sum(float(t.get("reward") or 0.0) for t in turns)),
        "outcome": outcome,
        "turns": len(turns),
        "tool_calls": tool_calls,
        "tokens": len(data.get("token_ids") or []),
        "trained_tokens": int(sum(mask)),
        "has_advantages": meta.get("advantages") is not None,
        "has_learner_logprobs": meta.get("learner_logprobs") is not None,
        "meta_step": meta.get("step") if isinstance(meta.get("step"), int) else None,
        "seat": meta.get("seat") if isinstance(meta.get("seat"), str) else None,
        "game": _game_of(meta),
        "tree": _tree_of(meta),
        "preview": " ".join((last or "").split())[:160],
    }
    text = "\n".join([data.get("task_id") or "", data.get("error") or "", *texts]).lower()
    return row, text


def _game_of(meta: dict[str, Any]) -> str | None:
    """The game a seat's view belongs to (a multi-agent episode: its job in training, its episode otherwise)."""
    if meta.get("seat") is None:
        return None
    game = meta.get("job", meta.get("episode"))
    return str(game) if game is not None else None


def _tree_of(meta: dict[str, Any]) -> str | None:
    """The tree a leaf of a tree rollout belongs to (``metadata["tree"]["root"]``), or None."""
    tree = meta.get("tree")
    return str(tree["root"]) if isinstance(tree, dict) and tree.get("root") is not None else None


def mixture_member(data: dict[str, Any]) -> str | None:
    """The mixture member (``turnrl/Mixture-v0``) that posed an episode: its task id's ``MEMBER:`` prefix."""
    if data.get("env_id") != "turnrl/Mixture-v0":
        return None
    member, sep, _ = str(data.get("task_id") or "").partition(":")
    return member if sep else None


@dataclass
class EpisodeIndex:
    """Summaries of every episode under a path; :meth:`query` filters them, :meth:`load` reads one in full.

    Construct with :meth:`open` (starts indexing in the background) or call :meth:`build` to index in the caller.
    """

    path: Path
    sources: list[Source]
    rows: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    _where: list[tuple[int, int]] = field(default_factory=list)  # (source index, byte offset or Parquet row)
    done: bool = False
    error: str | None = None
    seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    @classmethod
    def open(cls, path: str | Path, *, background: bool = True) -> EpisodeIndex:
        """Find the trajectories files under ``path`` and index them (in a daemon thread unless told otherwise)."""
        index = cls(Path(path), discover(path))
        if background:
            index._thread = threading.Thread(target=index.build, name="turnrl-view-index", daemon=True)
            index._thread.start()
        else:
            index.build()
        return index

    def wait(self, timeout: float | None = None) -> bool:
        """Block until indexing finished (or ``timeout`` seconds passed); returns whether it finished."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.done

    def build(self) -> None:
        """Index every source (rows become visible to :meth:`query` in batches as they are read)."""
        t0 = time.perf_counter()
        try:
            for s, source in enumerate(self.sources):
                reader = self._scan_parquet if source.path.suffix == ".parquet" else self._scan_jsonl
                reader(s, source)
        except Exception as e:  # shown on the page; what was indexed stays usable
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.seconds = time.perf_counter() - t0
            self.done = True

    def _add(self, batch: list[tuple[dict[str, Any], str, tuple[int, int]]]) -> None:
        with self._lock:
            for row, text, where in batch:
                row["index"] = len(self.rows)
                self.rows.append(row)
                self.texts.append(text)
                self._where.append(where)

    def _row(self, s: int, source: Source, data: dict[str, Any]) -> tuple[dict[str, Any], str]:
        row, text = summarize(data)
        row["source"], row["kind"], row["run"] = source.label, source.kind, source.run
        meta_step = row.pop("meta_step")
        row["step"] = meta_step if meta_step is not None else source.step
        return row, text

    def _scan_jsonl(self, s: int, source: Source) -> None:
        batch: list[tuple[dict[str, Any], str, tuple[int, int]]] = []
        offset = 0
        with source.path.open("rb") as f:
            for lineno, line in enumerate(f, start=1):
                at, offset = offset, offset + len(line)
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{source.path}:{lineno}: not valid JSON: {e}") from e
                batch.append((*self._row(s, source, data), (s, at)))
                if len(batch) >= 500:
                    self._add(batch)
                    batch = []
        self._add(batch)

    def _scan_parquet(self, s: int, source: Source) -> None:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(source.path)
        light = [c for c in pf.schema_arrow.names if c not in ("token_ids", "logprobs")]
        row_no = 0
        for rb in pf.iter_batches(batch_size=500, columns=light):
            batch = []
            for rec in rb.to_pylist():
                data = dict(rec)
                for key in ("prompt", "turns", "metadata"):
                    if isinstance(data.get(key), str):
                        data[key] = json.loads(data[key])
                data["token_ids"] = data.get("loss_mask")  # only its length is used for the summary
                batch.append((*self._row(s, source, data), (s, row_no)))
                row_no += 1
            self._add(batch)

    # ---- queries ----

    def facets(self) -> dict[str, Any]:
        """What the filters can choose from: environments, steps, kinds, reward and turn ranges."""
        with self._lock:
            rows = list(self.rows)
        rewards = [r["reward"] for r in rows]
        return {
            "env_ids": sorted({r["env_id"] or "" for r in rows}),
            "members": sorted({r["member"] for r in rows if r["member"]}),
            "runs": sorted({r["run"] for r in rows}),
            "steps": sorted({r["step"] for r in rows if r["step"] is not None}),
            "kinds": sorted({r["kind"] for r in rows}),
            "reward_range": [min(rewards), max(rewards)] if rewards else [0.0, 0.0],
            "max_turns": max((r["turns"] for r in rows), default=0),
            "max_tool_calls": max((r["tool_calls"] for r in rows), default=0),
            "outcomes": {o: sum(r["outcome"] == o for r in rows) for o in ("correct", "wrong", "error", "unknown")},
            "has_advantages": any(r["has_advantages"] for r in rows),
            "has_learner_logprobs": any(r["has_learner_logprobs"] for r in rows),
        }

    def query(self, filters: dict[str, str], *, offset: int = 0, limit: int = 200) -> dict[str, Any]:
        """The rows that pass ``filters`` (string values, as in a URL query), one page of them and the total.

        Filters: ``env``, ``member`` (a mixture's), ``run``, ``outcome`` (correct/wrong/error/unknown), ``kind``, ``step``, ``reward_min``,
        ``reward_max``, ``turns_min``, ``turns_max``, ``tools`` (``with``/``without``), ``q`` (text search,
        all words must occur), ``group`` (``source|group_id``).
        """
        with self._lock:
            n = len(self.rows)
            rows, texts = self.rows[:n], self.texts[:n]
        preds = _predicates(filters)
        words = (filters.get("q") or "").lower().split()
        hits = [r for r, t in zip(rows, texts) if all(p(r) for p in preds) and all(w in t for w in words)]
        return {
            "total": len(hits),
            "indexed": n,
            "done": self.done,
            "offset": offset,
            "rows": hits[offset : offset + limit],
        }

    def group(self, i: int) -> list[dict[str, Any]]:
        """The episodes of episode ``i``'s group (same file and ``group_id``), ``i`` included."""
        return self._sharing(i, "group_id")

    def game(self, i: int) -> list[dict[str, Any]]:
        """Every seat's view of episode ``i``'s game (same file and game), ``i`` included; ``[row]`` for an episode
        of one agent."""
        return self._sharing(i, "game")

    def tree(self, i: int) -> list[dict[str, Any]]:
        """Every leaf of episode ``i``'s tree (same file and tree root), ``i`` included; ``[row]`` for a chain."""
        return self._sharing(i, "tree")

    def _sharing(self, i: int, key: str) -> list[dict[str, Any]]:
        """The rows of episode ``i``'s file whose ``key`` equals its own, ``i`` included; ``[row]`` where it has none."""
        row = self.rows[i]
        if row.get(key) is None:
            return [row]
        with self._lock:
            rows = list(self.rows)
        return [r for r in rows if r["source"] == row["source"] and r.get(key) == row[key]]

    def load(self, i: int) -> Trajectory:
        """Read and validate episode ``i`` from its file.

        Raises:
            IndexError: no episode ``i`` (yet).
        """
        if not 0 <= i < len(self._where):
            raise IndexError(f"no episode {i}; {len(self._where)} indexed")
        s, at = self._where[i]
        path = self.sources[s].path
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            from turnrl.storage import _from_row

            meta = pq.ParquetFile(path).metadata
            for g in range(meta.num_row_groups):
                rows = meta.row_group(g).num_rows
                if at < rows:
                    return _from_row(_row_group(str(path), path.stat().st_mtime_ns, g).slice(at, 1).to_pylist()[0])
                at -= rows
            raise IndexError(f"row {self._where[i][1]} is past the end of {path}")
        with path.open("rb") as f:
            f.seek(at)
            return Trajectory.model_validate_json(f.readline())


@functools.lru_cache(maxsize=2)
def _row_group(path: str, mtime_ns: int, g: int) -> Any:
    """One decoded Parquet row group (kept: the next episode opened is usually in the same one)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).read_row_group(g)


def _predicates(filters: dict[str, str]) -> list[Callable[[dict[str, Any]], bool]]:
    preds: list[Callable[[dict[str, Any]], bool]] = []

    def num(key: str) -> float | None:
        value = (filters.get(key) or "").strip()
        return float(value) if value else None

    def equals(column: str, value: Any) -> Callable[[dict[str, Any]], bool]:
        return lambda r: bool(r[column] == value)

    def within(column: str, op: Callable[[float, float], bool], bound: float) -> Callable[[dict[str, Any]], bool]:
        return lambda r: op(float(r[column]), bound)

    for key, column in (
        ("env", "env_id"),
        ("member", "member"),
        ("run", "run"),
        ("outcome", "outcome"),
        ("kind", "kind"),
    ):
        if filters.get(key):
            preds.append(equals(column, filters[key]))
    if filters.get("step"):
        preds.append(equals("step", int(filters["step"])))
    if filters.get("group"):
        source, _, gid = filters["group"].rpartition("|")
        preds.append(lambda r: r["source"] == source and r["group_id"] == gid)
    for key, field_, op in (
        ("reward_min", "reward", float.__ge__),
        ("reward_max", "reward", float.__le__),
        ("turns_min", "turns", float.__ge__),
        ("turns_max", "turns", float.__le__),
    ):
        bound = num(key)
        if bound is not None:
            preds.append(within(field_, op, bound))
    if filters.get("tools") == "with":
        preds.append(lambda r: r["tool_calls"] > 0)
    elif filters.get("tools") == "without":
        preds.append(lambda r: r["tool_calls"] == 0)
    return preds
