"""The learner core's fixes, each with a test that failed on the first trainer."""

import pytest
import torch
import toy_envs  # noqa: F401 — registers the toy environments

import turnrl
from turnrl.agents.base import Completion, SamplingParams
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.envs import Task, ToolEnv
from turnrl.rl.core.batch import collate
from turnrl.rl.formulas.advantages import group_normalize, masked_gae
from turnrl.rl.formulas.losses import agg_count, aggregate
from turnrl.rl.run.trainer import TrainConfig, learner_of
from turnrl.rollout.engine import Rollout
from turnrl.types import Trajectory
from turnrl.verifiers.base import Verdict


def cfg(algo="dapo", **optim):
    return TrainConfig.model_validate(
        {
            "model": "tiny",
            "env": {"id": "tests/Upper-v0"},
            "algorithm": algo,
            "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6},
            "optim": {"lr": 1e-2, **optim},
        }
    )


def episodes(n_groups=2, size=4, seed=0):
    """Real token-exact episodes of the toy env, with unequal lengths."""
    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok)
    from turnrl.agents.hf import HFAgent

    envs = [turnrl.make("tests/Upper-v0") for _ in range(n_groups * size)]
    trajs = Rollout(HFAgent(model, tok), SamplingParams(temperature=1.0, max_new_tokens=6, seed=seed)).run(
        envs,
        options=[{"index": g} for g in range(n_groups) for _ in range(size)],
        group_ids=[f"g{g}" for g in range(n_groups) for _ in range(size)],
    )
    out = []
    for k, t in enumerate(trajs):  # distinct rewards (every group has a signal) and lengths (k % 4 tokens cut)
        cut = k % 4
        s, e = t.turns[-1].token_span
        data = t.model_dump()
        data["token_ids"], data["loss_mask"], data["logprobs"] = (
            data[f][: len(data[f]) - cut] for f in ("token_ids", "loss_mask", "logprobs")
        )
        data["turns"][-1]["token_span"] = (s, e - cut)
        data["turns"][-1]["reward"] = float(k % 3)
        out.append(Trajectory.model_validate(data))
    return tok, out


def learner(config, tok, seed=0):
    return learner_of(config, tiny_model(tok, seed=seed), tok)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batches_with_the_global_count_add_up_to_the_whole_batch(mode):
    torch.manual_seed(0)
    values, mask = torch.randn(5, 7), (torch.rand(5, 7) > 0.4).float()
    mask[2] = 0  # a row with nothing generated
    total = agg_count(mask, mode)
    parts = [aggregate(values[i:j], mask[i:j], mode, total) for i, j in ((0, 1), (1, 4), (4, 5))]
    assert torch.allclose(sum(parts), aggregate(values, mask, mode))


def test_token_mean_over_accumulated_micro_batches_equals_one_pass():
    """The first trainer averaged micro-batch token means and divided by grad_accum: a mean of means."""
    tok, trajs = episodes()
    lrn = learner(cfg(), tok)
    exp, _ = lrn.prepare(trajs)
    assert len(set(exp.batch.loss_mask.sum(-1).tolist())) > 1  # unequal lengths: where a mean of means differs

    def grads(pieces, global_count):
        lrn.optimizer.zero_grad(set_to_none=True)
        total = sum((lrn.counts(p)["policy"] for p in pieces), torch.zeros(()))
        for p in pieces:
            counts = {"policy": total} if global_count else lrn.counts(p)
            loss = lrn.micro_loss(p, counts)[0]
            (loss if global_count else loss / len(pieces)).backward()
        return torch.cat([q.grad.flatten() for q in lrn.model.parameters() if q.grad is not None])

    whole = grads([exp], True)
    rows = [exp.select([i]) for i in range(len(exp))]
    assert torch.allclose(grads(rows, True), whole, rtol=1e-4, atol=1e-7)
    assert not torch.allclose(grads(rows, False), whole, rtol=1e-2, atol=1e-5)  # the first trainer's way


def test_error_episodes_are_left_out_and_their_group_renormalized():
    tok, trajs = episodes()
    trajs[1].error = "env step failed: timed out after 60s"
    lrn = learner(cfg("grpo"), tok)
    exp, info = lrn.prepare(trajs)
    assert info["dropped_episodes"] == 1 and len(exp) == 7
    rest = [t for t in trajs if t.error is None]
    want = group_normalize(torch.tensor([t.total_reward for t in rest]), collate(rest, 0).group_ids)
    got = torch.stack([exp.adv[i][exp.batch.loss_mask[i] > 0][0] for i in range(7)])
    assert torch.allclose(got, want)


def test_vapo_value_pretraining_never_steps_the_policy():
    """Before, the policy loss was multiplied by 0: AdamW still decayed the weights and counted the steps."""
    tok, trajs = episodes()
    config = cfg({"name": "vapo", "value_warmup_steps": 2}, weight_decay=0.1, warmup_steps=2)
    lrn = learner(config, tok)
    before = [p.detach().clone() for p in lrn.model.parameters()]
    for _ in range(2):
        info = lrn.update(trajs)
        assert info["critic_only"] == 1.0 and "value_loss" in info
    assert all(torch.equal(a, b) for a, b in zip(before, lrn.model.parameters()))
    assert not any(p in lrn.optimizer.state for p in lrn.model.parameters())
    policy_lr, critic_lr = lrn.scheduler.get_last_lr()
    assert policy_lr == pytest.approx(0.5 * 1e-2) and critic_lr == pytest.approx(2e-2)  # its warm-up starts now
    lrn.update(trajs)
    assert any(not torch.equal(a, b) for a, b in zip(before, lrn.model.parameters()))


