"""The run-level hybrid reward (issue 34, ``reward:``): tasks are routed to their environment's rule or to a
generative judge, the judge's verdict replaces the reward and the rule's stays beside it, failures are reported
instead of trained on, and settings that cannot work fail before a model loads."""

import re

import pytest
import toy_envs  # noqa: F401 — registers the toy environments

import turnrl
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_tokenizer
from turnrl.rl.config.rewards import RewardConfig
from turnrl.rl.run.trainer import TrainConfig, Trainer
from turnrl.rl.sources.base import Job
from turnrl.rl.sources.reward import RunReward, reward_metrics
from turnrl.types import Message, Trajectory, Turn
from turnrl.verifiers.judge import rule_applies

TOK = tiny_tokenizer("chatml")
ARITH = {"id": "turnrl/Arithmetic-v0", "kwargs": {"level": 1, "size": 4}, "name": "arith"}
CAPS = {"id": "tests/Capitals-v0", "name": "capitals"}


def mixed():
    """Index 0, 2, 4, 6: arithmetic; 1, 3, 5, 7: capitals."""
    return turnrl.make("turnrl/Mixture-v0", envs=[ARITH, CAPS])


def fair_judge(prompt: str) -> str:
    """A scripted judge that says YES exactly when the answer equals the key."""
    gold = re.search(r"answer key says: (.*)", prompt).group(1).strip()
    said = re.search(r"My answer is: (.*)", prompt).group(1).strip()
    return "Compared.\nYES" if said.rstrip(".").lower() == gold.lower() else "Compared.\nNO"


def episode(task: int, reply: str, reward: float, correct: bool | None, *, terminated=True, sample=0):
    turn = Turn(
        index=0,
        action=Message(role="assistant", content=reply),
        reward=reward,
        terminated=terminated,
        info={"correct": correct},
    )
    return Trajectory(
        turns=[turn], terminated=terminated, truncated=not terminated, metadata={"job": Job(0, 0, task, sample).key}
    )


def bound(env=None, agent=None, **cfg):
    reward = RunReward(RewardConfig(**cfg), env or mixed())
    reward.attach(agent if agent is not None else ScriptedAgent(TOK, fair_judge))
    return reward


def test_auto_routes_numbers_to_the_rule_and_text_to_the_judge():
    reward = bound()
    assert [reward.route(i) for i in range(4)] == ["rule", "judge", "rule", "judge"]
    assert rule_applies("42") and rule_applies("\\frac{1}{2}") and rule_applies("-3.5")
    assert not rule_applies("Paris") and not rule_applies("1984 film") and not rule_applies("")


def test_the_judge_replaces_the_reward_of_judged_tasks_and_keeps_the_rules_beside_it():
    agent = ScriptedAgent(TOK, fair_judge)
    reward = bound(agent=agent)
    trajs = [
        episode(0, "The answer is 7.", 1.0, True),  # arithmetic: the rule's reward stays
        episode(1, "paris.", 0.0, False),  # capitals: the rule missed it, the judge credits it
        episode(3, "Kyoto", 1.0, True),  # a rule that paid wrongly: the judge says NO
        episode(5, "Lima", 0.0, None, terminated=False),
    ]  # cut before answering: not judged, keeps its 0
    reward.apply(trajs)
    assert len(agent.calls) == 1 and len(agent.calls[0]) == 2  # one batch, judged episodes only
    a, b, c, d = trajs
    assert (a.total_reward, a.turns[-1].info["reward_source"]) == (1.0, "rule")
    assert (b.total_reward, b.correct, b.turns[-1].info["rule_reward"], b.turns[-1].info["judge_label"]) == (
        1.0,
        True,
        0.0,
        "YES",
    )
    assert (c.total_reward, c.correct, c.turns[-1].info["rule_correct"]) == (0.0, False, True)
    assert d.total_reward == 0.0 and d.turns[-1].info["reward_source"] == "rule"
    m = reward_metrics(trajs)
    assert m["reward_judged"] == 0.5 and m["reward_judge_mean"] == 0.5 and m["reward_rule_mean"] == 0.5
    assert m["reward_judge_agreement"] == 0.0 and m["reward_judge_unparseable"] == 0.0


def test_the_judge_reads_the_tasks_question_and_reference():
    seen = []
    reward = bound(agent=ScriptedAgent(TOK, lambda p: seen.append(p) or "NO"))
    reward.apply([episode(3, "Tokyo", 1.0, True)])
    assert "capital of Japan" in seen[0] and "answer key says: Tokyo" in seen[0] and "My answer is: Tokyo" in seen[0]


def test_routes_by_member_override_auto_and_the_default():
    assert [bound(route={"capitals": "rule"}).route(i) for i in range(2)] == ["rule", "rule"]
    assert [bound(route={"arith": "judge"}).route(i) for i in range(2)] == ["judge", "judge"]
    assert [bound(default="judge", route={"arith": "rule"}).route(i) for i in range(2)] == ["rule", "judge"]
    nothing_judged = RunReward(RewardConfig(default="rule"), mixed())
    nothing_judged.attach(None)  # no judge is built when no task can reach it
    trajs = [episode(1, "Paris", 1.0, True)]
    nothing_judged.apply(trajs)
    assert reward_metrics(trajs) == {"reward_judged": 0.0, "reward_rule_mean": 1.0}


