"""Rollout workers that were lost — their process, or their whole node (its raylet and every worker on it) — and
come back (docs/cluster.md#node-loss).

A worker whose lease fails leaves the runner's live workers at once, and the jobs it had not finished go back to the
ledger, where the other workers take them (``episodes_replayed``). Ray restarts its actor (``ray.max_restarts``)
on a node with room for what it asks: its own node when only the process died, another node with the same custom
resources when its node is gone — or, when no live node has them, the first node with room that joins later. The
resources a worker asks for are never relaxed: they are how the user chose its nodes (GPUs, data, network), and a
worker put elsewhere could not play there. :class:`Recovery` asks each lost worker whether it is back (a ``ready``
call, again every half second while Ray says it is restarting) and hands it back to the runner once it answers —
with the policy, if it is a new process; its next lease carries the current weights, which it loads before it plays
its first job. A worker whose actor Ray gave up on (its restarts used up) is dropped for good.

The nodes of lost workers are watched until Ray decides (its health checks mark a node whose raylet died dead within
seconds to tens of seconds); each node found dead is counted (``nodes_lost``), logged and kept in
``OUT_DIR/placement.json`` (``lost_nodes``). While no worker is live the run waits for one — ``ray.placement_timeout``
while no live node can hold them (a node must join), ``ray.start_timeout`` while Ray restarts them — then stops with
an error that names what is short, the lost nodes and what the step has collected. Every wait has a timeout.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from turnrl.rl.placement.cluster import RayPlacementError, check_head, ray_module
from turnrl.rl.placement.nodes import record_lost, shortfall
from turnrl.rl.placement.shipping import problem_text

logger = logging.getLogger(__name__)

KEYS = ("ray.rollout_workers", "ray.worker_cpus, ray.worker_gpus or ray.worker_resources")
_RETRY = 0.5  # seconds between two questions to a worker Ray is restarting


class Recovery:
    """The lost workers of a :class:`~turnrl.rl.placement.ray.RayRunner` on their way back (see the module
    docstring); the runner calls :meth:`lose`, :meth:`poll` and :meth:`watch_nodes`, and :meth:`await_any` when no
    worker is live."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.back: dict[int, dict[str, Any]] = {}  # lost worker → its probe, when to ask again, where it was
        self.watched: dict[str, dict[str, Any]] = {}  # node id of lost workers → {"node_ip", "workers"} until decided
        self.lost_nodes: list[dict[str, Any]] = []
        self._looked = self._polled = 0.0  # when the nodes were last looked at, and the lost workers asked

    def lose(self, w: int, step: int | None = None) -> None:
        """Worker ``w`` failed: out of the live workers until it answers again."""
        if w in self.runner.alive:
            self.runner.alive.remove(w)
        where = self.runner.placed[w] if w < len(self.runner.placed) else {}
        node = where.get("node_id")
        now = time.monotonic()
        self.back[w] = {
            "probe": self.runner.workers[w].ready.remote(),
            "asked": now,
            "retry": 0.0,
            "since": now,
            "node_id": node,
            "node_ip": where.get("node_ip"),
            "warned": False,
        }
        if node is not None and node not in {n["node_id"] for n in self.lost_nodes}:
            self.watched.setdefault(node, {"node_ip": where.get("node_ip"), "workers": set(), "step": step})
            self.watched[node]["workers"].add(w)

    def poll(self, wait: float = 0.0) -> None:
        """Take back every lost worker that answers, waiting up to ``wait`` seconds until one does; ask again those
        Ray is still restarting (every half second at most); drop those Ray gave up on."""
        now = time.monotonic()
        if not self.back or (not wait and now - self._polled < _RETRY):
            return
        ray, deadline, back = ray_module(), now + wait, len(self.runner.alive)
        while self.back:
            for w, b in self.back.items():
                if b["probe"] is None and now >= b["retry"]:
                    b["probe"], b["asked"] = self.runner.workers[w].ready.remote(), now
            probes = {b["probe"]: w for b in self.back.values() if b["probe"] is not None}
            left = max(deadline - now, 0.0)
            if probes:
                ready, _ = ray.wait(list(probes), num_returns=len(probes), timeout=min(left, _RETRY))
                for ref in ready:
                    self._answer(probes[ref], ref)
            else:
                time.sleep(min(left, _RETRY))
            now = self._polled = time.monotonic()
            if now >= deadline or len(self.runner.alive) > back:
                return

    def _answer(self, w: int, ref: Any) -> None:
        ray, b = ray_module(), self.back[w]
        cfg = self.runner.cfg.ray
        try:
            state = ray.get(ref, timeout=cfg.start_timeout)
            if state.get("problems"):  # the run's modules do not import on its new node
                raise RayPlacementError(problem_text(f"rollout worker {w}", state["where"], state["problems"]))
            if not state["setup"]:  # a new process: the policy at version 0 (the next lease brings the current one)
                state = ray.get(
                    self.runner.workers[w].setup.remote([self.runner._model_ref], [self.runner._tokenizer_ref]),
                    timeout=cfg.start_timeout,
                )
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
            # Ray is restarting it, or waits for a node that can hold it: ask again (at once if this answer is old)
            b["probe"], b["retry"] = None, max(b["asked"] + _RETRY, time.monotonic())
            if not b["warned"] and time.monotonic() - b["since"] > cfg.start_timeout:
                why = shortfall("rollout worker", 1, self.runner.asks, KEYS)
                logger.warning(
                    "rollout worker %d has not come back for %.0fs%s; the run goes on without it",
                    w,
                    time.monotonic() - b["since"],
                    f": {why}" if why else "",
                )
                b["warned"] = True
            return
        except ray.exceptions.RayActorError as e:  # its restarts are used up: gone for good
            logger.warning("dropping rollout worker %d: Ray will not restart it (%s)", w, e.__class__.__name__)
            del self.back[w]
            return
        del self.back[w]
        self.runner._place(w, state)
        self.runner.alive = sorted({*self.runner.alive, w})
        logger.info(
            "rollout worker %d is back on node %s (%s)",
            w,
            state["where"].get("node_ip"),
            (state["where"].get("node_id") or "?")[:8],
        )

    def watch_nodes(self, step: int, force: bool = False) -> None:
        """Count the watched nodes that Ray has marked dead (once a second at most, unless ``force``); forget those
        that are alive and whose workers are all back."""
        if not self.watched or (not force and time.monotonic() - self._looked < 1.0):
            return
        self._looked = time.monotonic()
        alive = {n["NodeID"] for n in ray_module().nodes() if n.get("Alive")}
        for node, info in list(self.watched.items()):
            if node not in alive:
                del self.watched[node]
                at = (info["step"] if info["step"] is not None else step) + 1  # the step it was lost in
                entry = {
                    "node_id": node,
                    "node_ip": info["node_ip"],
                    "step": at,
                    "rollout_workers": sorted(info["workers"]),
                }
                self.lost_nodes.append(entry)
                logger.warning(
                    "lost node %s (%s) at step %d with rollout workers %s; the run goes on without it",
                    info["node_ip"],
                    node[:8],
                    at,
                    entry["rollout_workers"],
                )
                record_lost(self.runner.cfg.out_dir, self.lost_nodes)
            elif not info["workers"] & set(self.back):
                del self.watched[node]

    def await_any(self, step: int, collected: dict[str, Any]) -> None:
        """Wait until a lost worker is live again: ``ray.placement_timeout`` while no live node can hold them,
        ``ray.start_timeout`` while Ray restarts them.

        Raises:
            RayPlacementError: none came back (naming the resource that is short and the lost nodes).
            HeadLostError: the cluster's head stopped answering meanwhile.
        """
        cfg = self.runner.cfg.ray
        since = time.monotonic()
        while not self.runner.alive:
            if not self.back:
                raise RayPlacementError(
                    f"no rollout worker left at step {step + 1}: Ray will not restart any "
                    f"(ray.max_restarts={cfg.max_restarts}); collected so far: {collected}"
                )
            check_head(cfg.head_timeout)
            self.watch_nodes(step)
            why = shortfall("rollout worker", len(self.back), self.runner.asks, KEYS)
            limit, key = (
                (cfg.placement_timeout, "ray.placement_timeout") if why else (cfg.start_timeout, "ray.start_timeout")
            )
            if time.monotonic() - since >= limit:
                raise RayPlacementError(self._stranded(step, why, f"waited {limit:g}s: {key}", collected))
            self.poll(wait=_RETRY)

    def _stranded(self, step: int, why: str | None, waited: str, collected: dict[str, Any]) -> str:
        lost = sorted(self.back)
        where = sorted({f"{b['node_ip']} ({(b['node_id'] or '?')[:8]})" for b in self.back.values()})
        gone = "" if not self.lost_nodes else f"; lost nodes: {', '.join(n['node_ip'] for n in self.lost_nodes)}"
        return (
            f"no rollout worker left at step {step + 1}: rollout worker{'s' if len(lost) > 1 else ''} "
            f"{', '.join(map(str, lost))} (last on {', '.join(where)}) did not come back — "
            f"{why or 'Ray is still restarting them'} ({waited}){gone}. Collected so far: {collected}; the "
            f"step's journal ({self.runner.journal}/step-{step}.jsonl) lets the same command, run again, reuse it"
        )
