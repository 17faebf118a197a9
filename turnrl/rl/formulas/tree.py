"""Turn-level advantages of a tree of episodes (docs/algorithms.md §14, after TreeRL and TreePO).

A tree replaces a group: its **root** is the task's episode up to the first branch (the *trunk*), **inner nodes** are
the turn boundaries where the episode was forked again, and **leaves** are the finished episodes. Each leaf is
described by its **path**: the node ids from the root down to the leaf itself (``[root, a, leaf]``); the tokens of
the turns between two nodes belong to the edge *into* the lower one, and the trunk's tokens to the root. A chain (an
episode never forked) is a tree of one leaf whose path is ``[root]``.

* Node value V(n): the mean return of the leaves below n (a leaf's own return).
* Baseline B: V(root) of the leaf's tree, or — trees of one task sampled side by side (a *forest*, leaves given the
  same ``group``) — the mean of their roots' values, which adds GRPO's term across roots.
* Advantage of the edge into n: A(n) = [V(n) − B] + [V(n) − V(p(n))], the global and the local term (the local term of
  a root is 0), optionally divided by the standard deviation of the returns of its group (unbiased, + ε, as GRPO).
* Row view: a leaf trained as its own row counts every node above it once per leaf below that node, so each row's
  tokens on the edge into n get A(n) / √|L(n)| (TreeRL's scaling). Shared view (a prefix tree trained once): the
  edge's tokens appear once and get the rows' sum, |L(n)| · A(n) / √|L(n)| = √|L(n)| · A(n), so both views give the
  same gradient.

Its namesake :mod:`turnrl.rollout.tree` is the same concept a layer down: how the trees these formulas score are
played.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence

import torch


def node_values(returns: Sequence[float], paths: Sequence[Sequence[Hashable]]) -> dict[Hashable, tuple[float, int]]:
    """Each node's value V(n) and leaf count |L(n)|: the mean return of the leaves whose path passes through n.

    Raises:
        ValueError: lengths differ, a path is empty, or two leaves end at the same node.
    """
    if len(returns) != len(paths):
        raise ValueError(f"{len(returns)} returns for {len(paths)} paths")
    if any(len(p) == 0 for p in paths):
        raise ValueError("every leaf needs a path of at least its root")
    ends = [p[-1] for p in paths]
    if len(set(ends)) != len(ends):
        raise ValueError("two leaves end at the same node: a leaf's path ends with its own id")
    total: dict[Hashable, float] = defaultdict(float)
    count: dict[Hashable, int] = defaultdict(int)
    for r, path in zip(returns, paths):
        for node in path:
            total[node] += float(r)
            count[node] += 1
    return {n: (total[n] / count[n], count[n]) for n in total}


def tree_advantages(
    returns: Sequence[float],
    paths: Sequence[Sequence[Hashable]],
    groups: Sequence[Hashable] | None = None,
    *,
    normalize: bool = False,
    eps: float = 1e-6,
) -> list[list[float]]:
    """Row-view advantages (docs/algorithms.md §14): for each leaf, one value per node of its path — what every
    generated token of the edge into that node gets in the leaf's row, A(n) / √|L(n)|.

    Args:
        returns: each leaf's return R.
        paths: each leaf's node ids, root first, the leaf's own id last (a chain: ``[root]``).
        groups: each leaf's group (the trees of one task); None: each tree is its own group (B = V(root)).
        normalize: divide by the standard deviation of the group's returns (+ ``eps``); a group of one leaf gets 0,
            as in GRPO.

    Returns:
        ``out[i][j]``: the advantage of leaf i's tokens on the edge into ``paths[i][j]`` (j = 0: the trunk).
    """
    values = node_values(returns, paths)
    groups = list(groups) if groups is not None else [p[0] for p in paths]
    if len(groups) != len(paths):
        raise ValueError(f"{len(groups)} groups for {len(paths)} leaves")
    roots: dict[Hashable, set[Hashable]] = defaultdict(set)
    members: dict[Hashable, list[float]] = defaultdict(list)
    for g, path, r in zip(groups, paths, returns):
        roots[g].add(path[0])
        members[g].append(float(r))
    baseline = {g: sum(values[root][0] for root in rs) / len(rs) for g, rs in roots.items()}
    scale = {g: _std(rs) + eps if normalize else 1.0 for g, rs in members.items()}
    out = []
    for g, path in zip(groups, paths):
        row = []
        for j, node in enumerate(path):
            v, leaves = values[node]
            local = v - values[path[j - 1]][0] if j > 0 else 0.0
            a = (v - baseline[g]) + local
            if normalize and len(members[g]) < 2:
                a = 0.0
            row.append(a / scale[g] / math.sqrt(leaves))
        out.append(row)
    return out


def shared_weights(
    returns: Sequence[float],
    paths: Sequence[Sequence[Hashable]],
    groups: Sequence[Hashable] | None = None,
    *,
    normalize: bool = False,
    eps: float = 1e-6,
) -> dict[Hashable, float]:
    """Shared-view advantages: for each node, what the edge into it gets when a prefix tree trains it once — the sum
    of the row-view advantages of the leaves below it, √|L(n)| · A(n) (the same gradient as the rows)."""
    rows = tree_advantages(returns, paths, groups, normalize=normalize, eps=eps)
    out: dict[Hashable, float] = defaultdict(float)
    for path, row in zip(paths, rows):
        for node, a in zip(path, row):
            out[node] += a
    return dict(out)


def _std(xs: Sequence[float]) -> float:
    """Unbiased standard deviation (0 for fewer than two values), as GRPO's group std."""
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def tree_token_advantages(
    scores: torch.Tensor,
    paths: torch.Tensor,
    depth: torch.Tensor,
    group_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    normalize: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """:func:`tree_advantages` on a batch's tensors: ``scores`` ``(B,)`` returns, ``paths`` ``(B, D)`` each row's
    node numbers (−1 padding), ``depth`` ``(B, T)`` each token's place on its row's path, ``group_ids`` ``(B,)``;
    returns ``(B, T)`` — each generated token (``loss_mask``) the row-view advantage of its node."""
    rows = [[int(n) for n in p if n >= 0] for p in paths.tolist()]
    adv = tree_advantages(scores.tolist(), rows, group_ids.tolist(), normalize=normalize, eps=eps)
    width = paths.shape[1]
    table = torch.tensor([a + [0.0] * (width - len(a)) for a in adv], dtype=torch.float32, device=loss_mask.device)
    return table.gather(1, depth.clamp(min=0, max=width - 1).to(loss_mask.device)) * loss_mask