class _Silent:
    """An agent that answers with no tokens at all."""

    def __init__(self, tok):
        self.tokenizer = tok

    def generate(self, prompts, params):
        return [Completion(text="", token_ids=[], logprobs=[], finish_reason="stop") for _ in prompts]


class _Generous(ToolEnv):
    def __init__(self, **kw):
        super().__init__(
            [Task(id="a", prompt="Say anything.", answer="")],
            verifier=lambda text, ref: Verdict(correct=True, score=1.0),
            **kw,
        )


def test_a_rewarded_turn_without_tokens_is_an_error_episode_not_a_crash():
    tok = tiny_tokenizer("chatml")
    trajs = Rollout(_Silent(tok), SamplingParams()).run([_Generous(), _Generous()], group_ids=["g", "g"])
    assert all("no generated tokens" in t.error for t in trajs)
    exp, info = learner(cfg("grpo"), tok).prepare(trajs)  # the first trainer's collate raised here
    assert exp is None and info["dropped_episodes"] == 2
    replayed = Trajectory.model_validate({**trajs[0].model_dump(), "error": None})
    exp, info = learner(cfg("grpo"), tok).prepare([replayed])  # stored data without the rollout's check
    assert exp is None and info["dropped_episodes"] == 1


def test_truncated_episodes_bootstrap_from_the_critic_and_terminated_ones_do_not():
    rewards = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]])
    mask = torch.ones(2, 3)
    boot = torch.tensor([2.0, 0.0])  # row 0 was truncated (V(s_T) = 2), row 1 terminated
    _, ret = masked_gae(rewards, values, mask, 1.0, 1.0, False, boot)
    assert torch.allclose(ret, torch.tensor([[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]]))
    tok, trajs = episodes(1, 4)
    for t in trajs:
        t.turns[-1].reward = 0.0
    trajs[0].terminated, trajs[0].truncated = False, True
    lrn = learner(cfg({"name": "ppo", "whiten_advantages": False}), tok)
    torch.nn.init.normal_(lrn.value_head.proj.weight)
    exp, _ = lrn.prepare(trajs)
    last = [int(exp.batch.loss_mask[i].nonzero().max()) for i in range(4)]
    finals = [float(exp.returns[i, last[i]]) for i in range(4)]
    assert finals[0] != 0.0 and finals[1:] == [0.0, 0.0, 0.0]  # only the truncated one carries V(s_T)


def test_batches_and_advantages_live_on_the_model_device():
    tok, trajs = episodes(1, 4)
    lrn = learner(cfg("grpo"), tok)
    exp, _ = lrn.prepare(trajs)
    assert exp.adv.device == lrn.device == exp.batch.input_ids.device


def test_replay_source_serves_whole_groups_and_resumes(tmp_path):
    from turnrl.rl.sources.replay import ReplaySource
    from turnrl.storage import save

    _, trajs = episodes(3, 4)
    save(trajs[:8], tmp_path / "a.jsonl")
    save(trajs[8:], tmp_path / "b.parquet")
    src = ReplaySource([tmp_path / "a.jsonl", tmp_path / "b.parquet"], batch_size=8, seed=1)
    first, info = src.collect(0)
    assert len(first) == 8 and info["rollout_episodes"] == 8
    assert all(sum(t.group_id == g for t in first) == 4 for g in {t.group_id for t in first})  # whole groups
    state = src.state_dict()
    nxt, _ = src.collect(1)
    again = ReplaySource([tmp_path / "a.jsonl", tmp_path / "b.parquet"], batch_size=8, seed=1)
    again.load_state_dict(state)
    assert [t.id for t in again.collect(1)[0]] == [t.id for t in nxt]
    with pytest.raises(ValueError, match="no trajectory with token fields"):
        save([Trajectory()], tmp_path / "c.jsonl")
        ReplaySource(tmp_path / "c.jsonl", batch_size=4)


