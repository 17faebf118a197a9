"""Cross-turn KV reuse and continuous batching in the HF agent: the same tokens and logprobs as re-prefilling.

Every comparison runs one model twice — with sessions (each episode's KV cache kept between its turns) and with
sessions off (``kv_cache_mb=0``: the whole conversation re-prefilled every turn) — on the same episodes.
"""

import asyncio
import time

import pytest
import torch
from tiny_trainer import opened, tiny_trainer

import turnrl
from turnrl.agents.base import Completion, SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.kv import SessionCache, common_prefix, trajectory_kv_metrics
from turnrl.agents.tiny import TEMPLATES, tiny_model, tiny_tokenizer
from turnrl.rollout.engine import Rollout

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


def envs(n=5, turns=4):
    return [turnrl.make("turnrl/Arithmetic-v0", calculator=True, retry=True, max_turns=turns) for _ in range(n)]


def both(template="chatml", params=GREEDY, batch_size=3, kv_cache_mb=64, n=5, turns=4, rewrite=None, **run):
    """Play the same episodes re-prefilling and with sessions; return (re-prefill, sessions, session agent, its
    rollout)."""
    tok = tiny_tokenizer(template)
    model = tiny_model(tok)
    out = []
    for mb in (0, kv_cache_mb):
        agent = HFAgent(model, tok, batch_size=batch_size, kv_cache_mb=mb)
        rollout = Rollout(agent, params, rewrite=rewrite)
        out.append((rollout.run(envs(n, turns), seeds=list(range(n)), **run), agent, rollout))
    (plain, plain_agent, _), (cached, agent, rollout) = out
    assert not plain_agent.supports_sessions and agent.supports_sessions == (kv_cache_mb > 0)
    return plain, cached, agent, rollout


def assert_same(plain, cached, tol=1e-5):
    assert [t.error for t in cached] == [None] * len(cached)
    assert [t.token_ids for t in plain] == [t.token_ids for t in cached]
    assert [t.loss_mask for t in plain] == [t.loss_mask for t in cached]
    for a, b in zip(plain, cached):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=tol, rtol=0)


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_greedy_multi_turn_equals_re_prefill_on_every_template(template):
    plain, cached, agent, rollout = both(template)
    assert_same(plain, cached)
    assert all(t.num_turns >= 3 for t in cached)
    m = rollout.stats.kv_metrics()
    assert m["cache_hit_share"] > 0.6  # turns after the first feed only the reply and the next header
    assert m["prefill_tokens"] + m["cached_tokens"] == sum(
        t.metadata["prefill_tokens"] + t.metadata["cached_tokens"] for t in plain
    )
    assert sum(t.metadata["cached_tokens"] for t in plain) == 0
    assert trajectory_kv_metrics(cached) == pytest.approx(m)
    assert len(agent.sessions) == 0 and agent.sessions.nbytes == 0  # every finished episode released its cache


def test_seeded_sampling_equals_re_prefill():
    params = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=10)
    plain, cached, _, _ = both(params=params, sample_seeds=[11, 12, 13, 14, 15])
    assert_same(plain, cached)


def test_a_budget_smaller_than_one_episode_re_prefills_and_says_so():
    plain, cached, _agent, rollout = both(kv_cache_mb=0.001)  # ~1 KB: no episode's cache fits
    assert_same(plain, cached)
    m = rollout.stats.kv_metrics()
    assert m["cached_tokens"] == 0 and m["kv_oversize"] > 0
    assert all(t.metadata["kv_events"].get("oversize", 0) >= 2 for t in cached)


def test_eviction_keeps_the_budget_and_the_results():
    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok)
    c = model.config
    per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 4
    budget_mb = per_token * 1000 / 2**20  # room for about two of the five episodes (~490 tokens each at the end)
    peak = []

    class Watch(HFAgent):
        def generate(self, *a, **k):
            out = super().generate(*a, **k)
            peak.append(self.sessions.nbytes)
            return out

    plain, cached, _, _ = both(kv_cache_mb=budget_mb)
    assert_same(plain, cached)
    agent = Watch(model, tok, batch_size=3, kv_cache_mb=budget_mb)
    rollout = Rollout(agent, GREEDY)
    rollout.run(envs(), seeds=list(range(5)))
    m = rollout.stats.kv_metrics()
    assert m["kv_evicted"] > 0 and m["cached_tokens"] > 0  # some reuse, some re-prefill
    assert max(peak) <= agent.sessions.budget_bytes


