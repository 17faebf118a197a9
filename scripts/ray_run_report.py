"""Print what a run on Ray recorded about its nodes (docs/cluster.md#measured): the weight pushes per node
(OUT_DIR/weight_pushes.jsonl), the ledger over its steps (metrics.jsonl, and the episodes each step saved when
save_trajectories was on) and the nodes it lost (placement.json).

    .venv/bin/python scripts/ray_run_report.py OUT_DIR
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def main(out: Path) -> None:
    pushes = lines(out / "weight_pushes.jsonl")
    by_node: dict[str, list[dict]] = defaultdict(list)
    for row in pushes:
        by_node[f"{row['node_ip']} ({(row.get('node_id') or '?')[:8]})"].append(row)
    print(f"== weight pushes per node ({out / 'weight_pushes.jsonl'}): one line per worker load")
    for node, rows in sorted(by_node.items()):
        fetch = [r["fetch_s"] for r in rows]
        load = [r["load_s"] for r in rows]
        print(
            f"   node {node}: {len(rows)} loads of versions {sorted({r['version'] for r in rows})}, "
            f"{max(r['bytes'] for r in rows) / 1e6:.3f} MB each; fetch to the node median "
            f"{statistics.median(fetch):.4f} s (max {max(fetch):.4f}), load median {statistics.median(load):.4f} s "
            f"(max {max(load):.4f})"
        )
    steps = [h for h in lines(out / "metrics.jsonl") if "collected_episodes" in h]

    def total(key: str) -> int:
        return int(sum(h.get(key, 0.0) for h in steps))

    print(
        f"== the ledger over {len(steps)} steps (metrics.jsonl): collected {total('collected_episodes')}, trained "
        f"{total('trained_episodes')}, replayed {total('episodes_replayed')}, lost {total('ledger_lost')}, "
        f"duplicated {total('ledger_duplicated')}; nodes lost {total('nodes_lost')}, worker restarts "
        f"{total('worker_restarts')}, episodes reused from the journal {total('reused_episodes')}"
    )
    if any(h.get("workers_waiting") for h in steps):
        print(
            "   rollout workers lost and not back at each step's end: "
            + " ".join(str(int(h.get("workers_waiting", 0))) for h in steps)
        )
    saved = [
        json.loads(line)["metadata"]["job"]
        for f in sorted((out / "train").glob("step-*/trajectories.jsonl"))
        for line in f.read_text().splitlines()
        if line.strip()
    ]
    if saved:
        twice = sum(n - 1 for n in Counter(saved).values() if n > 1)
        print(f"   the episodes saved per step: {len(saved)} jobs, {len(set(saved))} distinct, {twice} twice")
    placed = json.loads((out / "placement.json").read_text()) if (out / "placement.json").exists() else {}
    for node in placed.get("lost_nodes", []):
        print(
            f"   lost node {node['node_ip']} ({node['node_id'][:8]}) in step {node['step']} with rollout workers "
            f"{node['rollout_workers']}"
        )
    for w in placed.get("rollout_workers", []):
        again = f", restarted {w['restarts']}x" if w.get("restarts") else ""
        print(f"   rollout worker {w['index']} now on {w['node_ip']} ({w['node_id'][:8]}){again}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
