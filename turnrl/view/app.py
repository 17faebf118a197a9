"""The web app behind ``turnrl view``: a small JSON API over an :class:`EpisodeIndex` and one static page.

Routes: ``/`` (the page), ``/static/…``, ``/api/info`` (sources, filter choices, indexing progress),
``/api/episodes`` (filtered list, paged), ``/api/episode/<i>`` (one episode: conversation and tokens),
``/api/group/<i>`` (the episodes of its group). Served by Werkzeug on 127.0.0.1 by default. An episode whose
history was rewritten (context segments, ``Trajectory.segments``) shows a divider, with the reason, where each new
context begins.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

from werkzeug.exceptions import HTTPException, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from turnrl.types import Trajectory
from turnrl.view.index import EpisodeIndex
from turnrl.wsgi import quiet_server, serve_in_thread, stop

STATIC = Path(__file__).parent / "static"
_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}


class TokenTexts:
    """Each token id's text under a tokenizer (cached); without a tokenizer, None."""

    def __init__(self, tokenizer: Any | None) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, ids: list[int]) -> list[str] | None:
        """The texts of ``ids`` (special tokens kept), or None without a tokenizer."""
        if self.tokenizer is None:
            return None
        missing = sorted({i for i in ids if i not in self._cache})
        if missing:
            texts = self.tokenizer.batch_decode([[i] for i in missing], skip_special_tokens=False)
            self._cache.update(zip(missing, texts))
        return [self._cache[i] for i in ids]


def _finite(values: list[float] | None) -> list[float | None] | None:
    """JSON has no NaN/inf: they become null."""
    if values is None:
        return None
    return [v if isinstance(v, (int, float)) and math.isfinite(v) else None for v in values]


def contexts(traj: Trajectory) -> tuple[list[dict[str, Any]], list[int]]:
    """Where the episode's history was rewritten: one entry per context segment after the first (``index``,
    token ``start`` or None, ``reason`` from ``metadata["segment_reasons"]``, else "new context segment"), and
    each turn's segment (``info["segment"]``, else found from its token spans, else the turn before's)."""
    starts = traj.segments or [0]
    of_turn, k = [], 0
    for t in traj.turns:
        seg = t.info.get("segment")
        if not isinstance(seg, int) or isinstance(seg, bool):
            span = t.token_span or t.obs_span
            seg = max(i for i, s in enumerate(starts) if s <= span[0]) if span is not None and traj.segments else k
        of_turn.append(k := seg)
    n = max([len(starts), *(s + 1 for s in of_turn)])
    reasons = traj.metadata.get("segment_reasons")
    reasons = reasons if isinstance(reasons, list) else []
    out = [
        {
            "index": i,
            "start": starts[i] if i < len(starts) else None,
            "reason": reasons[i - 1]
            if i - 1 < len(reasons) and isinstance(reasons[i - 1], str) and reasons[i - 1]
            else "new context segment",
        }
        for i in range(1, n)
    ]
    return out, of_turn


