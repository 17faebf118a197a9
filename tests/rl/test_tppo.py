"""T-PPO (docs/algorithms.md §6, issue 29): windows that end inside a turn resume token-exactly, the environment steps
only on complete turns, the algorithm's masks and EGAE, W ≥ max length is plain PPO, and a windowed run learns."""

import pytest
import torch
from pydantic import ValidationError
from toy_envs import UpperEnv, straddling_stop  # noqa: F401 — UpperEnv registers tests/Upper-v0

import turnrl
from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.algorithms import get_algorithm, parse_algorithm_config
from turnrl.rl.core.batch import collate
from turnrl.rl.formulas.advantages import masked_gae
from turnrl.rl.run.trainer import TrainConfig
from turnrl.rollout.engine import Rollout


def arithmetic_envs(n, steps):
    envs = [turnrl.make("turnrl/Arithmetic-v0", level=1, retry=True, max_turns=3) for _ in range(n)]
    for env in envs:
        step = env.unwrapped.astep

        async def counted(action, _step=step):
            steps.append(action)
            return await _step(action)

        env.unwrapped.astep = counted
    return envs


def play(agent, window, n=3, version=None):
    """Play n episodes greedily, in windows of ``window`` tokens (None: all at once); snapshots of each window."""
    steps = []
    rollout = Rollout(agent, SamplingParams(temperature=0.0, max_new_tokens=10), policy_version=version)
    eps = rollout.start(
        arithmetic_envs(n, steps),
        seeds=[0] * n,
        options=[{"index": i} for i in range(n)],
        group_ids=[None] * n,
        sample_seeds=[None] * n,
        metadata=[{}] * n,
    )
    snaps = []
    while not all(ep.done for ep in eps):
        rollout.play(eps, window)
        snaps.append([None if ep.done else rollout.snapshot(ep) for ep in eps])
    return [ep.traj for ep in eps], snaps, steps


@pytest.fixture(scope="module")
def agent():
    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok, seed=1)
    with torch.no_grad():  # large random weights: varied greedy text (a small init repeats one token)
        for p in model.parameters():
            p.mul_(8)
    return HFAgent(model, tok, batch_size=8)


def test_windows_that_end_inside_turns_resume_token_exactly_and_the_env_steps_only_on_whole_turns(agent):
    whole, _, whole_steps = play(agent, None)
    windowed, snaps, steps = play(agent, 3)
    assert len(snaps) > 3  # many windows: turns of up to 10 tokens were paused and resumed
    for a, b in zip(whole, windowed):
        assert b.token_ids == a.token_ids and b.loss_mask == a.loss_mask
        assert torch.allclose(torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=1e-4)
        assert [t.action.content for t in b.turns] == [t.action.content for t in a.turns]
        assert [t.token_span for t in b.turns] == [t.token_span for t in a.turns]
        assert [t.reward for t in b.turns] == [t.reward for t in a.turns]
    assert sorted(steps) == sorted(whole_steps)  # one env step per complete turn, with the whole turn's text
    paused_mid_turn = 0
    for i, final in enumerate(windowed):
        previous = None
        for window in snaps:
            s = window[i]
            if s is None:
                continue
            assert s.metadata["partial"] and s.token_ids == final.token_ids[: len(s.token_ids)]
            assert s.loss_mask == final.loss_mask[: len(s.loss_mask)]
            start = s.metadata["window_start"]
            assert sum(s.loss_mask[start:]) <= 3 and (previous is None or start == len(previous.token_ids))
            paused_mid_turn += s.loss_mask[-1] == 1  # the snapshot ends on a generated token: inside a turn
            previous = s
    assert paused_mid_turn > 0


def test_a_weight_update_between_windows_changes_the_versions_inside_a_turn(agent):
    version = [0]

    class Bumping:  # the version moves on after every window
        def __call__(self):
            return version[0]

    steps = []
    rollout = Rollout(agent, SamplingParams(temperature=0.0, max_new_tokens=10), policy_version=Bumping())
    eps = rollout.start(
        arithmetic_envs(1, steps),
        seeds=[0],
        options=[{"index": 0}],
        group_ids=[None],
        sample_seeds=[None],
        metadata=[{}],
    )
    while not eps[0].done:
        rollout.play(eps, 4)
        version[0] += 1
    t = eps[0].traj
    generated = [(v, i) for i, (v, m) in enumerate(zip(t.token_versions, t.loss_mask)) if m]
    for k, (v, _i) in enumerate(generated):
        assert v == k // 4  # four tokens per window, each window under the next version
    s, e = t.turns[0].token_span
    assert len({t.token_versions[i] for i in range(s, e)}) > 1  # the first turn spans an update


