"""Task samplers and mixtures (issue 34): each strategy's choice rule on scripted pass rates and scores, a resumed
sampler draws what an uninterrupted one draws, mixtures lay out, split and report per member, and bad settings fail
before any model loads."""

import json

import numpy as np
import pytest
import toy_envs  # noqa: F401 — registers the toy environments
from scipy.stats import chisquare
from tiny_trainer import tiny_trainer

import turnrl
from turnrl.envs.builtin.mixture import MixtureError
from turnrl.rl.config.tasks import CurriculumTasks, DifficultyTasks, PrePPOTasks, SequentialTasks, UniformTasks
from turnrl.rl.run.trainer import TrainConfig, Trainer
from turnrl.rl.sources.base import Job, task_jobs
from turnrl.rl.sources.tasks import TaskPool, difficulty_weight, ema_update, make_sampler, select_lowest
from turnrl.types import Message, Trajectory, Turn

ARITH = "turnrl/Arithmetic-v0"


def mixture(*members, **kw):
    return turnrl.make("turnrl/Mixture-v0", envs=list(members), **kw)


def member(name, level=1, size=10, weight=1.0):
    return {"id": ARITH, "kwargs": {"level": level, "size": size}, "name": name, "weight": weight}


def pool(sizes, weights=None):
    member_of = np.concatenate([np.full(s, m) for m, s in enumerate(sizes)])
    return TaskPool([f"m{i}" for i in range(len(sizes))], np.asarray(weights or [1.0] * len(sizes)), member_of)


# ---- the mixture environment ----


def test_members_take_turns_in_the_index_space_and_reset_poses_the_members_task():
    env = mixture(member("a", size=3), member("b", level=3, size=1), member("c", size=2))
    assert len(env) == 6
    assert [env.locate(i) for i in range(6)] == [(0, 0), (1, 0), (2, 0), (0, 1), (2, 1), (0, 2)]
    assert list(env.task_members()) == [env.member_of(i) for i in range(6)]
    obs, info = env.reset(seed=3, options={"index": 1})
    direct = turnrl.make(ARITH, level=3, size=1)
    want, _ = direct.reset(seed=0, options={"index": 0})
    assert obs[-1].content == want[-1].content and info["task_id"].startswith("b:")
    assert env.step(env.oracle_action())[1:3] == (1.0, True)
    with pytest.raises(ValueError, match=r"\[0, 6\)"):
        env.reset(options={"index": 6})


def test_held_out_split_puts_every_member_on_its_own_held_out_split():
    env = mixture(member("a"), {"id": "turnrl/Arithmetic-PAG-v0", "kwargs": {"split": "train"}, "name": "pag"})
    assert env.split == "train" and env.held_out_split == "held-out"
    held = mixture(
        member("a"), {"id": "turnrl/Arithmetic-PAG-v0", "kwargs": {"split": "train"}, "name": "pag"}, split="held-out"
    )
    assert [m.split for m in held._members] == ["test", "test"]
    assert held._members[1].mode == "eval"  # the PAG member's evaluation option
    assert held.split == "held-out"


def test_per_member_figures():
    env = mixture(member("a"), member("b"))
    trajs = []
    for index, correct in ((0, True), (1, False), (2, True), (3, True)):
        env.reset(seed=0, options={"index": index})
        _, _, _, _, info = env.step(env.oracle_action() if correct else env.wrong_action())
        trajs.append(
            Trajectory(
                task_id=env._current_name + ":x",
                turns=[Turn(index=0, action=Message(role="assistant", content=""), info=info)],
            )
        )
    figs = env.summarize_episodes(trajs)
    assert figs["a_success"] == 1.0 and figs["b_success"] == 0.5 and figs["a_episodes"] == 2.0


@pytest.mark.parametrize(
    "members, message",
    [
        ([], "non-empty"),
        ([member("a", weight=0), member("b", weight=0)], "weight 0"),
        ([member("a", weight=-1)], ">= 0"),
        ([member("a"), member("a")], "distinct `name`"),
        ([{"id": ARITH, "weigth": 2}], "unknown keys"),
        ([{"kwargs": {}}], "`id`"),
    ],
)
def test_bad_mixtures_are_clear_errors(members, message):
    with pytest.raises(MixtureError, match=message):
        mixture(*members)


# ---- the choice rules ----