def test_a_rewritten_history_reuses_the_common_prefix_and_is_counted():
    tok = tiny_tokenizer("chatml")

    def rewrite(envs, roles, prompts, completions):  # replace every completion with a fixed reply
        ids = [*tok.encode("I think 7.", add_special_tokens=False), tok.convert_tokens_to_ids("<|im_end|>")]
        return [
            Completion(text="I think 7.", token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")
            for _ in completions
        ]

    plain, cached, _, rollout = both(rewrite=rewrite)
    assert_same(plain, cached)
    m = rollout.stats.kv_metrics()
    assert m["kv_rewritten"] > 0 and m["cached_tokens"] > 0  # reused up to where the turn was replaced


def test_weights_changed_between_turns_invalidate_the_cache():
    tok = tiny_tokenizer("chatml")
    agent = HFAgent(tiny_model(tok), tok, batch_size=2)
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 2?"}], add_generation_prompt=True)
    prompt = list(prompt if isinstance(prompt, list) else prompt["input_ids"])
    first = agent.generate([prompt], GREEDY, sessions=["a"])[0]
    second_prompt = (
        prompt
        + first.token_ids
        + tok.encode("\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    )
    with torch.no_grad():  # an optimizer step: weights updated in place
        for p in agent.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    again = agent.generate([second_prompt], GREEDY, sessions=["a"])[0]
    assert again.metadata["kv"] == "invalidated" and again.metadata["cached_tokens"] == 0
    fresh = HFAgent(agent.model, tok, kv_cache_mb=0).generate([second_prompt], GREEDY)[0]
    assert again.token_ids == fresh.token_ids
    third = second_prompt + again.token_ids + tok.encode("\nok", add_special_tokens=False)
    hit = agent.generate([third], GREEDY, sessions=["a"])[0]
    assert (
        hit.metadata["kv"] == "hit" and hit.metadata["cached_tokens"] == len(second_prompt) + len(again.token_ids) - 1
    )
    assert hit.token_ids == HFAgent(agent.model, tok, kv_cache_mb=0).generate([third], GREEDY)[0].token_ids


def test_a_load_that_replaces_the_weights_invalidates_too():
    tok = tiny_tokenizer("chatml")
    agent = HFAgent(tiny_model(tok), tok)
    prompt = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    c = agent.generate([prompt], GREEDY, sessions=["s"])[0]
    for _name, p in agent.model.named_parameters():  # a rollout worker adopting new arrays (no in-place update)
        p.data = p.data.clone()
    again = agent.generate([prompt + c.token_ids], GREEDY, sessions=["s"])[0]
    assert again.metadata["kv"] == "invalidated"
    agent.invalidate_sessions()  # what a Ray worker calls after adopting new arrays (addresses may recur)
    third = agent.generate([prompt + c.token_ids + again.token_ids], GREEDY, sessions=["s"])[0]
    assert third.metadata["kv"] == "invalidated" and third.metadata["cached_tokens"] == 0


def test_continuous_batching_refills_slots_and_matches_one_by_one():
    tok = tiny_tokenizer("llama3")
    agent = HFAgent(tiny_model(tok), tok, batch_size=2)
    texts = ["What is 2 + 2?", "hi", "A much longer question about the answer being correct?", "x", "yy zz", "q"]
    prompts = [
        tok.encode(f"<|start_header_id|>user<|end_header_id|>\n\n{t}<|eot_id|>", add_special_tokens=False)
        for t in texts
    ]
    for params in (
        SamplingParams(temperature=0.0, max_new_tokens=14),
        SamplingParams(temperature=1.0, max_new_tokens=14, stop=("o",)),
    ):  # rows end apart
        joined = agent.generate(prompts, params, seeds=list(range(6)))
        alone = [agent.generate([p], params, seeds=[i])[0] for i, p in enumerate(prompts)]
        assert [c.token_ids for c in joined] == [c.token_ids for c in alone]
        for a, b in zip(joined, alone):
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    assert len({len(c.token_ids) for c in joined}) > 2  # finished rows left while others went on, and were refilled


def test_session_arguments_are_checked():
    tok = tiny_tokenizer("chatml")
    agent = HFAgent(tiny_model(tok), tok)
    p = tok.encode("hello", add_special_tokens=False)
    with pytest.raises(ValueError, match="one entry per prompt"):
        agent.generate([p, p], GREEDY, sessions=["a"])
    with pytest.raises(ValueError, match="n == 1"):
        agent.generate([p], GREEDY.model_copy(update={"n": 2}), sessions=["a"])
    with pytest.raises(ValueError, match="once per generate call"):
        agent.generate([p, p], GREEDY, sessions=["a", "a"])
    with pytest.raises(ValueError, match="negative"):
        HFAgent(agent.model, tok, kv_cache_mb=-1)


def test_session_cache_lookup_store_and_lru():
    def kv(n):
        return [torch.ones(1, 1, n, 2)], [torch.ones(1, 1, n, 2)]

    cache = SessionCache(budget_bytes=20 * 2 * 2 * 4)  # keys+values of 20 tokens (1 head, dim 2, fp32)
    assert cache.lookup("a", [1, 2, 3]).event == "new"
    cache.store("a", [1, 2, 3, 4], *kv(4))
    r = cache.lookup("a", [1, 2, 3, 4, 5, 6])
    assert (r.length, r.event, r.keys[0].shape[2]) == (4, "hit", 4)
    cache.store("a", [1, 2, 3, 4, 5], *kv(5))
    r = cache.lookup("a", [1, 2, 9, 9])
    assert (r.length, r.event) == (2, "rewritten")
    cache.store("a", [1, 2, 9], *kv(3))
    assert cache.lookup("a", [1, 2, 9]).length == 2  # one token is always left to feed
    cache.store("a", [1] * 8, *kv(8))
    cache.store("b", [2] * 8, *kv(8))
    cache.store("c", [3] * 8, *kv(8))  # 24 tokens > 20: "a" (the oldest session) goes
    assert set(cache.entries) == {"b", "c"} and cache.nbytes <= cache.budget_bytes
    assert cache.lookup("a", [1] * 9).event == "evicted"
    cache.store("a", [1] * 8, *kv(8))  # the oldest session: it is the one not kept (no thrashing in rounds)
    assert set(cache.entries) == {"b", "c"} and cache.lookup("a", [1] * 9).event == "evicted"
    cache.store("d", [4] * 30, *kv(30))
    assert "d" not in cache.entries and cache.lookup("d", [4] * 31).event == "oversize"
    cache.check_weights(1)
    cache.check_weights(2)
    assert len(cache) == 0 and cache.lookup("b", [2] * 9).event == "invalidated"
    cache.release("b")
    assert cache.lookup("b", [2] * 9).event == "new"
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and common_prefix([], [1]) == 0
    assert common_prefix([1, 2], [1, 2, 3]) == 2


# ---- continuous batching across turns (Rollout(continuous=True)) ----


def run_modes(template="chatml", params=GREEDY, n=5, turns=4, env_factory=None, batch_size=3, **run):
    """The same episodes in rounds and continuously (both with sessions); returns both and the continuous rollout."""
    tok = tiny_tokenizer(template)
    model = tiny_model(tok)
    out = []
    for continuous in (False, True):
        agent = HFAgent(model, tok, batch_size=batch_size)
        rollout = Rollout(agent, params, continuous=continuous)
        made = env_factory() if env_factory else envs(n, turns)
        out.append(rollout.run(made, seeds=list(range(len(made))), **run))
    return out[0], out[1], rollout


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_continuous_turns_equal_rounds_greedy(template):
    rounds, continuous, rollout = run_modes(template)
    assert_same(rounds, continuous)
    assert rollout.stats.kv_metrics()["cache_hit_share"] > 0.6


def test_continuous_turns_equal_rounds_with_episode_seeds():
    params = SamplingParams(temperature=1.0, max_new_tokens=10)
    rounds, continuous, _ = run_modes(params=params, sample_seeds=[5, 6, 7, 8, 9])
    assert_same(rounds, continuous)


def test_continuous_turns_do_not_wait_for_a_slow_environment():
    """Episode 0's environment takes 1.5 s per step; in rounds every episode waits for it each turn, continuously
    the other episodes play all their turns meanwhile."""
    from turnrl.envs.builtin.arithmetic import ArithmeticEnv

    class Slow(ArithmeticEnv):
        slow = False

        async def _astep(self, action):
            if self.slow:
                await asyncio.sleep(1.5)
            return await super()._astep(action)

    def factory():
        made = [Slow(calculator=True, retry=True, max_turns=3) for _ in range(4)]
        made[0].slow = True
        return made

    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok)
    finished_at = {}
    for continuous in (False, True):
        t0 = time.perf_counter()
        rollout = Rollout(
            HFAgent(model, tok, batch_size=4),
            GREEDY,
            continuous=continuous,
            sink=lambda t, c=continuous, t0=t0: finished_at.setdefault(c, []).append(
                (t.seed, time.perf_counter() - t0)
            ),
        )
        rollout.run(factory(), seeds=list(range(4)))
    fast = lambda c: max(s for seed, s in finished_at[c] if seed != 0)
    slow = lambda c: max(s for seed, s in finished_at[c] if seed == 0)
    assert fast(True) < 1.5 < slow(True)  # the others finished all their turns during the slow one's first step
    assert fast(False) > 2.5  # in rounds, their second and third turns each waited for a slow step


def test_continuous_windows_pause_and_resume_like_rounds():
    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok)
    got = []
    for continuous in (False, True):
        rollout = Rollout(
            HFAgent(model, tok, batch_size=3), GREEDY.model_copy(update={"max_new_tokens": 10}), continuous=continuous
        )
        made = envs(3, 3)
        eps = rollout.start(
            made, seeds=[0, 1, 2], options=[None] * 3, group_ids=[None] * 3, sample_seeds=[None] * 3, metadata=[{}] * 3
        )
        windows = 0
        while not all(ep.done for ep in eps):
            rollout.play(eps, budget=7)  # windows end inside turns
            windows += 1
            assert all(ep.done or ep.window_used == 7 for ep in eps)
        got.append(([ep.traj.token_ids for ep in eps], windows))
    assert got[0] == got[1]


def test_continuous_needs_an_agent_that_takes_requests_as_they_come():
    from turnrl.agents.scripted import FixedAgent

    tok = tiny_tokenizer("chatml")
    with pytest.raises(ValueError, match="agenerate_one"):
        Rollout(FixedAgent(tok, ["hi"]), GREEDY, continuous=True)
    with pytest.raises(ValueError, match="whole rounds"):
        Rollout(HFAgent(tiny_model(tok), tok), GREEDY, continuous=True, rewrite=lambda *a: [None])


def test_a_failed_generation_ends_only_its_episodes_in_continuous_mode():
    tok = tiny_tokenizer("chatml")
    agent = HFAgent(tiny_model(tok), tok, batch_size=2)
    calls = {"n": 0}
    real = agent._prefill

    def flaky(rows):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("out of memory")
        return real(rows)

    agent._prefill = flaky
    trajs = Rollout(agent, GREEDY, continuous=True).run(envs(4, 3), seeds=list(range(4)))
    failed = [t for t in trajs if t.error]
    assert failed and all("generation failed: RuntimeError: out of memory" in t.error for t in failed)
    assert any(t.error is None and t.num_turns == 3 for t in trajs)  # the others went on
    assert all(len(t.token_ids) > 0 for t in trajs)  # what was collected is kept


def test_a_training_run_reuses_caches_and_batches_turns_continuously(tmp_path):
    from turnrl.rl.run.trainer import TrainConfig

    def train(**rollout):
        tok = tiny_tokenizer("chatml")
        cfg = TrainConfig(
            model="tiny",
            env={"id": "turnrl/Arithmetic-v0", "kwargs": {"calculator": True, "retry": True, "max_turns": 3}},
            algorithm={"name": "grpo"},
            steps=2,
            eval_tasks=4,
            out_dir=str(tmp_path / str(rollout)),
            rollout={"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8, "seed_per_episode": True, **rollout},
            optim={"lr": 1e-2, "minibatch_size": 8},
        )
        torch.manual_seed(0)
        with opened(tiny_trainer(cfg, tok)) as trainer:
            return next(trainer.source.collect(step)[1] for step in range(1))

    plain, reuse, both_ = train(kv_cache_mb=0), train(), train(continuous_batching=True)
    assert plain["cache_hit_share"] == 0 and reuse["cache_hit_share"] > 0.5 and both_["cache_hit_share"] > 0.5
    assert plain["prefill_tokens"] > 2 * reuse["prefill_tokens"]
    assert plain["prefill_tokens"] + plain["cached_tokens"] == reuse["prefill_tokens"] + reuse["cached_tokens"]
    assert reuse["generated_tokens"] == both_["generated_tokens"] == plain["generated_tokens"]


def test_continuous_batching_is_refused_where_it_cannot_run():
    from turnrl.rl.config import TrainConfig

    with pytest.raises(ValueError, match="local placement"):
        TrainConfig(model="tiny", env={"id": "tests/Upper-v0"}, placement="ray", rollout={"continuous_batching": True})


def test_growing_cache_layer_appends_in_place_and_survives_selection():
    from transformers import DynamicCache

    from turnrl.agents.batching import growing_cache

    torch.manual_seed(0)
    steps = [(torch.randn(3, 2, n, 4), torch.randn(3, 2, n, 4)) for n in (5, 1, 1, 70, 1)]
    grow, plain = growing_cache(), DynamicCache()
    for i, (k, v) in enumerate(steps):
        a, b = grow.update(k, v, 0), plain.update(k, v, 0)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        if i == 1:
            ptr = grow.layers[0].keys.data_ptr()
        if i == 2:
            assert grow.layers[0].keys.data_ptr() == ptr  # appended in place: no copy of the cache
    assert grow.get_seq_length() == plain.get_seq_length() == 78
    keep = torch.tensor([2, 0])
    grow.batch_select_indices(keep)
    plain.batch_select_indices(keep)
    k, v = torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4)
    a, b = grow.update(k, v, 0), plain.update(k, v, 0)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[0].shape == (2, 2, 79, 4)


def test_smollm2_multi_turn_with_sessions_equals_re_prefill():
    """The real SmolLM2-135M-Instruct (its own chat template, fp32): three greedy turns of two episodes, continuous
    batching with sessions vs rounds re-prefilling every turn."""
    from turnrl.agents.models import load_model

    model, tok = load_model("smollm2-135m-instruct")
    got = []
    for continuous, mb in ((False, 0), (True, 256)):
        rollout = Rollout(
            HFAgent(model, tok, batch_size=2, kv_cache_mb=mb),
            SamplingParams(temperature=0.0, max_new_tokens=8),
            continuous=continuous,
        )
        got.append((rollout.run(envs(2, 3), seeds=[0, 1]), rollout.stats.kv_metrics()))
    (plain, m0), (cached, m1) = got
    # fp32 sums of other shapes: 1.1e-5 apart at 654 tokens (16 a turn); a wrong cache: >1e-2
    assert_same(plain, cached, tol=5e-5)
    assert all(t.num_turns == 3 for t in cached)
    assert m0["cache_hit_share"] == 0 and m1["cache_hit_share"] > 0.6


def test_a_failure_while_joining_answers_every_waiting_request():
    """An error outside the prefill (e.g. out of memory while merging a joining row into the running batch) must
    reach every request — the joining one too — instead of leaving it waiting forever."""
    from turnrl.agents import batching

    tok = tiny_tokenizer("chatml")
    agent = HFAgent(tiny_model(tok), tok, batch_size=4)
    prompt = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)

    async def scenario():
        first = asyncio.ensure_future(agent.agenerate_one(prompt, GREEDY.model_copy(update={"max_new_tokens": 30})))
        for _ in range(3):
            await asyncio.sleep(0)  # the first request is decoding
        second = asyncio.ensure_future(agent.agenerate_one([*prompt, 5], GREEDY))
        return await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), timeout=30)

    real = batching.Batch.merge
    batching.Batch.merge = lambda self, other: (_ for _ in ()).throw(RuntimeError("out of memory"))
    try:
        results = asyncio.run(scenario())
    finally:
        batching.Batch.merge = real
    assert [type(r).__name__ for r in results] == ["RuntimeError", "RuntimeError"]
    assert not agent._live


