"""Training on environments with several agents (turnrl/rl/sources/multi.py, league.py): self-play in every seat,
a league of past versions, frozen opponents; per-seat groups, token-exact views, resume, LoRA, bad input."""

import copy
import json
import logging

import pytest
import torch

from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.config import LeagueConfig, TrainConfig
from turnrl.rl.run.trainer import Trainer
from turnrl.rl.sources.league import League
from turnrl.storage import read_jsonl

pytestmark = pytest.mark.timeout(300)


def config(out, **over):
    base = {
        "model": "tiny",
        "env": {"id": "turnrl/TicTacToe-v0"},
        "algorithm": {"name": "grpo"},
        "steps": 2,
        "rollout": {
            "prompts_per_step": 2,
            "group_size": 2,
            "max_new_tokens": 6,
            "max_context": 1024,
            "temperature": 1.5,
        },
        "eval_tasks": 4,
        "out_dir": str(out),
        "seed": 3,
    }
    base.update(over)
    return TrainConfig(**base)


@pytest.fixture
def trainer(trainer_of):
    """``trainer(cfg, seed=0)``: a trainer of ``cfg`` on a tiny model of ``seed``, closed when the test ends."""

    def build(cfg, seed=0):
        tok = tiny_tokenizer("chatml")
        return trainer_of(cfg, tok, tiny_model(tok, seed=seed))

    return build