def test_sequential_walks_the_indices_and_members_by_weight():
    one = make_sampler(SequentialTasks(), turnrl.make(ARITH, size=5), seed=0)
    assert [one.tasks(s, 0, 2) for s in range(3)] == [[0, 1], [2, 3], [4, 0]]
    assert one.tasks(1, 0, 2) == [2, 3]  # asked again: the same choice
    two = make_sampler(SequentialTasks(), mixture(member("a", size=50), member("b", size=50, weight=3)), seed=0)
    chosen = [t for s in range(10) for t in two.tasks(s, 0, 4)]
    members = two.pool.member[chosen]
    assert (members == 1).sum() == 30 and len(set(chosen)) == 40  # 3:1 by weight, each member in order


def test_uniform_follows_member_weights():
    s = make_sampler(UniformTasks(), mixture(member("a", size=100), member("b", size=10, weight=3)), seed=1)
    chosen = [t for step in range(400) for t in s.tasks(step, 0, 4)]
    counts = np.bincount(s.pool.member[chosen], minlength=2)
    assert chisquare(counts, [400, 1200]).pvalue > 1e-3
    assert all(len(set(s.tasks(step, 0, 4))) == 4 for step in range(400))  # distinct within a round


def test_difficulty_frequencies_follow_p_times_one_minus_p():
    rates = [0.5, 0.9, 0.0, 0.2]  # scripted pass rates of four tasks
    s = make_sampler(DifficultyTasks(ema=1.0, epsilon=0.05), pool([4]), seed=0)
    s.observe(-1, [(t, float(p > 0.5)) for t, p in enumerate(rates)])  # seen once each ...
    s.task_p = dict(enumerate(rates))  # ... then scripted exactly
    weights = difficulty_weight(np.asarray(rates), 0.05)
    chosen = [t for step in range(3000) for t in s.tasks(step, 0, 1)]
    counts = np.bincount(chosen, minlength=4)
    assert chisquare(counts, weights / weights.sum() * len(chosen)).pvalue > 1e-3
    assert counts[0] > counts[3] > counts[1] > counts[2]


def test_difficulty_tracks_pass_rates_and_gives_unseen_tasks_their_members_rate():
    s = make_sampler(DifficultyTasks(ema=0.5, prior=0.5), pool([3, 3]), seed=0)
    s.observe(0, [(0, 1.0), (0, 1.0), (0, 0.0), (0, 0.0), (3, 0.0), (3, 0.0)])
    assert s.task_p == {0: 0.5, 3: 0.25}  # a new task's first group moves it from the prior by the ema weight
    assert s.member_p == [0.5, 0.0]
    s.observe(1, [(0, 1.0), (4, 0.0)])
    assert s.task_p[0] == ema_update(0.5, 1.0, 0.5) == 0.75
    assert s.task_p[4] == 0.0  # its member's rate (0.0) was its start
    p = s.pass_rates()
    assert p[1] == p[2] == s.member_p[0] and p[5] == s.member_p[1] == 0.0  # unseen tasks: their member's rate
    assert ema_update(None, 0.3, 0.1) == 0.3


def test_pre_ppo_keeps_the_lowest_scored_share():
    sel = select_lowest([5, 6, 7, 8], [(5, 1.0), (6, 0.0), (7, 0.5), (7, 0.0), (8, 1.0)], keep=0.5)
    assert sel.kept == [6, 7] and sel.pool_mean == pytest.approx(0.5625) and sel.kept_mean == 0.125
    s = make_sampler(PrePPOTasks(pool=8, keep=0.25), pool([20]), seed=0)
    scores = {t: t / 20 for t in range(20)}  # a scripted scorer: low index, low score
    asked = []
    figs = s.prepare(lambda tasks, n: asked.extend(tasks) or [(t, scores[t]) for t in tasks])
    assert len(asked) == 8 and figs["preppo_kept"] == 2.0
    assert sorted(s.kept) == sorted(asked)[:2]
    chosen = [t for step in range(4) for t in s.tasks(step, 0, 1)]
    assert sorted(chosen[:2]) == sorted(chosen[2:]) == sorted(s.kept)  # a pass over the kept tasks, then another
    assert s.prepare(lambda *a: pytest.fail("scored twice")) == {}