def test_a_stop_string_that_straddles_a_window_boundary_stops_the_turn_where_one_call_does(agent):
    """Issue 66, bug 3: a window that pauses a turn makes the turn's first tokens part of the next call's prompt; a
    stop string begun in one piece and ended in the next was missed, and the turn ran on to its token limit."""
    tok = agent.tokenizer

    def episode(window, stop):
        rollout = Rollout(agent, SamplingParams(temperature=0.0, max_new_tokens=10, stop=stop))
        eps = rollout.start(
            arithmetic_envs(1, []),
            seeds=[0],
            options=[{"index": 0}],
            group_ids=[None],
            sample_seeds=[None],
            metadata=[{}],
        )
        while not eps[0].done:
            rollout.play(eps, window)
        return eps[0].traj

    plain = episode(None, ())
    s, e = plain.turns[0].token_span
    turn = plain.token_ids[s:e]
    cut, stop = straddling_stop(tok, turn)  # the first window ends exactly inside this stop string
    assert stop not in tok.decode(turn[:cut], skip_special_tokens=False)
    whole = episode(None, (stop,))
    first = whole.turns[0]
    assert first.token_span[1] - first.token_span[0] == cut + 1 and first.info["finish_reason"] == "stop"
    windowed = episode(cut, (stop,))  # the first window ends exactly inside the stop string
    assert windowed.token_ids == whole.token_ids and windowed.loss_mask == whole.loss_mask
    assert [t.token_span for t in windowed.turns] == [t.token_span for t in whole.turns]
    assert [t.info["finish_reason"] for t in windowed.turns] == [t.info["finish_reason"] for t in whole.turns]
    assert torch.allclose(torch.tensor(windowed.logprobs), torch.tensor(whole.logprobs), atol=1e-4)


def test_stop_cut_finds_only_stop_strings_that_straddle_the_pieces():
    from turnrl.rollout.stops import stop_cut

    def decode(ids):
        return "".join(chr(97 + i) for i in ids)  # token i is one letter

    assert stop_cut(decode, [0, 1], [2, 3, 4], ("bc",)) == 1  # "b|c": ends on the first new token
    assert stop_cut(decode, [0, 1], [2, 3, 4], ("abcd",)) == 2
    assert stop_cut(decode, [0, 1], [2, 3, 4], ("cd",)) is None  # inside the new piece: the agent's own check
    assert stop_cut(decode, [0, 1], [2, 3, 4], ("zz",)) is None
    assert stop_cut(decode, [], [2, 3], ("cd",)) is None and stop_cut(decode, [0], [1], ()) is None


def tppo(**kw):
    return get_algorithm(parse_algorithm_config({"name": "tppo", **kw}))


def windowed_batch():
    """Three rows: finished in its first window; unfinished with an earlier window; finished in a later window."""
    tok = tiny_tokenizer("chatml")
    from turnrl.types import Message, Trajectory, Turn

    def traj(n_prompt, n_gen, reward, partial, start):
        ids = list(range(5, 5 + n_prompt + n_gen))
        mask = [0] * n_prompt + [1] * n_gen
        turn = Turn(
            index=0,
            role="policy",
            action=Message(role="assistant", content="x"),
            reward=reward,
            token_span=(n_prompt, n_prompt + n_gen),
            terminated=not partial,
        )
        meta = {"window_start": start} if start else {}
        if partial:
            meta["partial"] = True
        return Trajectory(
            env_id="e",
            turns=[turn],
            token_ids=ids,
            loss_mask=mask,
            logprobs=[-1.0] * len(ids),
            terminated=not partial,
            metadata=meta,
        )

    rows = [traj(3, 4, 1.0, False, 0), traj(2, 6, 0.0, True, 5), traj(2, 7, 1.0, False, 6)]
    return collate(rows, tok.pad_token_id)


def test_masks_cover_the_window_for_the_policy_and_finished_sequences_for_the_value():
    b = windowed_batch()
    algo = tppo()
    pm, vm = algo.policy_mask(b), algo.value_mask(b)
    assert pm[0].tolist() == b.loss_mask[0].tolist()  # one window: the whole response
    assert pm[1].nonzero().squeeze(-1).tolist() == [5, 6, 7]  # the current window only
    assert pm[2].nonzero().squeeze(-1).tolist() == [6, 7, 8]
    assert vm[1].sum() == 0 and vm[0].tolist() == b.loss_mask[0].tolist() and vm[2].tolist() == b.loss_mask[2].tolist()
    values = torch.randn(b.loss_mask.shape) * b.loss_mask
    adv, _ = algo.advantages(b, 8, values, torch.zeros(3))
    assert (adv * (1 - pm)).abs().sum() == 0 and (adv.abs() <= 10).all()