def test_an_unreadable_judgement_pays_nothing_and_a_failing_judge_is_reported_not_trained_on():
    vague = bound(agent=ScriptedAgent(TOK, lambda p: "Probably YES, it looks fine"))
    trajs = [episode(1, "Paris", 1.0, True)]
    vague.apply(trajs)
    assert trajs[0].total_reward == 0.0 and reward_metrics(trajs)["reward_judge_unparseable"] == 1.0

    def broken(prompt):
        raise ConnectionError("judge server went away")

    failing = bound(agent=ScriptedAgent(TOK, broken))
    trajs = [episode(1, "Paris", 1.0, True), episode(0, "7", 1.0, True)]
    failing.apply(trajs)
    assert "judge server went away" in trajs[0].error and trajs[1].error is None
    m = reward_metrics(trajs)
    assert m["reward_judge_failed"] == 1.0 and "reward_judge_mean" not in m and m["reward_judged"] == 0.5


def test_the_policy_judge_forgets_its_judgements_between_rounds():
    replies = iter(["NO", "YES"])
    reward = bound(agent=ScriptedAgent(TOK, lambda p: next(replies)))
    first, second = [episode(1, "Paris", 1.0, True)], [episode(1, "Paris", 1.0, True)]
    reward.apply(first)
    reward.apply(second)  # same question and answer, new weights: asked again
    assert (first[0].total_reward, second[0].total_reward) == (0.0, 1.0)


def test_a_long_reply_is_cut_from_the_front():
    reward = bound(max_prediction_chars=20)
    item = reward.item(episode(1, "x" * 100 + " so the answer is Paris", 0.0, False))
    assert item["prediction"].endswith("answer is Paris") and len(item["prediction"]) == 21


# ---- settings that cannot work ----


def run_config(tmp_path, **extra):
    return TrainConfig.model_validate(
        {
            "model": "tiny",
            "env": {"id": "tests/Capitals-v0"},
            "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4},
            "optim": {"lr": 1e-2, "minibatch_size": 4},
            "steps": 2,
            "eval_tasks": 2,
            "out_dir": str(tmp_path),
            **extra,
        }
    )


def test_bad_reward_specs_fail_before_a_model_loads(tmp_path):
    with pytest.raises(ValueError, match="does not score fresh episodes"):
        TrainConfig.model_validate(
            {
                "env": {"id": "tests/Capitals-v0"},
                "algorithm": {"name": "sft"},
                "data": {"path": "x.jsonl"},
                "reward": {"judge": "policy"},
            }
        )
    with pytest.raises(ValueError, match="only the fields"):
        RewardConfig(template="Q: {question} A: {answer}")
    with pytest.raises(ValueError, match=r"\{prediction\}"):
        RewardConfig(template="Is {gold} right? YES or NO")
    with pytest.raises(ValueError, match="route"):
        RewardConfig(route={"capitals": "maybe"})
    # no model is given: these fail while the source is built, before the model would load
    with pytest.raises(ValueError, match=r"does not have.*arith, capitals"):
        Trainer(
            run_config(
                tmp_path,
                env={"id": "turnrl/Mixture-v0", "kwargs": {"envs": [ARITH, CAPS]}},
                reward={"route": {"hotpotqa": "judge"}},
            )
        )
    with pytest.raises(ValueError, match="task_at"):
        Trainer(run_config(tmp_path, env={"id": "tests/ToyPAG-v0"}, reward={"default": "judge"}))


# ---- in a run ----


def test_a_run_scores_its_episodes_with_a_separate_judge_model(tmp_path, one_thread, trainer_of):
    tok = tiny_tokenizer("chatml")
    cfg = run_config(tmp_path, reward={"judge": "tiny:chatml", "default": "judge", "max_new_tokens": 4})
    trainer = trainer_of(cfg, tok)
    history = trainer.train()
    assert all(h["reward_judged"] == 1.0 for h in history[1:])
    # an untrained judge writes no YES/NO line: every judgement is unreadable and pays 0, whatever the rule said
    assert history[1]["reward_judge_unparseable"] == 1.0 and history[1]["reward_judge_mean"] == 0.0
    assert trainer.source.reward.agent is not trainer.agent
    saved = (tmp_path / "train" / "step-1" / "trajectories.jsonl").read_text()
    assert '"reward_source":"judge"' in saved.replace(" ", "")


def test_the_policy_judges_with_the_learners_own_model(tmp_path, trainer_of):
    tok = tiny_tokenizer("chatml")
    trainer = trainer_of(run_config(tmp_path, reward={"judge": "policy"}), tok)
    assert trainer.source.reward.agent is trainer.agent