def test_curriculum_moves_on_by_steps_or_by_success():
    env = mixture(member("easy", size=20), member("mid", size=20), member("hard", size=20))
    cfg = CurriculumTasks(
        stages=[
            {"members": ["easy"], "success": 0.8, "window": 2},
            {"members": ["mid"], "steps": 2},
            {"members": ["hard", "mid"]},
        ]
    )
    s = make_sampler(cfg, env, seed=0)
    stages = []
    for step, ok in enumerate([0.5, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]):
        tasks = s.tasks(step, 0, 3)
        stages.append(({env.names[m] for m in s.pool.member[tasks]}, s.stage))
        s.observe(step, [(t, ok) for t in tasks])
    assert [st for _, st in stages] == [0, 0, 0, 1, 1, 2, 2]
    assert stages[0][0] == {"easy"} and stages[3][0] == {"mid"} and stages[5][0] <= {"hard", "mid"}


def test_curriculum_errors_name_the_problem():
    env = mixture(member("easy"), member("hard"))
    with pytest.raises(ValueError, match=r"names \['medium'\].*\['easy', 'hard'\]"):
        make_sampler(CurriculumTasks(stages=[{"members": ["medium"]}]), env, seed=0)
    with pytest.raises(ValueError, match="Mixture"):
        make_sampler(CurriculumTasks(stages=[{"members": ["easy"]}]), turnrl.make(ARITH), seed=0)
    with pytest.raises(ValueError, match="no switch rule"):
        CurriculumTasks(stages=[{"members": ["easy"]}, {"members": ["hard"]}])


@pytest.mark.parametrize(
    "cfg",
    [
        UniformTasks(),
        DifficultyTasks(),
        SequentialTasks(),
        CurriculumTasks(stages=[{"members": ["a"], "steps": 3}, {"members": ["b"]}]),
    ],
)
def test_a_restored_sampler_draws_the_same_next_tasks(cfg):
    env = mixture(member("a", size=30), member("b", size=30, weight=2))

    def play(s, steps):
        out = []
        for step in steps:
            tasks = s.tasks(step, 0, 4)
            s.tasks(step + 1, 0, 4)  # chosen ahead, as a prefetching runner does
            s.observe(step, [(t, float(t % 3 == 0)) for t in tasks])
            out.append(tasks)
        return out

    whole = play(make_sampler(cfg, env, seed=7), range(8))
    first = make_sampler(cfg, env, seed=7)
    head = play(first, range(4))
    state = json.loads(json.dumps(first.state_dict()))  # through JSON, as a checkpoint keeps it
    resumed = make_sampler(cfg, env, seed=7)
    resumed.load_state_dict(state)
    assert head + play(resumed, range(4, 8)) == whole


def test_a_checkpoint_of_another_strategy_is_refused():
    state = make_sampler(UniformTasks(), pool([4]), 0).state_dict()
    with pytest.raises(ValueError, match="same `tasks:`"):
        make_sampler(DifficultyTasks(), pool([4]), 0).load_state_dict(state)


# ---- in a run ----


def run_config(tmp_path, **extra):
    return TrainConfig.model_validate(
        {
            "model": "tiny",
            "env": {"id": "tests/Upper-v0"},
            "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4},
            "optim": {"lr": 1e-2, "minibatch_size": 4},
            "steps": 4,
            "eval_tasks": 2,
            "out_dir": str(tmp_path),
            **extra,
        }
    )


def choices(path):
    rows = [json.loads(line) for line in (path / "tasks.jsonl").read_text().splitlines()]
    return {(r["step"], r["round"]): r["tasks"] for r in rows}


def test_a_resumed_run_draws_the_tasks_of_an_uninterrupted_one(tmp_path, one_thread):
    tasks = {"strategy": "difficulty", "epsilon": 0.01}
    whole = tiny_trainer(run_config(tmp_path / "whole", tasks=tasks))
    whole.train()
    part = tiny_trainer(run_config(tmp_path / "part", tasks=tasks))
    part.train(stop_after=2)
    part.save(tmp_path / "part" / "ckpt.pt")
    resumed = tiny_trainer(run_config(tmp_path / "part", tasks=tasks))
    resumed.load(tmp_path / "part" / "ckpt.pt")
    history = resumed.train()
    assert choices(tmp_path / "whole") == choices(tmp_path / "part")
    assert len(choices(tmp_path / "whole")) == 4
    assert "sampler_pass_estimate" in history[-1] and history[-1]["sampler_tracked"] >= 2