def test_a_sequence_finished_in_its_first_window_gets_standard_gae_and_an_unfinished_one_egae():
    b = windowed_batch()
    algo = tppo(lam_actor=1.0, whiten_advantages=False, adv_clip=None)
    values = torch.randn(b.loss_mask.shape) * b.loss_mask
    adv, returns = algo.advantages(b, 8, values, torch.zeros(3))
    std, _ = masked_gae(b.token_rewards, values, b.loss_mask, 1.0, 1.0)
    assert torch.allclose(adv[0], std[0])  # finished in its first window: standard GAE
    # γ = λ = 1, unfinished: Σ_{k≥t} r_k + V(s_{l−1}) − V(s_t) on the window's tokens
    last = int(b.loss_mask[1].nonzero().max())
    for t in (5, 6, 7):
        assert torch.isclose(adv[1, t], values[1, last] - values[1, t], atol=1e-6)
    assert torch.isclose(returns[1, 5], values[1, last], atol=1e-6)  # the critic's EGAE target


def test_the_value_loss_ignores_unfinished_sequences():
    b = windowed_batch()
    algo = tppo()
    values = torch.randn(b.loss_mask.shape) * b.loss_mask
    adv, returns = algo.advantages(b, 8, values, torch.zeros(3))
    from turnrl.rl.algorithms import Experience, Forward

    exp = Experience(b, adv, returns, values, None)
    fwd = Forward(logp=b.old_logp.clone(), entropy=torch.zeros_like(values), values=values + 0.3)
    loss, _ = algo.loss(fwd, exp, algo.counts(b), train_policy=False)
    moved = Forward(logp=fwd.logp, entropy=fwd.entropy, values=fwd.values.clone())
    moved.values[1] += 5.0  # the unfinished row's values: not in the value loss
    assert torch.equal(algo.loss(moved, exp, algo.counts(b), train_policy=False)[0], loss)
    moved.values[0] += 5.0
    assert not torch.equal(algo.loss(moved, exp, algo.counts(b), train_policy=False)[0], loss)


def test_overlong_punishes_each_finished_sequence_on_its_last_token_and_waits_for_unfinished_ones():
    b = windowed_batch()  # responses of 4, 6 (unfinished) and 7 tokens; L_max 8, buffer 4: 7 tokens cost -0.75
    plain, shaped = tppo(), tppo(overlong={"cache_len": 4})
    extra = shaped.shaped_rewards(b, 8) - plain.shaped_rewards(b, 8)
    assert extra[0].abs().sum() == 0  # 4 tokens: inside L_max - L_cache
    assert extra[1].abs().sum() == 0  # still in play (6 tokens so far): punished when it finishes
    last = int(b.loss_mask[2].nonzero().max())
    assert extra[2, last] == pytest.approx(-0.75) and extra[2].abs().sum() == pytest.approx(0.75)
    values = torch.randn(b.loss_mask.shape) * b.loss_mask
    a0, _ = tppo(whiten_advantages=False, adv_clip=None).advantages(b, 8, values, torch.zeros(3))
    a1, _ = tppo(whiten_advantages=False, adv_clip=None, overlong={"cache_len": 4}).advantages(
        b, 8, values, torch.zeros(3)
    )
    assert (a1[2] * b.loss_mask[2] < a0[2] * b.loss_mask[2]).sum() > 0 and torch.equal(a1[0], a0[0])
    ppo = get_algorithm(parse_algorithm_config({"name": "ppo", "overlong": {"cache_len": 4}}))
    assert ppo.shaped_rewards(b, 8)[2, last] == pytest.approx(b.token_rewards[2, last].item() - 0.75)
    with pytest.raises(ValidationError, match="cache_len"):
        parse_algorithm_config({"name": "ppo", "overlong": {"cache_len": 0}})


