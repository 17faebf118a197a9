import pytest
import torch

from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent, filter_logits
from turnrl.agents.scripted import FixedAgent, RandomAgent, ScriptedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.utils import row_seed, turn_seed


@pytest.fixture(scope="module")
def agent():
    tok = tiny_tokenizer("chatml")
    return HFAgent(tiny_model(tok), tok, batch_size=8)


def prompts_of(tok, texts):
    return [
        tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
        for t in texts
    ]


def encode(tok, texts):
    return [tok.encode(t, add_special_tokens=False) for t in prompts_of(tok, texts)]


def forward_logprobs(model, prompt, completion, temperature=1.0):
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def test_batched_greedy_equals_one_by_one_despite_padding(agent):
    prompts = encode(
        agent.tokenizer, ["What is 2 + 2?", "hi", "A much longer question about the answer being correct?"]
    )
    assert len({len(p) for p in prompts}) == 3
    params = SamplingParams(temperature=0, max_new_tokens=12)
    batched = agent.generate(prompts, params)
    single = [agent.generate([p], params)[0] for p in prompts]
    assert [c.token_ids for c in batched] == [c.token_ids for c in single]
    assert [c.prompt_index for c in batched] == [0, 1, 2]


def test_no_prompts_give_no_completions(agent):
    # found by the type checker: an empty call made one empty lane, admitted nothing and stepped a missing batch
    # (AttributeError: 'NoneType' object has no attribute 'logits')
    assert agent.generate([], SamplingParams(max_new_tokens=4)) == []


@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
def test_logprobs_match_a_separate_forward_pass(agent, temperature):
    prompts = encode(agent.tokenizer, ["What is 2 + 2?", "The answer is"])
    outs = agent.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=10, seed=3))
    for p, c in zip(prompts, outs):
        ref = forward_logprobs(agent.model, p, c.token_ids, temperature or 1.0)
        assert torch.allclose(ref, torch.tensor(c.logprobs), atol=1e-4)


def test_logprobs_are_of_the_distribution_top_k_and_top_p_sampled_from(agent):
    """Issue 66: μ is the log-probability under the distribution actually sampled — filtered, renormalized — not
    the full one (docs/algorithms.md §11), as vLLM's processed_logprobs."""
    prompts = encode(agent.tokenizer, ["What is 2 + 2?", "The answer is"])
    only = agent.generate(prompts, SamplingParams(temperature=1.0, top_k=1, max_new_tokens=8, seed=1))
    greedy = agent.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=8))
    assert [c.token_ids for c in only] == [c.token_ids for c in greedy]
    assert all(lp == 0.0 for c in only for lp in c.logprobs)  # one token kept: probability 1
    nucleus = agent.generate(
        prompts, SamplingParams(temperature=1.0, top_p=0.3, max_new_tokens=10, seed=2, top_logprobs=3)
    )
    raised = 0
    for p, c in zip(prompts, nucleus):
        full = forward_logprobs(agent.model, p, c.token_ids)
        mine = torch.tensor(c.logprobs)
        assert bool((mine >= full - 1e-5).all()) and bool((mine <= 0).all())  # renormalized over fewer tokens
        raised += int((mine > full + 1e-3).sum())
        for lp, tops, tok in zip(c.logprobs, c.top_logprobs, c.token_ids):
            assert dict(tops).get(tok, lp) == lp and all(v >= -9999.0 for _, v in tops)  # no -inf in JSON
    assert raised > 0


def test_repeated_prompts_are_prefilled_once_with_the_same_results(agent):
    a, b = encode(agent.tokenizer, ["What is 2 + 2?", "hi"])
    greedy = SamplingParams(temperature=0, max_new_tokens=10)
    outs = agent.generate([a, b, a, a], greedy)
    assert outs[0].token_ids == outs[2].token_ids == outs[3].token_ids == agent.generate([a], greedy)[0].token_ids
    assert outs[1].token_ids == agent.generate([b], greedy)[0].token_ids
    sampled = agent.generate([a, b, a], SamplingParams(temperature=1.0, max_new_tokens=10, seed=5, n=3))
    assert len({tuple(c.token_ids) for c in sampled if c.prompt_index != 1}) > 1
    for c in sampled:
        p = [a, b, a][c.prompt_index]
        assert torch.allclose(forward_logprobs(agent.model, p, c.token_ids), torch.tensor(c.logprobs), atol=1e-4)


