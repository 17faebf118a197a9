"""docs/algorithms.md §14's checks of the tree advantage (turnrl/rl/formulas/tree.py), on hand-built trees."""

from __future__ import annotations

import math

import pytest
import torch

from turnrl.rl.formulas.advantages import group_normalize
from turnrl.rl.formulas.tree import node_values, shared_weights, tree_advantages

# root r branches into a and b at turn 1; each branches into two leaves at turn 2 (4 leaves)
PATHS = [["r", "a", "a1"], ["r", "a", "a2"], ["r", "b", "b1"], ["r", "b", "b2"]]


def test_node_values_are_the_mean_return_of_the_leaves_below():
    values = node_values([1, 0, 1, 1], PATHS)
    assert values["r"] == (0.75, 4) and values["a"] == (0.5, 2) and values["b"] == (1.0, 2)
    assert values["a2"] == (0.0, 1)


def test_all_leaves_equal_give_zero_advantage_everywhere():
    for r in (0.0, 1.0, 0.3):
        assert all(a == 0 for row in tree_advantages([r] * 4, PATHS) for a in row)
        assert all(a == 0 for row in tree_advantages([r] * 4, PATHS, normalize=True) for a in row)


def test_one_decisive_branch_gets_the_signal_and_the_trunk_none():
    rows = tree_advantages([1, 1, 0, 0], PATHS)
    trunk, branch_a, branch_b = rows[0][0], rows[0][1], rows[2][1]
    assert trunk == 0.0 and branch_a > 0 > branch_b
    assert branch_a == pytest.approx(((1 - 0.5) + (1 - 0.5)) / math.sqrt(2))  # global + local, scaled by √|L(a)|
    # below the decisive branch nothing is decided any more: the local term is 0, only the global one remains
    assert rows[0][2] == pytest.approx((1 - 0.5) + 0.0) and rows[2][2] == pytest.approx((0 - 0.5) + 0.0)
    assert rows[0][2] == rows[1][2] and rows[2][2] == rows[3][2]


def test_the_local_terms_of_one_branch_points_children_sum_to_zero():
    returns = [1.0, 0.0, 0.25, 0.5]
    values = node_values(returns, PATHS)
    local = [values[c][0] - values["r"][0] for c in ("a", "b")]
    assert sum(local) == pytest.approx(0.0)
    local = [values[c][0] - values["a"][0] for c in ("a1", "a2")]
    assert sum(local) == pytest.approx(0.0)


@pytest.mark.parametrize("normalize", [False, True])
def test_chains_of_one_task_as_a_forest_reduce_to_grpo(normalize):
    returns = [1.0, 0.0, 0.0, 1.0, 1.0, 0.5]
    paths = [[f"chain{i}"] for i in range(len(returns))]  # G single-leaf trees
    rows = tree_advantages(returns, paths, groups=["task"] * len(returns), normalize=normalize)
    expected = (
        (torch.tensor(returns) - sum(returns) / len(returns)).tolist()
        if not normalize
        else group_normalize(torch.tensor(returns, dtype=torch.float64), torch.zeros(len(returns))).tolist()
    )
    assert [row[0] for row in rows] == pytest.approx(expected)
    # without the forest each chain is its own tree: nothing to compare it with
    assert all(row == [0.0] for row in tree_advantages(returns, paths))


def test_the_row_view_and_the_shared_view_give_the_same_weight_to_every_node():
    returns = [1.0, 0.0, 0.25, 0.5]
    rows, shared = tree_advantages(returns, PATHS), shared_weights(returns, PATHS)
    values = node_values(returns, PATHS)
    for node in ("r", "a", "b", "a1"):
        row_sum = sum(row[j] for path, row in zip(PATHS, rows) for j, n in enumerate(path) if n == node)
        assert shared[node] == pytest.approx(row_sum)
    a = (values["a"][0] - values["r"][0]) * 2  # global + local are equal one level below the root
    assert shared["a"] == pytest.approx(math.sqrt(2) * a)


def test_a_forest_of_two_trees_compares_their_roots():
    paths = [["r1", "x1"], ["r1", "y1"], ["r2", "x2"], ["r2", "y2"]]
    rows = tree_advantages([1, 1, 0, 1], paths, groups=["t", "t", "t", "t"])
    assert rows[0][0] == pytest.approx((1.0 - 0.75) / math.sqrt(2))  # the trunk of the better tree: positive
    assert rows[2][0] == pytest.approx((0.5 - 0.75) / math.sqrt(2))
    alone = tree_advantages([1, 1, 0, 1], paths)
    assert alone[0][0] == alone[2][0] == 0.0


def test_bad_trees_are_refused():
    with pytest.raises(ValueError, match="2 returns for 1 paths"):
        tree_advantages([1, 0], [["r"]])
    with pytest.raises(ValueError, match="ends with its own id"):
        tree_advantages([1, 0], [["r", "a"], ["r", "a"]])
    with pytest.raises(ValueError, match="at least its root"):
        tree_advantages([1], [[]])