def test_sliding_window_models_decode_rows_that_finish_apart():
    """A model with sliding-window attention keeps its own cache layers (no sessions, no padding cut): when the
    longest prompt finishes first, the others go on as each does alone."""
    import random

    from transformers import MistralConfig, MistralForCausalLM

    tok = tiny_tokenizer("chatml")
    torch.manual_seed(0)
    model = MistralForCausalLM(
        MistralConfig(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            sliding_window=8,
            max_position_embeddings=4096,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            bos_token_id=None,
            tie_word_embeddings=True,
        )
    ).eval()
    agent = HFAgent(model, tok, batch_size=8)
    assert not agent.supports_sessions and not agent.full_attention
    rng = random.Random(1)
    prompts = [[rng.randrange(5, len(tok) - 5) for _ in range(n)] for n in (30, 12, 14)]
    params = SamplingParams(temperature=0.0, max_new_tokens=10)
    agent.eos_ids = [agent.generate([prompts[0]], params)[0].token_ids[0]]  # the longest row ends at its first token
    alone = [agent.generate([p], params)[0].token_ids for p in prompts]
    assert len(alone[0]) == 1 and len(alone[1]) > 1
    assert [c.token_ids for c in agent.generate(prompts, params)] == alone


def test_the_learners_own_optimizer_step_invalidates_the_cache():
    """Issue 66, bug 2: the learner's fused AdamW writes the parameters in place without bumping their version
    counters, so a cache keyed on storage alone survived the step; the learner now marks the weights changed."""
    from turnrl.rl.config import TrainConfig
    from turnrl.rl.run.trainer import learner_of
    from turnrl.weights import weights_epoch

    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok)
    cfg = TrainConfig(model="tiny", env={"id": "turnrl/Arithmetic-v0"}, algorithm={"name": "grpo"}, optim={"lr": 1e-2})
    learner = learner_of(cfg, model, tok)
    assert learner.optimizer.defaults["fused"]  # the kernel that bumps no version counter
    agent = HFAgent(model, tok, batch_size=2)
    prompt = tok.encode("<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    first = agent.generate([prompt], GREEDY, sessions=["a"])[0]
    versions = [p._version for p in model.parameters()]
    epoch = weights_epoch(model)
    model.train()
    model(input_ids=torch.tensor([prompt])).logits.float().pow(2).mean().backward()
    learner.optimizer_step()
    model.eval()
    assert weights_epoch(model) == epoch + 1
    # what made the storage fingerprint blind: the fused step left every version counter where it was
    assert [p._version for p in model.parameters()] == versions
    follow = (
        prompt
        + first.token_ids
        + tok.encode("\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    )
    again = agent.generate([follow], GREEDY, sessions=["a"])[0]
    assert again.metadata["kv"] == "invalidated" and again.metadata["cached_tokens"] == 0
    fresh = HFAgent(model, tok, kv_cache_mb=0).generate([follow], GREEDY)[0]
    assert again.token_ids == fresh.token_ids
    assert torch.allclose(torch.tensor(again.logprobs), torch.tensor(fresh.logprobs), atol=1e-5, rtol=0)


def test_every_path_that_writes_weights_marks_them_changed(tmp_path):
    """Checkpoint loads (init_from and resume), LoRA adapter loads and a rollout worker's adoption of new arrays
    each bump the weights epoch the session caches are keyed on."""
    from turnrl.checkpoint import load_policy
    from turnrl.lora import adapter_state, apply_lora, load_adapter
    from turnrl.rl.placement.worker import adopt_weights
    from turnrl.weights import weights_epoch

    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok)
    seen = [weights_epoch(model)]
    adopt_weights(model, {k: v.clone() for k, v in model.state_dict().items()})
    seen.append(weights_epoch(model))
    torch.save({"model": model.state_dict()}, tmp_path / "checkpoint.pt")
    load_policy(model, tmp_path)
    seen.append(weights_epoch(model))
    assert seen == [0, 1, 2]
    lora = apply_lora(tiny_model(tok), {"r": 2})
    before = weights_epoch(lora)
    load_adapter(lora, {k: v + 1 for k, v in adapter_state(lora).items()})
    assert weights_epoch(lora) == before + 1