def config(tmp_path, algo, steps, **algorithm):
    return TrainConfig(
        model="tiny",
        env={"id": "tests/Upper-v0"},
        algorithm={"name": algo, **algorithm},
        rollout={"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 4},
        optim={"lr": 1e-2, "minibatch_size": 16},
        steps=steps,
        eval_tasks=8,
        out_dir=str(tmp_path),
    )


@pytest.fixture
def run(trainer_of):
    """``run(cfg)``: ``(trainer, history)`` of ``cfg`` trained to its end on a fresh tiny model; the trainer is
    closed when the test ends."""

    def go(cfg):
        trainer = trainer_of(cfg)
        return trainer, trainer.train()

    return go


def test_a_window_no_response_reaches_is_plain_ppo(tmp_path, run):
    as_ppo = {
        "window": 64,
        "lam_actor": 0.95,
        "lam_critic": 0.95,
        "eps_high": 0.2,
        "dual_clip": None,
        "agg": "seq-mean-token-mean",
        "nll_coef": 0.0,
        "adv_clip": None,
        "value_warmup_steps": 0,
    }
    _, t = run(config(tmp_path / "tppo", "tppo", 3, **as_ppo))
    _, p = run(config(tmp_path / "ppo", "ppo", 3))
    keys = ["loss", "value_loss", "reward_mean", "response_length", "clip_frac", "grad_norm", "eval_success"]
    for a, b in zip(t, p):
        for k in keys:
            if k in b:
                assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-7), k
    assert all(h.get("carried_episodes", 0) == 0 for h in t)


def test_tppo_in_windows_shorter_than_the_answers_trains_on_each_window_once(tmp_path, run):
    cfg = config(tmp_path, "tppo", 6, window=3, value_warmup_steps=2).model_copy(update={"save_trajectories": True})
    _trainer, history = run(cfg)
    assert sum(h["carried_episodes"] for h in history[1:]) > 0 and all(h["critic_only"] == 1 for h in history[1:3])
    assert all(0 < h["unfinished_share"] < 1 for h in history[2:]) and all("critic_only" not in h for h in history[3:])
    assert all(h.get("staleness_max", 0) == 0 for h in history[1:])  # the window's tokens: the current weights
    # a turn a window paused counts as a turn: the mean turn stays within max_new_tokens (no false length warning)
    assert all(0 < h["turn_length"] <= 4 for h in history if "turn_length" in h)
    from turnrl.storage import read_jsonl

    trained: dict[str, list[int]] = {}  # job → the positions of the generated tokens the policy trained on
    for step in range(1, 7):
        for t in read_jsonl(tmp_path / "train" / f"step-{step}" / "trajectories.jsonl"):
            start = t.metadata.get("window_start", 0)
            window = [i for i, m in enumerate(t.loss_mask) if m and i >= start]
            assert 0 < len(window) <= 3
            trained.setdefault(t.metadata["job"], []).extend(window)
    for job, positions in trained.items():  # every generated token trained once, in order
        assert positions == sorted(set(positions)), job
    done = [
        t for t in read_jsonl(tmp_path / "train" / "step-6" / "trajectories.jsonl") if not t.metadata.get("partial")
    ]
    assert done and all(
        trained[t.metadata["job"]] == [i for i, m in enumerate(t.loss_mask) if m]
        for t in done
        if t.metadata["job"].startswith(("0-", "1-", "2-", "3-"))
    )


def test_a_resumed_windowed_run_plays_the_episodes_in_play_again(tmp_path, run, trainer_of):
    cfg = config(tmp_path, "tppo", 4, window=2, value_warmup_steps=0)
    trainer, _ = run(cfg.model_copy(update={"steps": 2}))
    state = trainer.driver.source.state_dict()
    assert state["in_play"] and all(len(k.split("-")) == 4 for k in state["in_play"])
    again = trainer_of(cfg)
    again.driver.source.load_state_dict(state)
    trajs, info = again.driver.source.collect(2)
    keys = [t.metadata["job"] for t in trajs]
    assert set(state["in_play"]) <= set(keys) and info["regenerated_episodes"] == len(state["in_play"])


def test_bad_tppo_settings_are_refused_before_a_model_loads(tmp_path):
    with pytest.raises(ValidationError, match="window"):
        config(tmp_path, "tppo", 1, window=0)
    with pytest.raises(ValidationError, match="set rollout.max_staleness=0"):
        TrainConfig(
            model="tiny",
            env={"id": "tests/Upper-v0"},
            algorithm={"name": "tppo"},
            placement="ray",
            rollout={"max_staleness": 1},
        )
    with pytest.raises(ValidationError, match="train_on"):
        config(tmp_path, "tppo", 1, train_on="all")