def episode_payload(traj: Trajectory, texts: TokenTexts, row: dict[str, Any]) -> dict[str, Any]:
    """One episode for the page: the conversation by turn and the token arrays with their segments."""
    ids = traj.token_ids or []
    n = len(ids)
    segment = ["prompt"] * n  # prompt | gen | obs | other, and the turn each token belongs to
    turn_of = [-1] * n
    for t in traj.turns:
        for span, kind in ((t.token_span, "gen"), (t.obs_span, "obs")):
            if span is not None:
                for i in range(span[0], min(span[1], n)):
                    segment[i], turn_of[i] = kind, t.index
    meta = dict(traj.metadata)
    adv, learner = meta.pop("advantages", None), meta.pop("learner_logprobs", None)
    notes = []
    for name, values in (("advantages", adv), ("learner_logprobs", learner)):
        if values is not None and len(values) != n:
            notes.append(f"metadata[{name!r}] has {len(values)} values for {n} tokens; not shown")
    tokens = None
    if traj.token_ids is not None:
        tokens = {
            "ids": ids,
            "text": texts(ids),
            "mask": traj.loss_mask,
            "logp": _finite(traj.logprobs),
            "adv": _finite(adv) if adv is not None and len(adv) == n else None,
            "learner": _finite(learner) if learner is not None and len(learner) == n else None,
            "segment": segment,
            "turn": turn_of,
        }
    segments, turn_segment = contexts(traj)
    turns = [
        {
            "index": t.index,
            "segment": seg,
            "role": t.role,
            "reward": t.reward,
            "terminated": t.terminated,
            "truncated": t.truncated,
            "action": t.action.model_dump(exclude_none=True),
            "observation": [m.model_dump(exclude_none=True) for m in t.observation],
            "tool_calls": t.info.get("tool_calls") or [c.model_dump() for c in t.action.tool_calls or []],
            "info": {k: v for k, v in t.info.items() if k != "tool_calls"},
            "token_span": t.token_span,
            "obs_span": t.obs_span,
        }
        for t, seg in zip(traj.turns, turn_segment)
    ]
    meta.pop("prompts", None)
    return {
        "row": row,
        "id": traj.id,
        "env_id": traj.env_id,
        "task_id": traj.task_id,
        "seed": traj.seed,
        "group_id": traj.group_id,
        "error": traj.error,
        "terminated": traj.terminated,
        "truncated": traj.truncated,
        "prompt": [m.model_dump(exclude_none=True) for m in traj.prompt],
        "turns": turns,
        "tokens": tokens,
        "metadata": json.loads(json.dumps(meta, default=str)),
        "notes": notes,
        "contexts": segments,
    }


class ViewApp:
    """The WSGI application: routes requests to the index and the static page."""

    def __init__(self, index: EpisodeIndex, tokenizer: Any | None = None, tokenizer_name: str | None = None) -> None:
        self.index, self.texts, self.tokenizer_name = index, TokenTexts(tokenizer), tokenizer_name
        self.urls = Map(
            [
                Rule("/", endpoint="page"),
                Rule("/static/<name>", endpoint="static"),
                Rule("/api/info", endpoint="info"),
                Rule("/api/episodes", endpoint="episodes"),
                Rule("/api/episode/<int:i>", endpoint="episode"),
                Rule("/api/group/<int:i>", endpoint="group"),
                Rule("/api/game/<int:i>", endpoint="game"),
                Rule("/api/tree/<int:i>", endpoint="tree"),
            ]
        )

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        try:
            endpoint, args = self.urls.bind_to_environ(environ).match()
            response = getattr(self, f"on_{endpoint}")(request, **args)
        except HTTPException as e:
            response = e.get_response(environ)
        return response(environ, start_response)

    @staticmethod
    def _json(payload: Any, status: int = 200) -> Response:
        return Response(json.dumps(payload, allow_nan=False), status=status, mimetype="application/json")

    def on_page(self, request: Request) -> Response:
        return self.on_static(request, "index.html")

    def on_static(self, request: Request, name: str) -> Response:
        path = STATIC / name
        if path.suffix not in _CONTENT_TYPES or not path.is_file():
            raise NotFound(f"no file {name}")
        return Response(path.read_bytes(), content_type=_CONTENT_TYPES[path.suffix])

    def on_info(self, request: Request) -> Response:
        ix = self.index
        return self._json(
            {
                "path": str(ix.path),
                "sources": [{"label": s.label, "kind": s.kind, "step": s.step} for s in ix.sources],
                "indexed": len(ix.rows),
                "done": ix.done,
                "error": ix.error,
                "seconds": round(ix.seconds, 3),
                "tokenizer": self.tokenizer_name,
                "facets": ix.facets(),
            }
        )

    def on_episodes(self, request: Request) -> Response:
        args = request.args
        try:
            result = self.index.query(
                dict(args), offset=args.get("offset", 0, type=int), limit=min(args.get("limit", 200, type=int), 2000)
            )
        except ValueError as e:
            return self._json({"error": f"bad filter: {e}"}, 400)
        return self._json(result)

    def on_episode(self, request: Request, i: int) -> Response:
        try:
            traj = self.index.load(i)
        except IndexError as e:
            raise NotFound(str(e)) from e
        return self._json(episode_payload(traj, self.texts, self.index.rows[i]))

    def on_group(self, request: Request, i: int) -> Response:
        if not 0 <= i < len(self.index.rows):
            raise NotFound(f"no episode {i}")
        return self._json({"rows": self.index.group(i)})

    def on_game(self, request: Request, i: int) -> Response:
        if not 0 <= i < len(self.index.rows):
            raise NotFound(f"no episode {i}")
        rows = self.index.game(i)
        return self._json(game_payload([(r, self.index.load(r["index"])) for r in rows]))

    def on_tree(self, request: Request, i: int) -> Response:
        if not 0 <= i < len(self.index.rows):
            raise NotFound(f"no episode {i}")
        return self._json(tree_payload([(r, self.index.load(r["index"])) for r in self.index.tree(i)]))


