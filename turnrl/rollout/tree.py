"""Tree rollouts: episodes that branch at turn boundaries (docs/algorithms.md §14).

A tree starts as one episode per root (the task's reset, its trunk sampled once). When every live episode of the
tree has played ``turn`` turns — a :class:`Branch` of the :class:`TreeSpec` — each one is forked into ``children``
episodes: its environment (:func:`turnrl.envs.fork.fork`), its tokens, log-probabilities and turns so far are copied,
and with an agent that keeps KV sessions each child's session starts from the parent's cache (the shared history is
prefilled once). The children then sample their next turns independently. An episode that ends before a branch turn
is a leaf there (the tree has fewer leaves than the spec's maximum).

Every leaf is a token-exact :class:`~turnrl.types.Trajectory` whose ``metadata["tree"]`` records its place:

* ``root``: the tree's id; ``path``: the node ids from the root to this leaf (the root, one id per branch the leaf
  passed, its own id last — a leaf that never branched has the path ``[root]``);
* ``branch_turns``: the turn index at which each node after the root begins (turn ``t`` of the leaf belongs to the
  edge into ``path[j]``, j the number of branch turns ≤ t), so that the tokens of each turn can be given the
  advantage of its node (:func:`turnrl.rl.formulas.tree.tree_advantages`).

Its namesake :mod:`turnrl.rl.formulas.tree` is the same concept a layer up: the advantages of the trees played here.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from turnrl.envs.fork import fork
from turnrl.rollout.engine import Rollout
from turnrl.rollout.episode import Episode


@dataclass(frozen=True)
class Branch:
    """Fork each live episode into ``children`` once it has played ``turn`` turns (0: right after the reset)."""

    turn: int
    children: int

    def __post_init__(self) -> None:
        if self.turn < 0 or self.children < 2:
            raise ValueError(
                f"a branch needs turn >= 0 and children >= 2, got turn={self.turn}, children={self.children}"
            )


@dataclass(frozen=True)
class TreeSpec:
    """Where episodes branch: :class:`Branch` es at increasing turns (e.g. 2 children at turns 1 and 2: 4 leaves)."""

    branches: tuple[Branch, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        turns = [b.turn for b in self.branches]
        if turns != sorted(set(turns)):
            raise ValueError(f"branch turns must increase, got {turns}")

    @property
    def leaves(self) -> int:
        """The most leaves a root grows (each branch multiplies them)."""
        n = 1
        for b in self.branches:
            n *= b.children
        return n


def branch_episode(rollout: Rollout, ep: Episode, node_ids: Sequence[str]) -> list[Episode]:
    """Fork ``ep`` (in play, at a turn boundary) into one episode per node id: ``ep`` itself continues as the first,
    with ``node_ids[0]``, the others are copies with the rest. Each copy has its own environment (forked), its own
    KV session (started from ``ep``'s cache where the agent can fork sessions) and, with per-episode sampling
    streams, its own stream."""
    if ep.done or ep.turn_start is not None:
        raise ValueError("an episode branches between turns, while in play")
    tree = ep.traj.metadata["tree"]
    turn = len(ep.traj.turns)
    out = []
    for c, node in enumerate(node_ids):
        child = ep if c == 0 else _copy(rollout, ep, c)
        meta = child.traj.metadata["tree"] = {
            **tree,
            "path": [*tree["path"], node],
            "branch_turns": [*tree["branch_turns"], turn],
        }
        meta["child"] = c
        out.append(child)
    return out


def _copy(rollout: Rollout, ep: Episode, c: int) -> Episode:
    """A second episode in ``ep``'s state: everything copied but the environment (forked) and the KV session (new,
    seeded from ``ep``'s where the agent can)."""
    env = fork(ep.env)
    memo = {id(ep.env): env, id(ep.renderer): ep.renderer}  # the renderer holds no episode state: shared
    child: Episode = copy.deepcopy(ep, memo)
    child.session = uuid.uuid4().hex
    forker = getattr(rollout.agent, "fork_session", None)
    if rollout.uses_sessions and callable(forker):
        forker(ep.session, child.session)
    if ep.sample_seed is not None:  # its own stream: the children of one node must not sample alike
        child.sample_seed = (ep.sample_seed * 1_000_003 + (len(ep.traj.turns) + 1) * 7_919 + c) % 2**61
    return child


async def play_tree(rollout: Rollout, roots: Sequence[Episode], spec: TreeSpec) -> list[Episode]:
    """Play the trees grown from ``roots`` (started episodes, :meth:`Rollout.start`) under ``spec``: each root is
    played to the first branch turn, forked, its children played to the next, and so on to the end; returns every
    leaf (finished episodes), root by root, in node order."""
    for i, ep in enumerate(roots):
        root = ep.traj.metadata.get("tree", {}).get("root") or f"{ep.traj.group_id or 'tree'}/{i}"
        ep.traj.metadata["tree"] = {"root": root, "path": [root], "branch_turns": []}
    by_root: list[list[Episode]] = [[ep] for ep in roots]
    for b in spec.branches:
        await rollout.advance([ep for eps in by_root for ep in eps], until_turn=b.turn)
        for r, eps in enumerate(by_root):
            grown = []
            for ep in eps:
                if ep.done:  # ended before this branch: a leaf here
                    grown.append(ep)
                    continue
                parent = ep.traj.metadata["tree"]["path"][-1]
                grown += branch_episode(rollout, ep, [f"{parent}.{c}" for c in range(b.children)])
            by_root[r] = grown
    await rollout.advance([ep for eps in by_root for ep in eps])
    return [ep for eps in by_root for ep in eps]