def test_train_on_finished_trains_each_group_once_whole_after_its_episodes_finish(tmp_path, run):
    cfg = config(tmp_path, "tppo", 6, window=3, value_warmup_steps=0, train_on="finished")
    # up to three tries per episode: a group's episodes finish windows apart, its quick ones wait across updates
    retry = cfg.env.model_copy(update={"kwargs": {"retry": True, "max_turns": 3}})
    _trainer, history = run(cfg.model_copy(update={"save_trajectories": True, "env": retry}))
    assert sum(h["carried_episodes"] for h in history[1:]) > 0
    assert all(h.get("unfinished_share", 0) == 0 for h in history[1:])  # no snapshot reaches the learner
    # issue 66, bug 1: quick answers that waited for their group across updates (held_versions_max ≥ 1) are not
    # dropped as stale by the driver's bound (0 for T-PPO): every episode collected was trained
    assert max(h.get("held_versions_max", 0) for h in history[1:]) >= 1
    assert all(h["stale_episodes"] == 0 and h["stale_group_episodes"] == 0 for h in history[1:])
    # the earlier windows of a carried episode were sampled by older versions: the metrics show the lag
    assert max(h.get("staleness_max", 0) for h in history[1:]) >= 1
    from turnrl.storage import read_jsonl

    seen, earlier = [], 0
    for step in range(1, 7):
        trajs = read_jsonl(tmp_path / "train" / f"step-{step}" / "trajectories.jsonl")
        groups: dict[str, int] = {}
        for t in trajs:
            groups[t.group_id] = groups.get(t.group_id, 0) + 1
        assert all(n == 4 for n in groups.values())  # a group trains whole, once its slowest episode finished
        for t in trajs:
            assert "advantages" in t.metadata  # trained (the learner annotates what it trained), none left out
            assert not t.metadata.get("partial")
            start = t.metadata.get("window_start", 0)  # a carried episode: its last window began here
            earlier += any(a not in (None, 0.0) for a in t.metadata["advantages"][:start])  # trained too
            seen.append(t.metadata["job"])
    assert len(seen) == len(set(seen)) and earlier > 0  # each episode trained once, earlier windows included


def test_train_on_finished_with_a_window_no_response_reaches_is_the_window_run():
    b = windowed_batch()
    finished = tppo(train_on="finished")
    assert torch.equal(finished.policy_mask(b), b.loss_mask)
    b.finished = torch.ones(3)
    b.window_start = torch.zeros(3, dtype=torch.long)  # one window each: the two modes train the same tokens
    values = torch.randn(b.loss_mask.shape) * b.loss_mask
    a1, r1 = finished.advantages(b, 8, values, torch.zeros(3))
    a2, r2 = tppo().advantages(b, 8, values, torch.zeros(3))
    assert torch.equal(a1, a2) and torch.equal(r1, r2)


def test_a_turn_resumed_in_a_later_window_does_not_replay_its_random_stream():
    """With per-episode streams, the piece of a turn played after a window goes on with draws of its own (each
    window is a new segment of the stream's seed). A uniform policy (zero weights) shows it: a replayed stream would
    sample each piece's tokens again, identically."""
    tok = tiny_tokenizer("chatml")
    model = tiny_model(tok, seed=1)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    uniform = HFAgent(model, tok, batch_size=8)
    rollout = Rollout(uniform, SamplingParams(temperature=1.0, max_new_tokens=12))
    eps = rollout.start(
        arithmetic_envs(2, []),
        seeds=[0, 0],
        options=[{"index": 0}, {"index": 1}],
        group_ids=[None] * 2,
        sample_seeds=[5, 6],
        metadata=[{}] * 2,
    )
    starts = [len(ep.tokens) for ep in eps]
    for _ in range(3):
        rollout.play(eps, 4)
    for ep, start in zip(eps, starts):
        generated = list(ep.tokens[start : start + 12])
        assert len(generated) == 12  # three windows of 4 tokens inside the first turn
        pieces = [generated[i : i + 4] for i in (0, 4, 8)]
        assert pieces[0] != pieces[1] and pieces[1] != pieces[2], pieces


