"""Rows of different lengths cut into lanes of similar length: the learner's forward passes
(:func:`turnrl.rl.core.forward.forward_tokens`) and the HF agent's decoding (:meth:`turnrl.agents.hf.HFAgent._lanes`)
pad every row of a call to its longest one, and a lane is a call of its own."""

from __future__ import annotations


def lanes_of(spans: list[int], overhead: int) -> list[list[int]]:
    """Cut rows into lanes of similar length: the indices into ``spans`` (each row's padded length in a pass),
    shortest first, grouped so that the sum over lanes of (rows × the lane's longest span + ``overhead``) is least.
    One lane holding every row is the plain pass; rows of equal span always share a lane."""
    order = sorted(range(len(spans)), key=lambda i: spans[i])
    n = len(order)
    if n < 2 or n * (spans[order[-1]] - spans[order[0]]) <= overhead:  # no cut could save a call's cost
        return [order] if n else []
    best, cut = [0.0] + [float("inf")] * n, [0] * (n + 1)
    for j in range(1, n + 1):  # best[j]: the least cost of the j shortest rows; a lane ends at a distinct span
        if j < n and spans[order[j]] == spans[order[j - 1]]:
            continue
        for i in range(j):  # a cut after a row whose span repeats costs inf and is never taken
            cost = best[i] + (j - i) * spans[order[j - 1]] + overhead
            if cost < best[j]:
                best[j], cut[j] = cost, i
    lanes, j = [], n
    while j > 0:
        lanes.append(order[cut[j] : j])
        j = cut[j]
    return lanes[::-1]


def merge_pays(rows_a: int, width_a: int, rows_b: int, width_b: int, overhead: int) -> bool:
    """Whether two lanes that both have steps to run cost less as one call per step than as two: one call pads
    both to the wider one, so it costs the narrower lane's rows × the difference in width, and saves a call's
    ``overhead``. Widths are padded lengths (tokens), ``overhead`` is a call's fixed cost in the same units."""
    wide = max(width_a, width_b)
    return rows_a * (wide - width_a) + rows_b * (wide - width_b) <= overhead