def test_recompute_logprobs_takes_the_ratio_from_the_learner_and_reports_the_rollout_gap():
    """An engine that returns raw (pre-temperature) logprobs: the ratio is off before any update unless the learner
    rescores the tokens (optim.recompute_logprobs)."""
    tok, trajs = episodes()
    skewed = []
    for t in trajs:
        data = t.model_dump()
        data["logprobs"] = [x * 0.7 for x in data["logprobs"]]  # not what the sampler used
        skewed.append(Trajectory.model_validate(data))
    one_window = {"minibatch_size": 8, "grad_accum": 1}
    plain = learner(cfg("grpo", **one_window), tok).update(skewed)
    fixed = learner(cfg("grpo", recompute_logprobs=True, **one_window), tok).update(skewed)
    assert abs(plain["ratio_mean"] - 1) > 1e-2 and plain["logp_diff"] > 1e-2
    assert fixed["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and fixed["logp_diff"] < 1e-5
    assert fixed["rollout_logp_diff"] == pytest.approx(plain["logp_diff"], rel=1e-3)


def test_later_epochs_take_the_rows_in_a_new_seeded_order():
    tok = tiny_tokenizer("chatml")
    one = learner(cfg(minibatch_size=2, epochs=3), tok)
    first, second, third = (torch.cat(one.windows(8, e)).tolist() for e in range(3))
    assert first == list(range(8))  # epoch 0: the batch's order (whole groups per optimizer step)
    assert sorted(second) == list(range(8)) and second != first and third != second  # a permutation per epoch
    again = learner(cfg(minibatch_size=2, epochs=3), tok)
    assert torch.cat(again.windows(8, 1)).tolist() == second  # seeded: the same on every rank and after a resume
    fixed = learner(cfg(minibatch_size=2, epochs=3, shuffle=False), tok)
    assert torch.cat(fixed.windows(8, 2)).tolist() == first


def test_a_filled_batch_never_cuts_a_group_in_half():
    from turnrl.rl.sources.base import whole_groups

    _, trajs = episodes(n_groups=3, size=4)
    short = trajs[:4] + trajs[5:]  # group g1 lost an episode (an error)
    kept = whole_groups(short, 8)
    assert [t.group_id for t in kept] == ["g0"] * 4 + ["g1"] * 3  # g2 would overflow: left for later, not cut
    assert [t.group_id for t in whole_groups(trajs, 8)] == ["g0"] * 4 + ["g1"] * 4
    assert len(whole_groups(trajs, 2)) == 4  # at least one group, whole


def test_split_rows_keeps_order_and_bounds_rows_and_padded_tokens():
    from turnrl.rl.core.batch import split_rows

    g = torch.Generator().manual_seed(3)
    for _ in range(200):
        n = int(torch.randint(0, 12, (1,), generator=g))
        lengths = torch.randint(1, 50, (n,), generator=g).tolist()
        size, budget = int(torch.randint(1, 6, (1,), generator=g)), int(torch.randint(10, 120, (1,), generator=g))
        rows = torch.arange(100, 100 + n)
        pieces = split_rows(rows, lengths, size, budget)
        assert (torch.cat(pieces).tolist() if pieces else []) == rows.tolist()  # every row once, in order
        for p in pieces:
            widths = [lengths[int(r) - 100] for r in p]
            assert 1 <= len(p) <= size
            assert len(p) == 1 or len(p) * max(widths) <= budget  # a longer row runs alone
        assert [len(p) for p in split_rows(rows, lengths, size, None)] == [min(size, n - i) for i in range(0, n, size)]


def test_a_token_budget_bounds_every_pass_and_changes_no_number():
    """optim.micro_tokens: the micro-batches and the scoring before the update run in pieces of at most that many
    padded tokens; the update (values, reference, recomputed log-probabilities, loss, new weights) is the same."""
    tok, trajs = episodes()
    lengths = sorted(len(t.token_ids) for t in trajs)
    budget = lengths[-1] + lengths[0]  # the longest row alone; two short ones together
    algo = {"name": "ppo", "kl_coef": 0.05}
    base = {"minibatch_size": 8, "grad_accum": 1, "recompute_logprobs": True}
    plain, split = learner(cfg(algo, **base), tok), learner(cfg(algo, micro_tokens=budget, **base), tok)
    passes: list[tuple[int, int]] = []
    hooks = [
        m.register_forward_pre_hook(lambda _, args, kw: passes.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
        for m in (split.model, split.ref_model)
    ]
    before = [p.detach().clone() for p in (*plain.model.parameters(), *plain.value_head.parameters())]
    a, b = plain.update(trajs), split.update(trajs)
    for h in hooks:
        h.remove()
    assert passes and all(rows == 1 or rows * width <= budget for rows, width in passes)
    assert len([p for p in passes if p[0] > 1]) > 0 and max(rows for rows, _ in passes) < 8  # split, not row by row
    for key in ("loss", "value_loss", "grad_norm", "ratio_mean", "kl", "rollout_logp_diff"):
        assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key

    # the new weights: the same step (Adam's first step is about ±lr wherever a gradient is not ~0, so compare the
    # whole step, not each parameter whose gradient is rounding noise)
    def step(lrn):
        params = [*lrn.model.parameters(), *lrn.value_head.parameters()]
        return torch.cat([(p - q).flatten() for p, q in zip(params, before)])

    assert (step(plain) - step(split)).norm() <= 1e-3 * step(plain).norm()


def test_warmup_factor_is_linear_from_its_start_and_one_without_a_warmup():
    from turnrl.rl.core.learner import warmup_factor

    assert [warmup_factor(s, 4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert [warmup_factor(s, 2, start=3) for s in range(3, 6)] == [0.5, 1.0, 1.0]  # after VAPO's critic-only steps
    assert warmup_factor(0, 0) == 1.0 and warmup_factor(7, 0, start=9) == 1.0