def test_fire_samples_the_first_token_at_its_own_temperature(agent):
    p = encode(agent.tokenizer, ["What is 2 + 2?"])[0]
    c = agent.generate([p], SamplingParams(temperature=0.5, fire_temperature=10.0, max_new_tokens=6, seed=1))[0]
    first = forward_logprobs(agent.model, p, c.token_ids[:1], 10.0)
    rest = forward_logprobs(agent.model, p, c.token_ids, 0.5)[1:]
    assert torch.allclose(first, torch.tensor(c.logprobs[:1]), atol=1e-4)
    assert torch.allclose(rest, torch.tensor(c.logprobs[1:]), atol=1e-4)


def test_seed_n_and_grouping(agent):
    prompts = encode(agent.tokenizer, ["a", "b"])
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11, n=3)
    a, b = agent.generate(prompts, params), agent.generate(prompts, params)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.prompt_index for c in a] == [0, 0, 0, 1, 1, 1]
    assert len({tuple(c.token_ids) for c in a[:3]}) > 1  # samples of one prompt differ
    c = agent.generate(prompts, params.model_copy(update={"seed": 12}))
    assert [x.token_ids for x in c] != [x.token_ids for x in a]


def test_finish_reasons_and_eos(agent):
    tok = agent.tokenizer
    outs = agent.generate(encode(tok, ["x"] * 6), SamplingParams(temperature=1.0, max_new_tokens=5, seed=0))
    for c in outs:
        assert len(c.token_ids) == len(c.logprobs) <= 5
        if c.finish_reason == "stop":
            assert c.token_ids[-1] == tok.eos_token_id and tok.eos_token_id not in c.token_ids[:-1]
        else:
            assert len(c.token_ids) == 5 and tok.eos_token_id not in c.token_ids


def test_stop_strings_end_a_completion(agent):
    tok = agent.tokenizer
    p = encode(tok, ["hello"])[0]
    free = agent.generate([p], SamplingParams(temperature=0, max_new_tokens=30))[0]
    assert len(free.text) >= 4
    stop = free.text[2:4]
    c = agent.generate([p], SamplingParams(temperature=0, max_new_tokens=30, stop=(stop,)))[0]
    assert c.finish_reason == "stop" and stop in tok.decode(c.token_ids) and len(c.token_ids) <= len(free.token_ids)
    assert c.token_ids == free.token_ids[: len(c.token_ids)]


def test_filter_logits():
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert torch.isinf(filter_logits(logits, 2, 1.0)).tolist() == [[True, True, False, False]]
    probs = logits.softmax(-1)[0]  # [0.032, 0.087, 0.237, 0.644]
    kept = ~torch.isinf(filter_logits(logits, 0, 0.7))
    assert kept.tolist() == [[False, False, True, True]] and probs[3] < 0.7 < probs[2] + probs[3]


def test_sampling_params_validation():
    with pytest.raises(ValueError):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError):
        SamplingParams(stop=("",))
    with pytest.raises(ValueError):
        SamplingParams(unknown=1)


def test_scripted_agents():
    tok = tiny_tokenizer("chatml")
    fixed = FixedAgent(tok, ["first", "second"])
    p1 = encode(tok, ["q"])[0]
    c = fixed.generate([p1], SamplingParams())[0]
    assert c.text == "first" and c.token_ids[-1] == tok.eos_token_id and c.logprobs == [0.0] * len(c.token_ids)
    p2 = p1 + c.token_ids + tok.encode("\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n")
    assert fixed.generate([p2], SamplingParams())[0].text == "second"
    echo = ScriptedAgent(tok, lambda prompt: "long reply " * 20)
    c = echo.generate([p1], SamplingParams(max_new_tokens=5))[0]
    assert c.finish_reason == "length" and len(c.token_ids) == 5
    rnd = RandomAgent(tok).generate([p1, p1], SamplingParams(max_new_tokens=7, n=2))
    assert len(rnd) == 4 and all(1 <= len(c.token_ids) <= 7 for c in rnd)


