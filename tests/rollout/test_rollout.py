import asyncio
import json

import pytest
import torch

import turnrl
from turnrl import storage
from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.scripted import FixedAgent, ScriptedAgent
from turnrl.agents.tiny import TEMPLATES, tiny_model, tiny_tokenizer
from turnrl.envs import Task, ToolEnv
from turnrl.rollout.engine import Rollout
from turnrl.tokens import ChatRenderer
from turnrl.verifiers.math import verify

TOOL_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "17 * 23"}}</tool_call>'
TASK = {"id": "t", "prompt": "What is 17 * 23?", "answer": "391"}


class Recorder:
    """Wraps an agent and records every (prompt -> completion) it served."""

    def __init__(self, agent):
        self.agent, self.tokenizer, self.served = agent, agent.tokenizer, {}
        self.eos_ids = getattr(agent, "eos_ids", [])

    def generate(self, prompts, params):
        outs = self.agent.generate(prompts, params)
        for p, c in zip(prompts, outs):
            self.served[tuple(p)] = c
        return outs


def math_envs(n, **kw):
    return [turnrl.make("turnrl/Arithmetic-v0", calculator=True, retry=True, max_turns=4, **kw) for _ in range(n)]


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_sequence_is_what_the_model_saw_and_sampled(template):
    tok = tiny_tokenizer(template)
    agent = Recorder(HFAgent(tiny_model(tok), tok))
    rollout = Rollout(agent, SamplingParams(temperature=1.0, max_new_tokens=16, seed=0), keep_prompts=True)
    trajs = rollout.run(math_envs(4), seeds=[0, 1, 2, 3])
    served_prompts = set(agent.served)
    seen = set()
    for traj in trajs:
        assert traj.error is None and traj.num_turns >= 2
        ids, mask = traj.token_ids, traj.loss_mask
        for turn, prompt in zip(traj.turns, traj.metadata["prompts"]):
            assert ids[: len(prompt)] == prompt  # conditioned on exactly the prefix of the final sequence
            start, end = turn.token_span
            assert start == len(prompt)
            completion = agent.served[tuple(prompt)]
            assert ids[start:end] == completion.token_ids  # exactly the sampled tokens
            assert traj.logprobs[start:end] == completion.logprobs
            seen.add(tuple(prompt))
        assert sum(mask) == sum(t.token_span[1] - t.token_span[0] for t in traj.turns)
        # logprobs of the trained positions agree with one forward pass over the whole episode
        with torch.no_grad():
            logits = agent.agent.model(torch.tensor([ids])).logits[0, :-1].float()
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
        m = torch.tensor(mask[1:], dtype=torch.bool)
        assert torch.allclose(ref[m], torch.tensor(traj.logprobs[1:])[m], atol=1e-4)
    assert seen == served_prompts


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_tokens_decode_to_the_chat_template_rendering(template):
    tok = tiny_tokenizer(template)
    agent = FixedAgent(
        tok,
        [TOOL_CALL, "So it is \\boxed{390}.", "Sorry: \\boxed{391}"],
        assistant_marker={
            "chatml": "<|im_start|>assistant",
            "qwen_tools": "<|im_start|>assistant",
            "llama3": "<|start_header_id|>assistant",
            "gemma": "<start_of_turn>model",
        }[template],
    )
    envs = math_envs(2)
    trajs = Rollout(agent, SamplingParams(max_new_tokens=64)).run(envs, options=[{"task": TASK}] * 2)
    for traj, env in zip(trajs, envs):
        assert [t.reward for t in traj.turns] == [0.0, 0.0, 1.0] and traj.terminated
        assert [t.action.content for t in traj.turns] == [TOOL_CALL, "So it is \\boxed{390}.", "Sorry: \\boxed{391}"]
        text = tok.decode(traj.token_ids, skip_special_tokens=False)
        rendered = ChatRenderer(tok, env.tool_schemas()).render(traj.messages, add_generation_prompt=False)
        assert rendered.startswith(text) and rendered[len(text) :].strip() == ""
        # rewards sit on each turn's last generated token (its end-of-turn token)
        rewards = traj.token_rewards()
        last = traj.turns[-1].token_span[1] - 1
        assert rewards[last] == 1.0 and traj.token_ids[last] == tok.eos_token_id and sum(rewards) == 1.0


