"""The learner/driver split reproduces the first trainer's metrics (tests/golden/trace.json, recorded before it).

Bit for bit where no fix changed the maths. Two cases moved, by design:
* ``dapo-accum`` (token-mean with grad_accum=2): the loss is now normalized by the optimizer step's global token
  count instead of averaging two micro-batch token means, so the update, and every figure after the first
  micro-batch, differs;
* ``vapo-warmup``: during value pre-training the policy is not stepped at all (before, its loss was multiplied by 0
  but AdamW still counted the steps), so Adam's bias correction and every later figure differ.
For those two, the first step's rollout figures (before any update) still match exactly.
"""

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "golden"))
from record import CASES, run  # noqa: E402

GOLDEN = json.loads((Path(__file__).parent / "golden" / "trace.json").read_text())
MOVED = {"dapo-accum", "vapo-warmup"}
ROLLOUT_KEYS = ("reward_mean", "reward_std", "success", "turns", "tool_calls", "generated_tokens", "rollout_episodes")


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # the trace was recorded with one thread (reduction order)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("case", sorted(CASES))
def test_split_reproduces_the_golden_trace(tmp_path, case, one_thread):
    got, want = run(case, str(tmp_path)), GOLDEN[case]
    assert len(got["history"]) == len(want["history"])
    if case in MOVED:
        assert got["history"][0] == want["history"][0]  # the step-0 evaluation
        assert {k: got["history"][1][k] for k in ROLLOUT_KEYS} == {k: want["history"][1][k] for k in ROLLOUT_KEYS}
        assert got["params"] != want["params"]
        return
    for g, w in zip(got["history"], want["history"]):
        assert {k: g[k] for k in w} == w  # every figure the first trainer reported, bit for bit (new ones added)
    assert got["params"] == want["params"]