def test_a_scripted_reply_ends_on_its_stop_string_as_a_model_would():
    """A model stopped by a stop string samples nothing after it — no end-of-sequence token — so the consistency
    guard's `stops` check passes on scripted data (the gold-path teacher's SWiRL turns ran one token past it)."""
    from turnrl.rollout.stops import past_stop

    tok = tiny_tokenizer("chatml")
    p = encode(tok, ["q"])[0]
    agent = ScriptedAgent(tok, lambda prompt: "<answer>Pefo</answer> and more")
    stop = ("</answer>",)
    c = agent.generate([p], SamplingParams(stop=stop))[0]
    assert c.text == "<answer>Pefo</answer>" and c.finish_reason == "stop"
    assert tok.eos_token_id not in c.token_ids and len(c.logprobs) == len(c.token_ids)
    decode = lambda ids: tok.decode(ids, skip_special_tokens=False)
    assert past_stop(decode, c.token_ids, stop) == 0
    plain = agent.generate([p], SamplingParams())[0]  # no stop strings: the whole reply and the end of sequence
    assert plain.text == "<answer>Pefo</answer> and more" and plain.token_ids[-1] == tok.eos_token_id


def test_run_spec_loads_the_policy_a_training_run_saved(tmp_path):
    import toy_envs  # noqa: F401 — registers tests/Upper-v0
    from tiny_trainer import opened

    from turnrl.agents import make_agent
    from turnrl.rl.run.trainer import TrainConfig, Trainer

    with pytest.raises(FileNotFoundError, match="no config.yaml"):
        make_agent(f"run:{tmp_path}")
    cfg = TrainConfig.model_validate(
        {
            "model": "tiny:chatml",
            "env": {"id": "tests/Upper-v0"},
            "steps": 1,
            "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4},
            "optim": {"lr": 1e-2},
            "eval_tasks": 2,
            "out_dir": str(tmp_path),
        }
    )
    with opened(Trainer(cfg)) as trainer:
        before = [p.detach().clone() for p in make_agent("tiny:chatml").model.parameters()]
        with pytest.raises(FileNotFoundError, match="no checkpoint"):
            (tmp_path / "config.yaml").write_text("model: tiny:chatml\n")
            make_agent(f"run:{tmp_path}")
        trainer.train()
    agent = make_agent(f"run:{tmp_path}")
    trained = list(trainer.model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(agent.model.parameters(), trained))
    assert any(not torch.equal(a, b) for a, b in zip(before, trained))  # the run's weights, not a fresh model


@pytest.mark.parametrize("temperature", [0.0, 0.05])  # greedy, and sampled from a peaked distribution
def test_a_chosen_tokens_top_logprobs_entry_is_its_logprob_exactly(agent, temperature):
    """The alternatives come from the same log-probabilities as the chosen token's (not a second pass ~1e-5 off)."""
    prompts = encode(agent.tokenizer, ["What is 2 + 2?", "The answer is"])
    params = SamplingParams(temperature=temperature, max_new_tokens=10, seed=3, top_logprobs=5)
    for c in agent.generate(prompts, params):
        assert c.top_logprobs is not None and len(c.top_logprobs) == len(c.token_ids) == len(c.logprobs)
        found = 0
        for token, logprob, top in zip(c.token_ids, c.logprobs, c.top_logprobs):
            assert len(top) == 5 and [v for _, v in top] == sorted((v for _, v in top), reverse=True)
            same = [v for t, v in top if t == token]
            assert same in ([], [logprob])
            found += bool(same)
        assert found == len(c.token_ids) if temperature == 0 else found > 0, found