def test_truncated_turn_gets_its_closing_from_the_template():
    tok = tiny_tokenizer("chatml")
    agent = ScriptedAgent(tok, lambda p: "a very long answer " * 10)
    env = turnrl.make("turnrl/Arithmetic-v0", retry=True, max_turns=2)
    traj = Rollout(agent, SamplingParams(max_new_tokens=5)).run([env], seeds=[0])[0]
    first = traj.turns[0]
    assert first.info["finish_reason"] == "length"
    closing = traj.token_ids[first.token_span[1] : first.obs_span[1]]
    assert tok.decode(closing).startswith("<|im_end|>\n<|im_start|>user\n")
    assert all(m == 0 for m in traj.loss_mask[first.token_span[1] : first.obs_span[1]])


def test_pag_roles_reach_the_trajectory():
    tok = tiny_tokenizer("chatml")
    agent = FixedAgent(tok, ["\\boxed{5}", "The answer is wrong", "\\boxed{4}"])
    env = turnrl.make("turnrl/Arithmetic-PAG-v0")
    traj = Rollout(agent, SamplingParams()).run(
        [env], options=[{"task": {"id": "t", "prompt": "2+2?", "answer": "4"}}]
    )[0]
    assert [t.role for t in traj.turns] == ["policy", "verifier", "policy"]
    assert [t.reward for t in traj.turns] == [0.0, 1.0, 2.0]


class FlakyEnv(ToolEnv):
    """Raises or hangs on some tasks."""

    def __init__(self, mode):
        super().__init__([Task(id="t", prompt="p", answer="1")], verifier=verify, max_turns=2)
        self.mode = mode

    async def _astep(self, action):
        if self.mode == "raise":
            raise RuntimeError("backend down")
        if self.mode == "hang":
            await asyncio.sleep(30)
        return await super()._astep(action)


def test_a_failing_env_ends_only_its_own_episode(tmp_path):
    tok = tiny_tokenizer("chatml")
    agent = FixedAgent(tok, ["\\boxed{1}"])
    path = tmp_path / "out.jsonl"
    with storage.TrajectoryWriter(path) as writer:
        rollout = Rollout(agent, SamplingParams(), env_timeout=0.5, sink=writer)
        trajs = rollout.run([FlakyEnv("ok"), FlakyEnv("raise"), FlakyEnv("hang"), FlakyEnv("ok")])
    assert next(t.error for t in trajs) is None and trajs[3].error is None
    assert trajs[0].total_reward == 1.0
    assert "RuntimeError: backend down" in trajs[1].error
    assert "timed out after 0.5s" in trajs[2].error
    assert trajs[1].num_turns == 1 and trajs[1].turns[0].token_span is not None  # the generated turn is kept
    assert len(storage.read_jsonl(path)) == 4


def test_reset_failure_is_recorded():
    tok = tiny_tokenizer("chatml")
    env = turnrl.make("turnrl/Arithmetic-v0")
    trajs = Rollout(FixedAgent(tok, ["x"]), SamplingParams()).run(
        [env, turnrl.make("turnrl/Arithmetic-v0")], options=[{"index": -5}, None]
    )
    assert "reset failed" in trajs[0].error and trajs[1].error is None


def test_context_limit_truncates_and_flags():
    tok = tiny_tokenizer("chatml")
    agent = ScriptedAgent(tok, lambda p: "no answer here " * 4)
    env = turnrl.make("turnrl/Arithmetic-v0", retry=True, max_turns=10)
    prompt_len = len(ChatRenderer(tok).prompt_tokens(env.reset(seed=0)[0]))
    traj = Rollout(agent, SamplingParams(max_new_tokens=30), max_context=prompt_len + 60).run([env], seeds=[0])[0]
    assert traj.truncated and traj.metadata["truncated_by"] == "context"
    assert len(traj.token_ids) <= prompt_len + 60 and traj.num_turns < 10


def test_max_turns_cap_and_parquet_stream(tmp_path):
    tok = tiny_tokenizer("chatml")
    agent = FixedAgent(tok, ["\\boxed{0}"])
    path = tmp_path / "x.parquet"
    with storage.TrajectoryWriter(path) as writer:
        assert (tmp_path / "x.parquet.partial.jsonl").exists()
        trajs = Rollout(agent, SamplingParams(), max_turns=2, sink=writer).run(math_envs(3), seeds=[0, 1, 2])
    assert all(t.num_turns == 2 and t.truncated and not t.terminated for t in trajs)
    assert storage.read_parquet(path) == trajs and not (tmp_path / "x.parquet.partial.jsonl").exists()
    json.dumps(trajs[0].model_dump(mode="json"))


def test_rollout_needs_n_equal_one():
    tok = tiny_tokenizer("chatml")
    with pytest.raises(ValueError, match="n == 1"):
        Rollout(FixedAgent(tok, ["x"]), SamplingParams(n=2))