def test_min_groups_holds_finished_groups_until_enough_are_ready(tmp_path, run):
    cfg = config(tmp_path, "tppo", 6, window=2, value_warmup_steps=0, train_on="finished", min_groups=4)
    trainer, history = run(cfg.model_copy(update={"save_trajectories": True}))
    assert any(h.get("ready_episodes", 0) > 0 for h in history[1:])  # some step held groups back
    from turnrl.storage import read_jsonl

    seen, trained_steps = [], 0
    for step in range(1, 7):
        path = tmp_path / "train" / f"step-{step}" / "trajectories.jsonl"
        trajs = read_jsonl(path) if path.exists() else []
        groups: dict[str, int] = {}
        for t in trajs:
            groups[t.group_id] = groups.get(t.group_id, 0) + 1
        # an update holds at least min_groups whole groups, but the first (with no warm-up, the first policy
        # update) takes whatever is ready
        assert not groups or len(groups) >= 4 or trained_steps == 0
        assert all(n == 4 for n in groups.values())
        trained_steps += bool(trajs)
        seen += [t.metadata["job"] for t in trajs]
    assert trained_steps >= 1 and len(seen) == len(set(seen))  # each episode trained once
    source = trainer.driver.source
    held = {str(t.metadata["job"]) for t in source.ready}
    assert held <= set(source.state_dict()["in_play"])  # a resumed run plays the held groups again


def test_min_groups_holds_nothing_during_the_critic_warm_up_nor_for_the_first_policy_update(tmp_path, run):
    """The warm-up's updates train no policy: they take whatever groups have finished, so that the warm-up ends on the
    step an unwindowed run's would; so does the first policy update, so that the actor starts on that step too; the
    policy's later updates wait for ``min_groups`` groups."""
    cfg = config(tmp_path, "tppo", 12, window=1, value_warmup_steps=2, train_on="finished", min_groups=4)
    _, history = run(cfg.model_copy(update={"save_trajectories": True}))
    from turnrl.storage import read_jsonl

    updates, held = [], False
    for h in history[1:]:
        path = tmp_path / "train" / f"step-{int(h['step'])}" / "trajectories.jsonl"
        groups = {t.group_id for t in read_jsonl(path)} if path.exists() else set()
        if len(updates) < 3:
            assert h["ready_episodes"] == 0  # nothing held back: every finished group trains at once
            assert not groups or (h.get("critic_only") == 1.0) == (len(updates) < 2)
        else:
            assert not groups or (len(groups) >= 4 and "critic_only" not in h)
            held |= h["ready_episodes"] > 0
        if groups:
            updates.append(len(groups))
    assert len(updates) > 3 and held  # both warm-up updates and the first policy update ran; later steps held groups
    assert min(updates[:3]) < 4  # one of the first three updates trained fewer than min_groups groups


def test_min_groups_needs_train_on_finished(tmp_path):
    with pytest.raises(ValidationError, match="min_groups"):
        config(tmp_path, "tppo", 1, min_groups=2)
    with pytest.raises(ValidationError, match="min_groups"):
        config(tmp_path, "tppo", 1, train_on="finished", min_groups=0)


def test_refill_prompts_starts_a_full_set_of_groups_every_step_beside_the_carried_episodes(tmp_path, run):
    fit = config(tmp_path / "fit", "tppo", 4, window=2, value_warmup_steps=0, train_on="finished")
    _, by_fit = run(fit)
    full = config(
        tmp_path / "prompts", "tppo", 4, window=2, value_warmup_steps=0, train_on="finished", refill="prompts"
    )
    _trainer, by_prompts = run(full.model_copy(update={"save_trajectories": True}))
    steps = [h for h in by_prompts if "new_episodes" in h]
    assert len(steps) == 4 and all(h["new_episodes"] == 16 for h in steps)  # 4 prompts × 4, whatever carries
    assert sum(h["carried_episodes"] for h in steps[:-1]) > 0  # and some episodes did carry over beside them
    # the default fits new groups into the places the carried episodes leave: a carried episode costs a group
    fitted = [h for h in by_fit if "new_episodes" in h]
    assert any(h["new_episodes"] < 16 for h in fitted[1:])
    assert all(
        h["new_episodes"] + c <= 16 or h["new_episodes"] == 4
        for h, c in zip(fitted[1:], [f["carried_episodes"] for f in fitted[:-1]])
    )
    from turnrl.storage import read_jsonl

    seen = [
        t.metadata["job"]
        for step in range(1, 5)
        for p in [tmp_path / "prompts" / "train" / f"step-{step}" / "trajectories.jsonl"]
        if p.exists()
        for t in read_jsonl(p)
    ]
    assert seen and len(seen) == len(set(seen))  # each episode still trains once
    with pytest.raises(ValidationError, match="refill"):
        config(tmp_path, "tppo", 1, refill="all")
