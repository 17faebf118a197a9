"""Per-token versions from an agent whose weights change inside a generation call (vLLM's in-flight loads), up to
the vLLM boundary: the spans → versions mapping, the rollout's recording of them, and the weights file the engine's
workers read. The engine itself runs in tests/agents/test_vllm.py (scripts/test_vllm.sh)."""

import importlib.util
import os
from collections import namedtuple

import pytest
import torch

import turnrl
from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.agents.vllm import weights_file
from turnrl.agents.vllm_async import supports_inflight_updates, token_versions
from turnrl.rollout.engine import Rollout
from turnrl.rollout.episode import Episode

Span = namedtuple("Span", "version start end")  # the fields of vLLM's WeightVersionSpan


def test_spans_give_one_version_per_token_and_bad_spans_are_errors():
    assert token_versions([Span("3", 0, 2), Span("4", 2, 5)], 5) == [3, 3, 4, 4, 4]
    assert token_versions(None, 4) is None and token_versions([], 0) is None
    with pytest.raises(ValueError, match="gap at token 2"):
        token_versions([Span("3", 0, 2), Span("4", 3, 5)], 5)
    with pytest.raises(ValueError, match="cover 5 tokens, the completion has 6"):
        token_versions([Span("3", 0, 5)], 6)
    with pytest.raises(ValueError):  # a label the agent did not give (vLLM's "default")
        token_versions([Span("default", 0, 2)], 2)


def test_an_episode_takes_one_version_for_all_tokens_or_one_per_token():
    ep = Episode(env=None, traj=None)
    ep.append([1, 2], 1, [-0.5, -0.6], 3)
    ep.append([3, 4, 5], 1, [-0.1, -0.2, -0.3], [3, 4, 4])
    assert ep.versions == [3, 3, 3, 4, 4] and ep.tokens == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="2 token versions for 3 tokens"):
        ep.append([6, 7, 8], 1, None, [4, 4])
    assert len(ep.tokens) == 5  # nothing half-appended


class LandsMidCall(HFAgent):
    """The tiny model, with a load landing inside the first generation call: its tokens from the third on are
    labelled version 1 (what vLLM's spans say after ``pause → load → resume``), and every later call is version 1."""

    calls = 0

    def generate(self, prompts, params, **kw):
        out = super().generate(prompts, params, **kw)
        self.calls += 1
        for c in out:
            first = 0 if self.calls == 1 else 1
            c.policy_version = first
            c.token_versions = [first] * min(2, len(c.token_ids)) + [1] * max(0, len(c.token_ids) - 2)
        assert self.calls > 1 or any(len(c.token_ids) > 2 for c in out)  # the first call does split somewhere
        return out


def test_the_rollout_records_the_version_of_every_token_of_a_turn_a_load_split():
    tok = tiny_tokenizer("chatml")
    agent = LandsMidCall(tiny_model(tok), tok)
    envs = [turnrl.make("turnrl/Arithmetic-v0", retry=True, max_turns=2) for _ in range(2)]
    rollout = Rollout(agent, SamplingParams(temperature=1.0, max_new_tokens=6, seed=0), policy_version=lambda: 1)
    trajs = rollout.run(envs, seeds=[0, 1])
    split = 0
    for t in trajs:
        assert len(t.token_versions) == len(t.token_ids)
        assert all(v == -1 for v, m in zip(t.token_versions, t.loss_mask) if not m)
        s, e = t.turns[0].token_span
        assert t.token_versions[s:e] == [0] * min(2, e - s) + [1] * max(0, e - s - 2)  # split inside the turn
        if t.num_turns > 1:
            s, e = t.turns[1].token_span
            assert t.token_versions[s:e] == [1] * (e - s)  # the second call's labels, token by token
            split += 1
    assert split == 2  # the tiny model answers wrong: both episodes had a second turn


def test_the_weights_file_round_trips_tied_weights_and_is_removed():
    tok = tiny_tokenizer("chatml")
    state = tiny_model(tok).state_dict()
    with weights_file(state) as path:
        assert os.path.exists(path) and (path.startswith("/dev/shm") or not os.path.isdir("/dev/shm"))
        back = torch.load(path, mmap=True, weights_only=True)
        assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)
    assert not os.path.exists(path)
    with pytest.raises(RuntimeError, match="boom"), weights_file(iter(state.items())) as path:
        raise RuntimeError("boom")
    assert not os.path.exists(path)


def test_weights_go_to_the_temporary_folder_when_shared_memory_has_no_room_for_them():
    import shutil
    import tempfile

    from turnrl.agents.vllm import _scratch

    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        free = shutil.disk_usage("/dev/shm").free
        assert _scratch(0) == "/dev/shm" and _scratch(free // 2) == "/dev/shm"
    assert _scratch(10**15) is None  # a petabyte fits no machine's shared memory: the temporary folder
    state = tiny_model(tiny_tokenizer("chatml")).state_dict()
    with weights_file(state) as path:
        assert os.path.dirname(path) in ("/dev/shm", tempfile.gettempdir())


def test_without_vllm_there_are_no_inflight_updates():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: tests/agents/test_vllm.py runs the engine")
    assert not supports_inflight_updates()
    from turnrl.agents.vllm_async import AsyncVLLMAgent

    with pytest.raises(ImportError, match="pip install 'turnrl\\[gpu\\]'"):
        AsyncVLLMAgent("smollm2-135m-instruct")