def test_inverse_transform_draws_follow_the_probabilities_and_the_seed():
    """`draw` (the GPU path's sampler): frequencies match the probabilities, zero-probability entries are never
    drawn, and a seeded CPU generator gives the same draws on every call (tests/placement/test_gpu.py: on every device)."""
    from turnrl.agents.batching import draw

    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]]).repeat(4000, 1)
    picked = draw(probs, torch.Generator().manual_seed(3))
    first, second = picked[0::2], picked[1::2]
    assert set(second.tolist()) == {4} and not ({1, 4} & set(first.tolist()))
    freq = torch.bincount(first, minlength=5).double() / len(first)
    assert torch.allclose(freq, probs[0].double(), atol=0.025), freq
    assert torch.equal(picked, draw(probs, torch.Generator().manual_seed(3)))
    assert not torch.equal(picked, draw(probs, torch.Generator().manual_seed(4)))
    unnormalized = torch.tensor([[2.0, 0.0, 6.0]]).repeat(2000, 1)  # sums of 8: scaled, not clipped at 1
    assert 0.7 < float((draw(unnormalized, torch.Generator().manual_seed(0)) == 2).double().mean()) < 0.8


def test_episodes_with_their_own_seeds_draw_their_tokens_by_the_probabilities():
    """Each episode of a run samples from a generator of its own, seeded from the run's seed and the episode's job
    (rollout/play.sample_seed; a gateway session's call k from ``turnrl.utils.turn_seed(seed, k)``), and its first
    token is that generator's first uniform. Over the episodes of many groups those first draws must follow the probabilities as
    one generator's do (issue 70: the gateway example's learning changed with the sampler's random stream, not with
    a biased one), and the episodes of one group must not draw alike."""
    from turnrl.agents.batching import draw
    from turnrl.rl.sources.base import Job
    from turnrl.rollout.play import sample_seed

    probs = torch.tensor([[0.45, 0.25, 0.15, 0.1, 0.05]])
    jobs = [
        Job(step=step, round=0, task=4 * (step - 1) + task, sample=sample)
        for step in range(1, 126)
        for task in range(4)
        for sample in range(8)
    ]  # 4000 episodes
    picked = []
    for job in jobs:
        seed = turn_seed(sample_seed(0, job), 0)  # the session's first call, as the gateway seeds it
        gen = torch.Generator().manual_seed(row_seed(seed, 0))  # as HFAgent seeds a row of that seed
        picked.append(int(draw(probs, gen)))
    counts = torch.bincount(torch.tensor(picked), minlength=5).double()
    expected = probs[0].double() * len(picked)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 18.5, (chi2, counts)  # 4 degrees of freedom: p ≈ 0.001
    groups = torch.tensor(picked).view(-1, 8)
    alike = float((groups == groups[:, :1]).all(-1).double().mean())
    assert alike < 0.05, alike  # all eight alike by chance: 0.45^8 + … ≈ 0.2 %


def test_rows_with_long_contexts_decode_in_a_lane_of_their_own():
    """Short prompts beside a few very long ones (T-PPO's carried answers) decode in separate batches, so no short
    row is padded to a long context; with each row's own random stream every token and log-probability is the same
    as in one batch."""
    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok, seed=4)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 400, (int(n),), generator=g).tolist() for n in [12] * 30 + [600, 640]]
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    seeds = list(range(len(prompts)))
    widths = []  # (rows, padded context) of every decode call
    hook = model.register_forward_pre_hook(
        lambda _, args, kw: widths.append(tuple(kw["attention_mask"].shape)), with_kwargs=True
    )
    apart = HFAgent(model, tok, batch_size=64).generate(prompts, params, seeds=seeds)
    lanes_widths, widths[:] = list(widths), []
    together = HFAgent(model, tok, batch_size=64, decode_lanes=False).generate(prompts, params, seeds=seeds)
    hook.remove()
    assert [c.token_ids for c in apart] == [c.token_ids for c in together]
    for a, b in zip(apart, together):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert max(w for rows, w in lanes_widths if rows >= 30) < 100  # the short rows never waited on a long context
    assert max(w for rows, w in widths if rows >= 30) >= 600
    assert [c.prompt_index for c in apart] == list(range(len(prompts)))