def tree_payload(leaves: list[tuple[dict[str, Any], Trajectory]]) -> dict[str, Any]:
    """A tree rollout for the page (:mod:`turnrl.rollout.tree`): its nodes root first, each with its parent, the turns
    on the edge into it (played once, shared by every leaf below), the leaves below it and their mean reward; a
    chain is a tree of one node."""
    nodes: dict[str, dict[str, Any]] = {}
    for row, traj in leaves:
        tree = traj.metadata.get("tree") or {}
        path = [str(n) for n in tree.get("path") or [traj.id]]
        starts = [0, *tree.get("branch_turns", [])]
        for j, node in enumerate(path):
            if node not in nodes:
                end = starts[j + 1] if j + 1 < len(path) else len(traj.turns)
                nodes[node] = {
                    "id": node,
                    "parent": path[j - 1] if j else None,
                    "depth": j,
                    "leaves": [],
                    "rewards": [],
                    "turns": [
                        {
                            "turn": t.index,
                            "reward": t.reward,
                            "action": t.action.content or "",
                            "told": [m.model_dump(exclude_none=True) for m in t.observation],
                        }
                        for t in traj.turns[starts[j] : end]
                    ],
                }
            nodes[node]["leaves"].append(row["index"])
            nodes[node]["rewards"].append(row["reward"])
    out = []
    for entry in nodes.values():
        rewards = entry.pop("rewards")
        out.append({**entry, "value": sum(rewards) / len(rewards)})
    return {"nodes": out}


def game_payload(seats: list[tuple[dict[str, Any], Trajectory]]) -> dict[str, Any]:
    """A multi-agent game for the page: the seats (their rows) and every move in the order it was played (each
    seat's turns interleaved by ``info["move"]``), with the messages that seat was told after it."""
    moves = []
    for row, traj in seats:
        for t in traj.turns:
            moves.append(
                {
                    "move": t.info.get("move"),
                    "seat": row.get("seat") or t.role,
                    "row": row["index"],
                    "turn": t.index,
                    "reward": t.reward,
                    "action": t.action.content or "",
                    "told": [m.model_dump(exclude_none=True) for m in t.observation],
                    "invalid_moves": t.info.get("invalid_moves"),
                }
            )
    moves.sort(key=lambda m: (m["move"] if isinstance(m["move"], int) else 1 << 30, m["row"], m["turn"]))
    return {
        "seats": [
            {
                "seat": r.get("seat"),
                "index": r["index"],
                "outcome": r["outcome"],
                "reward": r["reward"],
                "policy": traj.metadata.get("policy"),
            }
            for r, traj in seats
        ],
        "moves": moves,
    }


class ViewServer:
    """Serve a :class:`ViewApp` on ``host:port`` (port 0 picks a free one); a context manager in tests."""

    def __init__(self, app: ViewApp, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.httpd = quiet_server(host, port, app)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The page's address, e.g. ``http://127.0.0.1:8123/``."""
        return f"http://{self.httpd.host}:{self.httpd.server_port}/"

    def start(self) -> ViewServer:
        """Serve in a daemon thread."""
        self.thread = serve_in_thread(self.httpd, name="turnrl-view")
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        stop(self.httpd)

    def __enter__(self) -> ViewServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