def weights(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def episodes(out, step):
    return list(read_jsonl(out / "train" / f"step-{step}" / "trajectories.jsonl"))


def test_self_play_trains_every_seat_in_groups_per_seat_on_exactly_what_was_sampled(tmp_path, trainer):
    tr = trainer(config(tmp_path))
    before = weights(tr.model)
    history = tr.train()
    after = weights(tr.model)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    for step in (1, 2):
        row, trajs = history[step], episodes(tmp_path, step)
        assert {t.metadata["seat"] for t in trajs} == {"x", "o"} and len(trajs) == 2 * 2 * 2  # jobs × seats
        groups = {}
        for t in trajs:
            groups.setdefault(t.group_id, []).append(t)
            assert t.group_id.endswith("/" + t.metadata["seat"]) and t.metadata["opponent"] == "self"
            assert all(turn.role == t.metadata["seat"] for turn in t.turns)
        assert sorted(len(g) for g in groups.values()) == [2] * 4  # per seat and opening, the group's size
        # the guard compared what the learner trained with what each seat's policy sampled
        assert row["guard_token_mismatch"] == 0 and row["guard_violations"] == 0 and row["guard_partial_groups"] == 0
        assert row["logp_diff_max"] < 1e-4 and row["guard_unversioned_tokens"] == 0
        assert {"seat_x_win", "seat_o_loss", "seat_x_invalid_moves", "win_rate", "opponent_version"} <= set(row)
    assert {"eval_success", "eval_win_rate", "eval_loss_rate", "eval_invalid_moves_mean"} <= set(history[-1])
    report = json.loads((tmp_path / "eval" / "step-2" / "metrics.json").read_text())
    assert report["opponent"] == "random" and report["env_kwargs"]["split"] == "test"


def test_against_a_frozen_player_only_the_policys_seat_trains_in_turn(tmp_path, trainer):
    tr = trainer(config(tmp_path, multi_agent={"opponent": "random", "eval_opponent": "perfect"}))
    tr.train()
    for step in (1, 2):
        trajs = episodes(tmp_path, step)
        assert len(trajs) == 4 and all(t.metadata["opponent"] == "random" for t in trajs)
        for group in {t.group_id for t in trajs}:  # a whole group plays one seat
            assert len({t.metadata["seat"] for t in trajs if t.group_id == group}) == 1
        assert {t.metadata["seat"] for t in trajs} == {"x", "o"}  # in turn by task and step
    only_x = trainer(
        config(
            tmp_path / "x",
            steps=1,
            multi_agent={"opponent": "random", "train_seats": ["x"], "eval_opponent": "perfect"},
        )
    )
    only_x.train()
    assert {t.metadata["seat"] for t in episodes(tmp_path / "x", 1)} == {"x"}


def test_games_from_the_empty_board_train_and_evaluate(tmp_path, trainer):
    """max_opening 0: one starting state, the empty board, in training and in the held-out games (held out then by
    the opponent only)."""
    history = trainer(
        config(tmp_path, steps=1, env={"id": "turnrl/TicTacToe-v0", "kwargs": {"max_opening": 0}})
    ).train()
    assert [int(h["step"]) for h in history if "eval_success" in h] == [0, 1]
    trajs = episodes(tmp_path, 1)
    assert trajs and all("starts from this position" not in m.content for t in trajs for m in t.prompt)
    report = json.loads((tmp_path / "eval" / "step-1" / "metrics.json").read_text())
    assert report["episodes"] == 4 and report["env_kwargs"] == {"max_opening": 0, "split": "test"}
    assert report["opponent"] == "random"


def test_the_league_enters_versions_by_its_rules_and_plays_them_frozen(tmp_path, trainer):
    league = League(LeagueConfig(size=2, every=2, latest=0.0), seed=0)
    model = torch.nn.Linear(2, 2)
    assert league.enter(0, 0, model) and not league.enter(1, 1, model) and not league.enter(2, 0, model)
    assert league.enter(2, 2, model) and league.enter(4, 4, model) and league.versions() == [2, 4]
    assert all(league.draw(s) == league.draw(s) for s in range(10)) and {league.draw(s) for s in range(20)} == {0, 1}
    assert League(LeagueConfig(latest=1.0), 0).draw(3) is None

    cfg = config(
        tmp_path, steps=3, multi_agent={"opponent": "league", "league": {"size": 2, "every": 1, "latest": 0.0}}
    )
    tr = trainer(cfg)
    history = tr.train()
    runner = tr.source.runner
    assert runner.opponents.league.versions() == [1, 2]  # v0 entered before step 0 and left at step 2
    assert [h["league_size"] for h in history[1:]] == [1, 2, 2]
    assert history[1]["opponent_version"] == 0
    frozen = runner.opponents._past.agent.model
    played = int(history[3]["opponent_version"])
    snapshot = dict(runner.opponents.league.pool)[played]
    with torch.no_grad():  # the live policy moves on; the frozen copy shares none of its weights
        for p in tr.model.parameters():
            p.add_(1.0)
    for name, p in frozen.named_parameters():  # it holds the snapshot it played
        assert torch.equal(p, snapshot[name]) and not p.requires_grad
    for step in (1, 2, 3):  # one trained view per game: the policy's seat
        trajs = episodes(tmp_path, step)
        assert len(trajs) == 4 and all(t.metadata["opponent"].startswith("league:v") for t in trajs)


def test_a_resumed_league_run_ends_like_an_uninterrupted_one(tmp_path, trainer):
    over = {
        "steps": 3,
        "algorithm": {"name": "ppo"},  # a critic: every step moves the weights
        "multi_agent": {"opponent": "league", "league": {"size": 2, "every": 1, "latest": 0.5}},
    }
    whole = trainer(config(tmp_path / "whole", **over))
    start = weights(whole.model)
    whole.train()
    assert any(not torch.equal(start[n], p) for n, p in whole.model.named_parameters())
    first = trainer(config(tmp_path / "cut", **over))
    first.train(stop_after=2)
    first.save(tmp_path / "cut" / "checkpoint.pt")
    again = trainer(config(tmp_path / "cut", **over), seed=7)  # other starting weights: the checkpoint restores all
    again.load(tmp_path / "cut" / "checkpoint.pt")
    again.train()
    for name, p in whole.model.named_parameters():
        assert torch.allclose(p, dict(again.model.named_parameters())[name], atol=1e-6), name
    assert again.source.runner.opponents.league.versions() == whole.source.runner.opponents.league.versions()
    key = ("opponent_version", "seat_x_reward", "seat_o_reward", "loss")
    assert [[h.get(k) for k in key] for h in again.history[1:]] == [[h.get(k) for k in key] for h in whole.history[1:]]


def test_a_lora_league_keeps_the_adapters_alone(tmp_path, trainer):
    cfg = config(
        tmp_path,
        steps=2,
        learner={"lora": {"r": 2, "target_modules": ["q_proj", "v_proj"]}},
        multi_agent={"opponent": "league", "league": {"every": 1, "latest": 0.0}},
    )
    tr = trainer(cfg)
    history = tr.train()
    pool = tr.source.runner.opponents.league.pool
    assert pool and all(all("lora_" in name for name in w) for _, w in pool)
    assert history[2]["guard_violations"] == 0 and history[2]["opponent_version"] >= 0


@pytest.mark.parametrize(
    "algorithm",
    [{"name": "rloo"}, {"name": "dapo", "dynamic_sampling": False}, {"name": "ppo"}, {"name": "reinforce++"}],
)
def test_the_on_policy_algorithms_train_a_game(tmp_path, algorithm, trainer):
    history = trainer(config(tmp_path, steps=1, algorithm=algorithm)).train()
    assert history[1]["guard_violations"] == 0 and history[1]["trained_episodes"] > 0


def test_bad_multi_agent_runs_fail_before_a_model_loads(tmp_path):
    with pytest.raises(ValueError, match="names 'z', which turnrl/TicTacToe-v0 does not have; its seats: x, o"):
        Trainer(config(tmp_path, multi_agent={"train_seats": ["z"]}))
    with pytest.raises(ValueError, match="eval_seat names 'q'"):
        Trainer(config(tmp_path, multi_agent={"eval_seat": "q"}))
    with pytest.raises(ValueError, match="is an environment with one agent"):
        config(tmp_path, env={"id": "turnrl/Arithmetic-v0"}, multi_agent={})
    with pytest.raises(ValueError, match="policy name 'a::b'"):
        config(tmp_path, multi_agent={"policies": {"a::b": {"seats": ["x"]}, "B": {"seats": ["o"]}}})
    with pytest.raises(ValueError, match="on placement ray plays its games synchronously: rollout.max_staleness"):
        config(tmp_path, placement="ray", rollout={"max_staleness": 1})
    with pytest.raises(ValueError, match="several trainable policies .* play on HF rollout workers"):
        config(
            tmp_path,
            placement="ray",
            ray={"rollout_backend": "vllm", "rollout_workers": 1},
            multi_agent={"policies": {"A": {"seats": ["x"]}, "B": {"seats": ["o"]}}},
        )
    with pytest.raises(ValueError, match="native rollouts"):
        config(tmp_path, learner={"backend": "deepspeed"}, placement="ray")
    with pytest.raises(ValueError, match="on-policy algorithm that plays whole games"):
        config(tmp_path, algorithm={"name": "sft"}, data={"path": "x.parquet"})
    with pytest.raises(ValueError, match="game's own rules"):
        config(tmp_path, reward={"default": "rule"})
    import socket

    with socket.socket() as s:  # a port on 127.0.0.1 that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ValueError, match=f"the endpoint http://127.0.0.1:{port}/v1 does not answer"):
        Trainer(config(tmp_path, multi_agent={"opponent": f"openai:http://127.0.0.1:{port}/v1#m"}))
    with pytest.raises(ValueError, match="is not a run folder"):
        Trainer(config(tmp_path / "run", multi_agent={"eval_opponent": f"run:{tmp_path / 'nothing'}"}))
    with pytest.raises(ValueError, match="'random' is a tic-tac-toe player and turnrl/SolverCritic-v0 is another"):
        Trainer(config(tmp_path, env={"id": "turnrl/SolverCritic-v0"}, multi_agent={"eval_opponent": "random"}))
    with pytest.raises(ValueError, match="opponent smollm2-135m-instuct: .*did you mean"):
        Trainer(config(tmp_path, multi_agent={"opponent": "smollm2-135m-instuct"}))
    with pytest.raises(ValueError, match="held-out games need a fixed one"):
        config(tmp_path, multi_agent={"eval_opponent": "league"})


def two_policies(out, **over):
    ma = {"policies": {"X": {"seats": ["x"]}, "O": {"seats": ["o"]}}}
    return config(
        out,
        algorithm={"name": "ppo"},
        learner={"lora": {"r": 2, "target_modules": ["q_proj", "v_proj"]}},
        multi_agent=ma,
        **over,
    )


def seat_logprobs(model, traj, temperature=1.5):
    """The model's log-probabilities of the tokens a seat sampled (at the sampling temperature), and the rollout's."""
    ids = torch.tensor([traj.token_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float() / temperature, -1).gather(-1, ids[0, 1:, None])[:, 0]
    mask = torch.tensor(traj.loss_mask[1:], dtype=torch.bool)
    return logp[mask], torch.tensor([0.0 if x is None else x for x in traj.logprobs[1:]])[mask]


def test_separate_lora_policies_each_train_their_own_seats_on_one_base(tmp_path, trainer):
    tr = trainer(two_policies(tmp_path, steps=1))
    x, o = tr.policies["X"].model, tr.policies["O"].model
    with torch.no_grad():  # the two adapters differ from the start, so that a swapped one would show
        for name, p in o.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    frozen = [(n, p) for n, p in x.named_parameters() if not p.requires_grad]
    assert frozen and all(p.data_ptr() == dict(o.named_parameters())[n].data_ptr() for n, p in frozen)  # one base
    base = {n: p.clone() for n, p in frozen}
    before = {k: weights(m) for k, m in (("X", x), ("O", o))}
    history = tr.train()
    row, trajs = history[1], episodes(tmp_path, 1)
    assert {(t.metadata["seat"], t.metadata["policy"]) for t in trajs} == {("x", "X"), ("o", "O")}
    assert {"X/loss", "O/loss", "X/logp_diff_max", "O/policy_version"} <= set(row) and row["guard_violations"] == 0
    # each seat's tokens were sampled by its own policy: its learner scores them as sampled, the other would not
    assert row["X/logp_diff_max"] < 1e-4 and row["O/logp_diff_max"] < 1e-4
    o_game = next(t for t in trajs if t.metadata["policy"] == "O" and sum(t.loss_mask or []) > 0)
    for name, m in (("X", x), ("O", o)):  # the weights that sampled, each policy's own
        old = copy.deepcopy(m)
        with torch.no_grad():
            for n, p in old.named_parameters():
                p.copy_(before[name][n])
        got, sampled = seat_logprobs(old, o_game)
        gap = float((got - sampled).abs().max())
        assert gap < 1e-4 if name == "O" else gap > 1e-2, (name, gap)
    for name, m in (("X", x), ("O", o)):
        after = weights(m)
        moved = [n for n in after if not torch.equal(before[name][n], after[n])]
        assert moved and all("lora_" in n for n in moved), name  # its own adapters, and only they
    assert all(torch.equal(p, base[n]) for n, p in frozen)
    assert tr.learner.versions() == {"X": 1, "O": 1}
    assert json.loads((tmp_path / "eval" / "step-1" / "metrics.json").read_text())["episodes"] == 4


def test_policy_names_are_free_a_policy_named_like_the_rollouts_own_trains_its_seats(tmp_path, trainer):
    """ "opponent" and "policy" are the names the source gives a frozen opponent and the trained policy: a run's own
    policies may be called so, and each trains on its own seats."""
    cfg = config(
        tmp_path,
        steps=1,
        algorithm={"name": "ppo"},
        learner={"lora": {"r": 2, "target_modules": ["q_proj", "v_proj"]}},
        multi_agent={"policies": {"opponent": {"seats": ["x"]}, "policy": {"seats": ["o"]}}},
    )
    tr = trainer(cfg)
    before = {name: weights(agent.model) for name, agent in tr.policies.items()}
    tr.train()
    trained = {(t.metadata["seat"], t.metadata["policy"]) for t in episodes(tmp_path, 1) if sum(t.loss_mask or [])}
    assert trained == {("x", "opponent"), ("o", "policy")}
    for name, agent in tr.policies.items():
        after = weights(agent.model)
        assert any(not torch.equal(before[name][n], after[n]) for n in after), name


def test_one_policys_bad_log_probs_among_good_ones_fire_the_guard(tmp_path, monkeypatch, caplog, trainer):
    """Policy O's sampler reports log-probabilities 1.6e-3 nats off (over the guard's 1e-3 mean tolerance, under its
    max one); X's are right. A mean over both policies would hide it (O brings the fewer tokens): the guard holds each
    policy's own figures, and the figures over both are over all their tokens."""
    from turnrl.rl.sources.multi import MultiAgentRunner

    real = MultiAgentRunner.run

    def off(self, jobs):
        trajs, info = real(self, jobs)
        for t in trajs:
            if t.metadata["policy"] == "O" and t.logprobs:
                t.logprobs = [lp - 1.6e-3 if m else lp for lp, m in zip(t.logprobs, t.loss_mask)]
        return trajs, info

    monkeypatch.setattr(MultiAgentRunner, "run", off)
    with caplog.at_level(logging.WARNING, logger="turnrl.rl.run.guard"):
        row = trainer(two_policies(tmp_path, steps=1)).train()[1]
    assert row["guard_violations"] == 1 and row["O/logp_diff_lag0"] > 1e-3 > row["X/logp_diff_lag0"]
    assert any("consistency check 'logp' failed: policy 'O'" in r.getMessage() for r in caplog.records)
    assert row["lag0_tokens"] == row["X/lag0_tokens"] + row["O/lag0_tokens"]
    want = (row["X/logp_diff_lag0"] * row["X/lag0_tokens"] + row["O/logp_diff_lag0"] * row["O/lag0_tokens"]) / row[
        "lag0_tokens"
    ]
    assert row["logp_diff_lag0"] == pytest.approx(want) and row["guard_logp_gap"] == pytest.approx(want)


def test_a_resumed_run_restores_every_policy(tmp_path, trainer):
    whole = trainer(two_policies(tmp_path / "whole", steps=2))
    whole.train()
    cut = trainer(two_policies(tmp_path / "cut", steps=2))
    cut.train(stop_after=1)
    cut.save(tmp_path / "cut" / "checkpoint.pt")
    state = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=False)
    assert set(state["policies"]) == {"X", "O"} and all("optimizer" in v for v in state["policies"].values())
    again = trainer(two_policies(tmp_path / "cut", steps=2))  # fresh adapters on the run's base model
    again.load(tmp_path / "cut" / "checkpoint.pt")
    again.train()
    for name in ("X", "O"):
        a, b = weights(whole.policies[name].model), weights(again.policies[name].model)
        assert all(torch.allclose(a[n], b[n], atol=1e-6) for n in a), name
        assert any(float(b[n].abs().max()) > 0 for n in b if "lora_B" in n)  # trained adapters (fresh ones are 0)
    one = trainer(config(tmp_path / "one", steps=1))
    with pytest.raises(ValueError, match="holds policies"):
        one.load(tmp_path / "cut" / "checkpoint.pt")
    # one policy of the run, as an agent (its adapters merged into the base): run:OUT_DIR#POLICY
    from turnrl.agents import make_agent

    (tmp_path / "whole" / "config.yaml").write_text(
        (tmp_path / "whole" / "config.yaml").read_text().replace("model: tiny", "model: tiny:chatml")
    )
    whole.save(tmp_path / "whole" / "checkpoint.pt")
    o = make_agent(f"run:{tmp_path / 'whole'}#O")
    ids = torch.tensor([[1, 5, 9, 13, 2, 7]])
    with torch.no_grad():
        want = whole.policies["O"].model(ids).logits
        assert torch.allclose(o.model(ids).logits, want, atol=1e-4)
        assert not torch.allclose(whole.policies["X"].model(ids).logits, want, atol=1e-4)
    with pytest.raises(ValueError, match=r"holds several policies \(O, X\): name one, as .*#O"):
        make_agent(f"run:{tmp_path / 'whole'}")
    with pytest.raises(ValueError, match="has no policy 'Z'; it holds O, X"):
        make_agent(f"run:{tmp_path / 'whole'}#Z")


def test_bad_policy_maps_are_refused_before_a_model_loads(tmp_path):
    def cfg(**ma):
        return config(tmp_path, multi_agent=ma)

    with pytest.raises(ValueError, match="names one policy"):
        cfg(policies={"A": {"seats": ["x", "o"]}})
    with pytest.raises(ValueError, match="played by two policies"):
        cfg(policies={"A": {"seats": ["x"]}, "B": {"seats": ["x", "o"]}})
    with pytest.raises(ValueError, match="no opponent to set"):
        cfg(policies={"A": {"seats": ["x"]}, "B": {"seats": ["o"]}}, opponent="league")
    with pytest.raises(ValueError, match="names 'z', which turnrl/TicTacToe-v0 does not have"):
        Trainer(cfg(policies={"A": {"seats": ["x"]}, "B": {"seats": ["z"]}}))
    from turnrl.rl.config import MultiAgentConfig, PolicyConfig
    from turnrl.rl.sources.multi import seats_of

    half = cfg()  # a map that leaves a seat out (validation alone cannot make one with a two-seat game)
    half.multi_agent = MultiAgentConfig.model_construct(policies={"A": PolicyConfig(seats=["x"])})
    with pytest.raises(ValueError, match="seat 'o' of turnrl/TicTacToe-v0 is mapped to no policy"):
        seats_of(half.env, half.multi_agent)


def test_a_rollout_worker_samples_each_seat_with_its_own_policys_adapters(tmp_path, trainer):
    """A Ray rollout worker (the actor's class, in this process) with two LoRA policies: every seat's tokens are its
    own policy's samples — scored under the other policy they would not match — and pushed weights land each in its
    own policy (a worker that swapped adapters fails both)."""
    import copy

    from turnrl.rl.placement.worker import RolloutWorker
    from turnrl.rl.sources.base import Job

    tr = trainer(two_policies(tmp_path / "driver"))
    models = {name: agent.model for name, agent in tr.policies.items()}

    def draw_adapters(seed):
        with torch.no_grad():
            for i, model in enumerate(models.values()):
                g = torch.Generator().manual_seed(seed + i)
                for name, p in model.named_parameters():
                    if "lora_B" in name:
                        p.copy_(torch.randn(p.shape, generator=g) * 0.5)

    draw_adapters(0)
    worker = RolloutWorker(two_policies(tmp_path / "worker", placement="ray").model_dump(), None, batch_size=8)
    worker.setup([copy.deepcopy(tr.learner.worker_models())], [tr.tokenizer])
    assert set(worker.policies) == {"X", "O"}
    base = [n for n, p in worker.policies["X"].model.named_parameters() if not p.requires_grad]
    shared = dict(worker.policies["O"].model.named_parameters())
    assert all(dict(worker.policies["X"].model.named_parameters())[n].data_ptr() == shared[n].data_ptr() for n in base)
    games = [views for _, _, views in worker.run(0, [Job(0, 0, t, s) for t in range(4) for s in range(2)], 0, [None])]
    views = [v for game in games for v in game if v.token_ids is not None]  # (a seat the game ended before: none)
    assert len(games) == 8 and {(v.metadata["seat"], v.metadata["policy"]) for v in views} == {("x", "X"), ("o", "O")}
    for view in views:
        own = view.metadata["policy"]
        other = "O" if own == "X" else "X"
        mine, sampled = seat_logprobs(models[own], view)
        assert torch.allclose(mine, sampled, atol=1e-4), own
        theirs, _ = seat_logprobs(models[other], view)
        assert (theirs - sampled).abs().max() > 1e-2, own  # the other adapters would have sampled otherwise
    draw_adapters(100)  # the learners' next weights: each policy's adapters, in one push
    version, state = tr.learner.export_for_workers(lambda s: s)
    assert worker.set_weights(version + 1, [state]) == version + 1
    for name, model in models.items():
        got = dict(worker.policies[name].model.named_parameters())
        assert all(torch.equal(got[n], p) for n, p in model.named_parameters() if "lora_" in n), name