def test_the_next_lane_joins_once_the_running_one_has_few_rows_left():
    """A lane of long contexts does not wait for the slowest row of the short lane before it: once only a few short
    rows are left, padding them costs less than a call per step, so the long rows join the running batch. Every row
    has its own stream, so tokens and log-probabilities are those of decoding the lanes one after the other."""
    from turnrl.agents.batching import Row

    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok, seed=4)
    g = torch.Generator().manual_seed(1)
    lengths = [12] * 30 + [600, 640]
    news = [2] * 28 + [12, 12] + [6, 6]  # most short rows end after two tokens, two run on
    prompts = [torch.randint(5, 400, (n,), generator=g).tolist() for n in lengths]

    def rows() -> list:
        out = [
            Row(i, p, SamplingParams(temperature=1.0, max_new_tokens=m)) for i, (p, m) in enumerate(zip(prompts, news))
        ]
        for i, row in enumerate(out):
            row.gen = torch.Generator().manual_seed(100 + i)
        return out

    agent = HFAgent(model, tok, batch_size=64)
    agent.eos_ids = [-1]  # rows end at their max_new_tokens only
    calls = []  # (rows, padded width) of every forward
    hook = model.register_forward_pre_hook(
        lambda _, args, kw: calls.append(tuple(kw["attention_mask"].shape)), with_kwargs=True
    )
    with torch.no_grad():
        joined = rows()
        lanes = agent._lanes(joined)
        assert [len(lane) for lane in lanes] == [30, 2]
        agent._decode(lanes)
        together, calls[:] = list(calls), []
        apart = rows()
        for lane in agent._lanes(apart):  # each lane alone, one after the other
            agent._decode([lane])
    hook.remove()
    assert [r.tokens for r in joined] == [r.tokens for r in apart] and [len(r.tokens) for r in joined] == news
    for a, b in zip(joined, apart):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert len(together) < len(calls) - 4  # the long rows' decode steps ran beside the short lane's last ones
    assert any(n == 4 and w >= 640 for n, w in together)  # two short rows and two long ones in one batch
    assert max(w for n, w in together if n >= 30) < 100  # never while the short lane was still full


def test_streamed_requests_decode_in_lanes_that_merge_as_rows_finish():
    """Requests that arrive together but differ widely in context (a T-PPO window in continuous batching) decode in
    lanes side by side; once most short rows have finished, the lanes merge. Each request's own stream makes its
    tokens those of ``generate`` with the same seed."""
    import asyncio

    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok, seed=4)
    g = torch.Generator().manual_seed(2)
    lengths = [12] * 30 + [600, 640]
    news = [2] * 28 + [12, 12] + [6, 6]
    prompts = [torch.randint(5, 400, (n,), generator=g).tolist() for n in lengths]
    agent = HFAgent(model, tok, batch_size=64, kv_cache_mb=0)
    agent.eos_ids = [-1]  # rows end at their max_new_tokens only
    calls = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kw: calls.append(tuple(kw["attention_mask"].shape)), with_kwargs=True
    )

    async def scenario():
        return await asyncio.wait_for(
            asyncio.gather(
                *[
                    agent.agenerate_one(p, SamplingParams(temperature=1.0, max_new_tokens=m), seed=100 + i)
                    for i, (p, m) in enumerate(zip(prompts, news))
                ]
            ),
            timeout=60,
        )

    streamed = asyncio.run(scenario())
    hook.remove()
    for i, (p, m) in enumerate(zip(prompts, news)):
        alone = agent.generate([p], SamplingParams(temperature=1.0, max_new_tokens=m), seeds=[100 + i])[0]
        assert streamed[i].token_ids == alone.token_ids and len(alone.token_ids) == m
        assert streamed[i].logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    assert max(w for n, w in calls if n >= 30) < 100  # the full short lane never padded to the long contexts
    assert any(n == 2 and w >= 600 for n, w in calls)  # the long lane stepped on its own meanwhile
    assert any(n == 4 and w >= 640 for n, w in calls)  # then the two short rows left joined it