def test_pre_ppo_scores_its_pool_with_the_runs_policy_before_the_first_step(tmp_path, one_thread):
    t = tiny_trainer(run_config(tmp_path, steps=2, tasks={"strategy": "pre-ppo", "pool": 6, "keep": 0.5}))
    history = t.train()
    assert history[1]["preppo_pool"] == 6 and history[1]["preppo_kept"] == 3
    assert history[1]["preppo_kept_score"] <= history[1]["preppo_pool_score"]
    chosen = {t for tasks in choices(tmp_path).values() for t in tasks}
    assert chosen <= set(t.source.sampler.kept) and len(chosen) == 3


def test_settings_that_cannot_work_fail_before_a_model_loads(tmp_path):
    with pytest.raises(ValueError, match="does not choose its tasks"):
        TrainConfig.model_validate(
            {
                "env": {"id": ARITH},
                "algorithm": {"name": "sft"},
                "data": {"path": "x.jsonl"},
                "tasks": {"strategy": "uniform"},
            }
        )
    with pytest.raises(ValueError, match="strategy"):
        TrainConfig.model_validate({"env": {"id": ARITH}, "tasks": {"strategy": "hardest-first"}})
    with pytest.raises(ValueError, match="Mixture"):  # no model given: the run would load one after the source
        Trainer(run_config(tmp_path, tasks={"strategy": "curriculum", "stages": [{"members": ["x"]}]}))


def test_pre_ppo_rounds_hold_distinct_tasks_across_passes_and_every_pass_covers_the_kept():
    s = make_sampler(PrePPOTasks(pool=10, keep=1.0), pool([10]), seed=3)
    s.prepare(lambda tasks, n: [(t, 0.0) for t in tasks])
    rounds = [s.tasks(step, 0, 4) for step in range(25)]  # 100 tasks: 10 passes, rounds straddle passes
    assert all(len(set(r)) == 4 for r in rounds)
    flat = [t for r in rounds for t in r]
    assert all(sorted(flat[i : i + 10]) == list(range(10)) for i in range(0, 100, 10))


def test_a_task_chosen_twice_in_a_round_gets_distinct_job_keys_and_one_group():
    jobs = task_jobs(2, 0, [5, 7, 5], group_size=2)
    assert [j.key for j in jobs] == ["2-0-5-0", "2-0-5-1", "2-0-7-0", "2-0-7-1", "2-0-5-2", "2-0-5-3"]
    assert len({j.group_id for j in jobs}) == 2
    assert Job.parse("-1-0-12-3") == Job(-1, 0, 12, 3) and Job.parse(jobs[4].key) == jobs[4]


def test_a_mixture_lends_its_current_members_attributes():
    env = mixture(member("a"), {"id": "turnrl/Arithmetic-PAG-v0", "name": "pag"})
    env.reset(seed=0, options={"index": 1})
    assert env.verdict_texts == env._members[1].verdict_texts  # PAG's rollout hooks read it
    env.reset(seed=0, options={"index": 0})
    with pytest.raises(AttributeError):
        env.verdict_texts  # noqa: B018 — the arithmetic member has none


def test_one_run_trains_on_a_mixture_of_environment_kinds_and_reports_each_held_out(tmp_path, one_thread):
    members = [
        {"id": ARITH, "kwargs": {"level": 1, "split": "train"}, "name": "arith"},
        {"id": "turnrl/Functions-v0", "kwargs": {"split": "train"}, "name": "code"},
        {"id": "tests/Capitals-v0", "name": "capitals"},
    ]
    cfg = run_config(
        tmp_path,
        env={"id": "turnrl/Mixture-v0", "kwargs": {"envs": members}},
        steps=2,
        eval_tasks=6,
        rollout={"prompts_per_step": 3, "group_size": 2, "max_new_tokens": 8},
        tasks={"strategy": "uniform"},
    )
    history = tiny_trainer(cfg).train()
    last = history[-1]
    for name in ("arith", "code", "capitals"):  # per member: its held-out figure (2 tasks each) and its task share
        assert 0.0 <= last[f"eval_{name}_success"] <= 1.0 and last[f"eval_{name}_episodes"] == 2.0
    assert sum(last[f"tasks_{n}"] for n in ("arith", "code", "capitals")) == pytest.approx(1.0)
