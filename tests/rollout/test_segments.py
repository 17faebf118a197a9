"""Context segments of one episode (``Trajectory.segments``): an episode whose history was rewritten is several
token sequences end to end. Validation, storage, collate, the forward passes (each segment its own sequence), the
critics, and a learner step where a segmented episode is still one group member."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.core.batch import collate
from turnrl.rl.core.critic import SeparateCritic, ValueHead
from turnrl.rl.core.forward import forward_tokens, token_logprobs
from turnrl.rl.run.trainer import TrainConfig, learner_of
from turnrl.storage import PARQUET_SCHEMA, _to_row, load, read_parquet, save
from turnrl.types import Message, Trajectory, Turn

PAD = 0


def build(parts, *, reward=1.0, group="g", seed=0, **extra):
    """A token-exact episode from ``parts``: a list of segments, each a list of ``(kind, n)`` with kind ``"p"``
    (prompt), ``"g"`` (a turn's generated tokens) or ``"o"`` (the turn's observation tokens). Random ids."""
    g = torch.Generator().manual_seed(seed)
    ids, mask, turns, starts = [], [], [], []
    for seg in parts:
        starts.append(len(ids))
        for kind, n in seg:
            s = len(ids)
            ids += torch.randint(5, 400, (n,), generator=g).tolist()
            mask += [1 if kind == "g" else 0] * n
            if kind == "g":
                turns.append(
                    Turn(
                        index=len(turns),
                        action=Message(role="assistant", content=f"a{len(turns)}"),
                        token_span=(s, s + n),
                        info={"segment": len(starts) - 1},
                    )
                )
            elif kind == "o":
                turns[-1].obs_span = (s, s + n)
    turns[-1].reward = reward
    return Trajectory(
        group_id=group,
        prompt=[Message(role="user", content="q")],
        turns=turns,
        token_ids=ids,
        loss_mask=mask,
        logprobs=[-0.5 * m for m in mask],
        terminated=True,
        segments=starts if len(starts) > 1 else None,
        **extra,
    )


TWO = [[("p", 5), ("g", 4), ("o", 3), ("g", 2)], [("p", 6), ("g", 3)]]


# ---- validation ----


def test_valid_segments_and_their_bounds():
    t = build(TWO)
    assert t.segments == [0, 14] and t.segment_bounds() == [(0, 14), (14, 23)]
    one = build([TWO[0]])
    assert one.segments is None and one.segment_bounds() == [(0, 14)]
    assert Trajectory.model_validate({**one.model_dump(), "segments": [0]}).segment_bounds() == [(0, 14)]
    with pytest.raises(ValueError, match="no token fields"):
        Trajectory().segment_bounds()


@pytest.mark.parametrize(
    "change, match",
    [
        ({"segments": [1, 14]}, "start with offset 0"),
        ({"segments": []}, "start with offset 0"),
        ({"segments": [0, 14, 14]}, "strictly increase"),
        ({"segments": [0, 14, 11]}, "strictly increase"),
        ({"segments": [0, 23]}, "past the last token"),
        ({"segments": [0, 12]}, "must open with prompt tokens"),  # token 12 opens turn 1's generated tokens
        ({"segments": [0, 7]}, "token_span .* crosses"),  # turn 0 generated 5..9
        ({"segments": [0, 10]}, "obs_span .* crosses"),  # turn 0's observation is 9..12
        ({"segments": [0, 14], "turns": "bridge"}, "token_span .* crosses"),
        ({"token_ids": None, "loss_mask": None, "logprobs": None}, "segments needs the token fields"),
    ],
)
def test_each_rule_is_checked(change, match):
    data = build(TWO).model_dump()
    if change.get("turns") == "bridge":  # turn 1 generates on over the boundary at 14 (12..16)
        change = {"segments": [0, 14]}
        data["loss_mask"][12:16] = [1] * 4
        data["turns"][1]["token_span"] = (12, 16)
    data.update(change)
    with pytest.raises(ValueError, match=match):
        Trajectory.model_validate(data)


# ---- storage ----


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_segments_survive_a_round_trip(tmp_path, suffix):
    trajs = [build(TWO, metadata={"segment_reasons": ["history rewritten: 2 messages dropped"]}), build([TWO[0]])]
    path = tmp_path / f"t{suffix}"
    save(trajs, path)
    back = load(path)
    assert [t.model_dump() for t in back] == [t.model_dump() for t in trajs]
    assert back[0].segments == [0, 14] and back[1].segments is None


def test_parquet_written_before_segments_reads_as_one_segment(tmp_path):
    schema = pa.schema([f for f in PARQUET_SCHEMA if f.name != "segments"])
    row = {k: v for k, v in _to_row(build([TWO[0]])).items() if k != "segments"}
    pq.write_table(pa.Table.from_pylist([row], schema=schema), tmp_path / "old.parquet")
    (t,) = read_parquet(tmp_path / "old.parquet")
    assert t.segments is None and t.token_ids == build([TWO[0]]).token_ids


# ---- collate ----


def test_collate_gives_each_token_its_segment():
    seg, plain = build(TWO), build([TWO[0]], seed=1)
    b = collate([plain, seg], PAD)
    assert b.segment_ids.shape == b.input_ids.shape == (2, 23) and b.segment_ids.dtype == torch.long
    assert b.segment_ids[0].tolist() == [0] * 23  # plain row, padding included
    assert b.segment_ids[1].tolist() == [0] * 14 + [1] * 9
    assert b.select([1]).segment_ids.tolist() == [[0] * 14 + [1] * 9]
    assert torch.equal(b.to("cpu").segment_ids, b.segment_ids)
    one = collate([plain], PAD)
    assert one.segment_ids.shape == one.input_ids.shape and not one.segment_ids.any()
    rest = {
        f: getattr(b, f)
        for f in (
            "input_ids",
            "attention_mask",
            "loss_mask",
            "old_logp",
            "token_rewards",
            "turn_ids",
            "roles",
            "response_lengths",
            "scores",
            "correct",
            "group_ids",
            "truncated",
        )
    }
    assert not type(b)(**rest).segment_ids.any()  # the default: one context per row


# ---- forward ----


def _alone(model, ids, mask, temperature=1.0):
    """logp, entropy, hidden of one unpadded sequence run by itself, the plain way."""
    out = model(input_ids=ids[None], output_hidden_states=True)
    lsm = (out.logits[0, :-1].float() / temperature).log_softmax(-1)
    lp = torch.cat([torch.zeros(1), lsm.gather(-1, ids[1:, None]).squeeze(-1)])
    ent = torch.cat([torch.zeros(1), -(lsm.exp() * lsm).sum(-1)])
    first = int(mask.nonzero().min()) if mask.any() else len(ids)
    keep = torch.arange(len(ids)) >= max(first, 1)
    return lp * keep, ent * keep, out.hidden_states[-1][0]


def _mixed():
    """Rows: a 2-segment episode, a plain one, a 3-segment one whose later segments share row 0's second prompt
    (so share_prefix clusters segments of different rows), a 2-segment one whose second segment generates nothing."""
    seg = build(TWO, seed=0)
    plain = build([TWO[0]], seed=1)
    third = build([[("p", 4), ("g", 3)], [("p", 6), ("g", 5)], [("p", 2), ("g", 1)]], seed=2)
    ids = third.token_ids
    ids[7:13] = seg.token_ids[14:20]  # the same second-segment prompt as row 0
    third = Trajectory.model_validate({**third.model_dump(), "token_ids": ids})
    idle = build([[("p", 3), ("g", 2)], [("p", 4)]], seed=3)
    return [seg, plain, third, idle]


@pytest.mark.parametrize("share", [False, True])
def test_each_segment_is_scored_as_its_own_sequence(share):
    tok = tiny_tokenizer("chatml")
    trajs = _mixed()
    b = collate(trajs, PAD)
    model, ref = tiny_model(tok, seed=1).train(), tiny_model(tok, seed=1).train()
    lp, ent, h = forward_tokens(
        model,
        b.input_ids,
        b.attention_mask,
        0.7,
        hidden=True,
        loss_mask=b.loss_mask,
        share_prefix=share,
        segment_ids=b.segment_ids,
    )
    ref_loss = torch.zeros(())
    for r, t in enumerate(trajs):
        for s, e in t.segment_bounds():
            want_lp, want_ent, want_h = _alone(ref, torch.tensor(t.token_ids[s:e]), torch.tensor(t.loss_mask[s:e]), 0.7)
            assert torch.allclose(lp[r, s:e], want_lp, atol=1e-5), (r, s)
            assert torch.allclose(ent[r, s:e], want_ent, atol=1e-5), (r, s)
            assert torch.allclose(h[r, s:e], want_h, atol=1e-5), (r, s)
            ref_loss = ref_loss + (want_lp * torch.tensor(t.loss_mask[s:e])).sum()
        assert (lp[r, len(t.token_ids) :] == 0).all() and (h[r, len(t.token_ids) :] == 0).all()
    assert lp[0, 14] == 0 and lp[0, 14:20].abs().sum() == 0  # the second segment's prompt is not scored
    # gradients reach the model through the segmented rows exactly as through the segments run alone
    (lp * b.loss_mask).sum().backward()
    ref_loss.backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.grad is not None and p.grad.abs().sum() > 0, name
        assert torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4), name


def test_a_segmented_row_differs_from_the_same_tokens_as_one_sequence():
    """The test above could pass if segments were ignored only if no token attended across; make sure it does."""
    tok = tiny_tokenizer("chatml")
    b = collate([build(TWO)], PAD)
    model = tiny_model(tok, seed=1)
    with torch.no_grad():
        joined = token_logprobs(model, b.input_ids, b.attention_mask, loss_mask=b.loss_mask)[0]
        split = token_logprobs(model, b.input_ids, b.attention_mask, loss_mask=b.loss_mask, segment_ids=b.segment_ids)[
            0
        ]
    assert torch.allclose(joined[0, :14], split[0, :14], atol=1e-5)
    assert not torch.allclose(joined[0, 20:], split[0, 20:], atol=1e-3)


@pytest.mark.parametrize("share", [False, True])
def test_without_segments_the_pass_is_unchanged(share):
    """Plain rows: all-zero segment ids take the old path, bit for bit; a plain row beside a segmented one gets
    the same values as without it (up to float rounding: another padded batch)."""
    tok = tiny_tokenizer("chatml")
    trajs = [build([TWO[0]], seed=1), build([TWO[0]], seed=4), build([[("p", 5), ("g", 7)]], seed=5)]
    b = collate(trajs, PAD)
    model = tiny_model(tok, seed=1)
    with torch.no_grad():
        old = forward_tokens(
            model, b.input_ids, b.attention_mask, hidden=True, loss_mask=b.loss_mask, share_prefix=share
        )
        new = forward_tokens(
            model,
            b.input_ids,
            b.attention_mask,
            hidden=True,
            loss_mask=b.loss_mask,
            share_prefix=share,
            segment_ids=b.segment_ids,
        )
        assert all(torch.equal(x, y) for x, y in zip(old, new))
        mixed = collate([*trajs, build(TWO)], PAD)
        lp, ent, h = forward_tokens(
            model,
            mixed.input_ids,
            mixed.attention_mask,
            hidden=True,
            loss_mask=mixed.loss_mask,
            share_prefix=share,
            segment_ids=mixed.segment_ids,
        )
    T = b.input_ids.shape[1]
    assert torch.allclose(lp[:3, :T], old[0], atol=1e-5) and torch.allclose(ent[:3, :T], old[1], atol=1e-5)
    real = b.attention_mask > 0
    assert torch.allclose(h[:3, :T][real], old[2][real], atol=1e-5)


# ---- critics ----


def test_separate_critic_runs_each_segment_alone():
    tok = tiny_tokenizer("chatml")
    trajs = _mixed()
    b = collate(trajs, PAD)
    critic = SeparateCritic(tiny_model(tok, seed=2), len(tok))
    torch.nn.init.normal_(critic.proj.weight)
    torch.nn.init.normal_(critic.proj.bias)
    lengths = b.attention_mask.sum(-1)
    values, last = critic(b.input_ids, b.attention_mask, lengths, b.segment_ids)
    for r, t in enumerate(trajs):
        bounds = t.segment_bounds()
        for s, e in bounds:
            ids = torch.tensor(t.token_ids[s:e])[None]
            want, after = critic(ids, torch.ones_like(ids), torch.tensor([e - s]))
            assert torch.allclose(values[r, s:e], want[0], atol=1e-5), (r, s)
            assert values[r, s] == 0  # a segment opens with no state before it
            if (s, e) == bounds[-1]:  # the bootstrap: after the row's last token, in its last segment
                assert torch.allclose(last[r], after[0], atol=1e-5)
    values.sum().backward()  # trained end to end through the segmented rows
    assert all(p.grad is not None for p in critic.backbone.parameters() if p.requires_grad)


def test_value_head_reads_per_segment_hidden_states():
    tok = tiny_tokenizer("chatml")
    t = build(TWO)
    b = collate([t], PAD)
    model, head = tiny_model(tok, seed=1), ValueHead(32)
    torch.nn.init.normal_(head.proj.weight)
    with torch.no_grad():
        h = forward_tokens(
            model, b.input_ids, b.attention_mask, hidden=True, loss_mask=b.loss_mask, segment_ids=b.segment_ids
        )[2]
        values, last = head(h, b.attention_mask.sum(-1), b.segment_ids)
        for s, e in t.segment_bounds():
            alone = _alone(model, torch.tensor(t.token_ids[s:e]), torch.tensor(t.loss_mask[s:e]))[2]
            want, after = head(alone[None], torch.tensor([e - s]))
            assert torch.allclose(values[0, s:e], want[0], atol=1e-5)
    assert values[0, 14] == 0 and torch.allclose(last, after, atol=1e-5)


# ---- a learner step ----


def _config(algo):
    return TrainConfig.model_validate(
        {
            "model": "tiny",
            "env": {"id": "tests/Upper-v0"},
            "algorithm": algo,
            "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 8},
            "optim": {"lr": 1e-2, "minibatch_size": 2, "share_prompts": True},
        }
    )


@pytest.mark.parametrize("algo", ["grpo", {"name": "ppo", "whiten_advantages": False}])
def test_a_learner_step_on_segmented_and_plain_episodes(algo):
    tok = tiny_tokenizer("chatml")
    trajs = [
        build(TWO, reward=1.0, group="a", seed=0),
        build([TWO[0]], reward=0.0, group="a", seed=1),
        build([TWO[0]], reward=1.0, group="b", seed=2),
        build([TWO[0]], reward=0.0, group="b", seed=3),
    ]
    config = _config(algo)
    lrn = learner_of(config, tiny_model(tok, seed=0), tok)
    exp, info = lrn.prepare(trajs)
    assert len(exp) == 4 and info["dropped_episodes"] == 0
    assert exp.batch.segment_ids[0].max() == 1 and exp.batch.group_ids.tolist() == [0, 0, 1, 1]
    m = exp.batch.loss_mask > 0
    first = [float(exp.adv[i][m[i]][0]) for i in range(4)]
    if algo == "grpo":  # the segmented episode is one member of its group: the same ±1 as two plain episodes
        assert first[0] == pytest.approx(first[2]) and first[1] == pytest.approx(first[3])
        assert first[0] > 0.5 and first[1] < -0.5 and first[0] == pytest.approx(-first[1])
        assert torch.allclose(exp.adv[0][m[0]], torch.full((int(m[0].sum()),), first[0]))  # every segment's tokens
    else:  # the value head sees each segment alone: the second segment opens with value 0
        lrn_values = lrn._values(
            exp.batch,
            forward_tokens(
                lrn.model, exp.batch.input_ids, exp.batch.attention_mask, hidden=True, segment_ids=exp.batch.segment_ids
            )[2],
        )
        assert lrn_values[0, 14] == 0
    before = [p.detach().clone() for p in lrn.model.parameters()]
    out = lrn.update(trajs)
    assert torch.isfinite(torch.tensor(out["loss"])) and torch.isfinite(torch.tensor(out["grad_norm"]))
    assert out["grad_norm"] > 0
    assert any(not torch.equal(p, q) for p, q in zip(before, lrn.model.parameters()))
    logp = trajs[0].metadata["learner_logprobs"]
    assert len(logp) == 23 and logp[14] is None and logp[20] is not None  # the second segment's tokens trained
    assert out["logp_diff"] > 0 and trajs[0].metadata["learner_logprobs_after"] == 0  # row 0: the initial weights
    with torch.no_grad():  # the learner's pass saw the second segment alone
        want = _alone(
            tiny_model(tok, seed=0),
            torch.tensor(trajs[0].token_ids[14:]),
            torch.tensor([0] * 6 + [1] * 3),
            config.rollout.temperature,
        )[0]
    assert logp[20:] == pytest.approx(want[6:].tolist(), abs=1e-4)
    json.dumps(trajs[0].metadata)


# ---- methods that cut episodes into rows ----


def test_swirl_step_rows_take_the_tokens_of_their_own_segment():
    from turnrl.methods.swirl.steps import decompose

    traj = build(TWO, metadata={"segment_reasons": ["history rewritten: 2 messages dropped"]})
    rows = decompose(traj)
    assert [r.token_ids for r in rows] == [traj.token_ids[:9], traj.token_ids[:14], traj.token_ids[14:]]
    last = rows[2]
    assert last.turns[-1].token_span == (6, 9) and last.loss_mask == [0] * 6 + [1] * 3
    assert last.logprobs[6:] == traj.logprobs[20:] and last.metadata["prompt_length"] == 6
    assert last.metadata["swirl"]["prefix_len"] == 6 and last.metadata["swirl"]["segment"] == 1
    assert "segment" not in rows[1].metadata["swirl"] and rows[1].turns[-1].token_span == (12, 14)
    assert all(r.segments is None and "segment_reasons" not in r.metadata for r in rows)
    b = collate(rows, PAD)
    assert not b.segment_ids.any()


def test_taking_demos_out_of_a_segmented_episode_is_refused():
    from turnrl.methods.swirl.generate import without_demos

    traj = build(TWO)
    with pytest.raises(ValueError, match="context segments"):
        without_demos(traj, (Message(role="user", content="q"),), renderer=None)
