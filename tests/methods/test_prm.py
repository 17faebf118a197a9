"""PRM for code (issue 34): line labels by binary search on scripted suites and on the real sandbox, the dense reward
forms (and what a policy could farm from each), the process reward model's training and its use as PPO's critic
start and dense rewards, and settings that cannot work."""

import math
import re

import pytest
import torch
import toy_envs  # noqa: F401 — registers the toy environments

import turnrl
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.methods.prm.labels import PRMDataError, check_env, label_episodes, label_prefixes
from turnrl.methods.prm.model import ProcessRewardModel, dense_rewards, line_ends, load_into, targets
from turnrl.rl.algorithms.base import CriticSpec
from turnrl.rl.core.extra_models import build_models
from turnrl.rl.run.trainer import TrainConfig, Trainer
from turnrl.rl.sources.base import Job
from turnrl.rollout.play import Playing, play
from turnrl.types import SamplingParams

TOK = tiny_tokenizer("chatml")
FN = "turnrl/Functions-v0"


# ---- labels ----


@pytest.mark.parametrize("n, last_positive", [(1, -1), (1, 0), (5, -1), (5, 0), (5, 2), (5, 4), (8, 6), (13, 3)])
def test_binary_search_finds_the_last_positive_line_in_few_probes(n, last_positive):
    asked = []

    def passes_from(i):
        asked.append(i)
        return i <= last_positive

    labels, probes = label_prefixes(n, False, passes_from)
    assert labels == [1] * (last_positive + 1) + [0] * (n - last_positive - 1)
    assert probes == len(asked) <= math.ceil(math.log2(n + 1))


def test_a_passing_reply_is_positive_everywhere_without_sampling():
    assert label_prefixes(4, True, lambda i: pytest.fail("no probe for a passing reply")) == ([1, 1, 1, 1], 0)


def prover(fix: str):
    """Completes a prefix that stops right after the ``def`` line with the right body; anything later with nothing."""

    def complete(prompt: str) -> str:
        tail = prompt.split("<|im_start|>assistant\n")[-1]
        return f"    return {fix}\n```" if tail.rstrip(" ").endswith("):\n") else "\n```"

    return complete


def episode(reply: str, task: int = 0):
    agent = ScriptedAgent(TOK, lambda p: reply)
    how = Playing(SamplingParams(temperature=0.0, max_new_tokens=200), max_context=2048, env_timeout=30)
    trajs, _ = play(agent, FN, {"split": "test"}, [Job(0, 0, task, 0)], seed=0, how=how)
    return trajs[0]


def test_labels_on_the_real_sandbox_mark_where_a_reply_went_wrong():
    env = turnrl.make(FN, split="test")
    task = env.unwrapped.task_at(0)  # add: return x + K
    k = re.search(r"plus (\d+)", task.prompt).group(1)
    wrong = episode("```python\ndef add(x):\n    y = x - 1\n    return y\n```")
    right = episode(f"```python\ndef add(x):\n    return x + {k}\n```")
    assert (wrong.correct, right.correct) == (False, True)
    agent = ScriptedAgent(TOK, prover(f"x + {k}"))
    labeled, m = label_episodes([wrong, right], agent, env, completions=2)
    ends = [line_ends(t.token_ids, t.turns[0].token_span, TOK) for t in (wrong, right)]
    texts = [
        [TOK.decode(t.token_ids[t.turns[0].token_span[0] : i + 1]) for i in e] for t, e in zip((wrong, right), ends)
    ]
    assert [s.splitlines()[-1] for s in texts[0]] == ["```python", "def add(x):", "    y = x - 1", "    return y"]
    assert [y for _, y in labeled[0].metadata["prm_labels"]] == [1, 1, 0, 0]  # after "def add(x):" it could pass
    assert [y for _, y in labeled[1].metadata["prm_labels"]] == [1, 1, 1]
    assert labeled[0].metadata["prm_outcome"] == 0 and labeled[1].metadata["prm_outcome"] == 1
    assert m["rescued"] == 1 and m["passing_episodes"] == 1 and m["probes"] == 2  # log2(4 + 1) rounded down
    assert m["completions_sampled"] == 4
    assert targets(labeled[0])[-1] == (wrong.turns[0].token_span[1] - 1, 0.0)  # the outcome on the last token


def test_comment_lines_are_neutral():
    reply = "```python\n# add the constant\ndef f(x):\n    # here\n    return x\n```"
    ids = [*TOK.encode(reply), TOK.eos_token_id]
    lines = [TOK.decode(ids[: i + 1]).splitlines()[-1] for i in line_ends(ids, (0, len(ids)), TOK)]
    assert [ln.strip() for ln in lines] == ["```python", "def f(x):", "return x"]


def test_process_labels_need_an_environment_with_tests():
    with pytest.raises(PRMDataError, match="no tests"):
        check_env(turnrl.make("turnrl/Arithmetic-v0"))
    check_env(turnrl.make(FN))


# ---- dense rewards ----


def test_delta_rewards_sum_to_a_constant_so_extra_lines_earn_nothing():
    good, plain = 0.9, 0.4
    once = dense_rewards([plain, good], 0.3, "delta", 0.5)
    padded = dense_rewards([plain, good, good, good, good], 0.3, "delta", 0.5)
    total = lambda r: sum(r[0]) + r[1]
    assert total(once) == pytest.approx(-0.15) and total(padded) == pytest.approx(-0.15)
    assert once[0] == pytest.approx([0.05, 0.25])  # the line that raised the estimate gets the credit
    value_once, value_padded = (
        dense_rewards([plain, good], 0.3, "value", 0.5),
        dense_rewards([plain, good, good, good, good], 0.3, "value", 0.5),
    )
    assert total(value_once) == pytest.approx(0.5 * 0.65)  # the paper's: coef × the mean score over the lines
    assert total(value_padded) > total(value_once)  # lines that look right still pay (not their count)
    with pytest.raises(ValueError, match="form"):
        dense_rewards([0.1], 0.0, "sum", 1.0)


# ---- the model ----


def labeled_synthetic(n=24):
    """One-reply episodes whose line labels are 1 exactly when the line holds 'ok'."""
    from turnrl.types import Message, Trajectory, Turn

    out = []
    for k in range(n):
        lines = ["ok\n" if (k + j) % 2 else "no\n" for j in range(3)]
        prompt = TOK.encode("<|im_start|>user\nwrite<|im_end|>\n<|im_start|>assistant\n")
        reply = [t for ln in lines for t in TOK.encode(ln)] + [TOK.eos_token_id]
        ids = prompt + reply
        span = (len(prompt), len(ids))
        t = Trajectory(
            turns=[
                Turn(
                    index=0, action=Message(role="assistant", content="".join(lines)), token_span=span, terminated=True
                )
            ],
            terminated=True,
            token_ids=ids,
            loss_mask=[0] * len(prompt) + [1] * len(reply),
            logprobs=[0.0] * len(ids),
        )
        ends = line_ends(ids, span, TOK)
        t.metadata.update(prm_labels=[[i, int(ln.startswith("ok"))] for i, ln in zip(ends, lines)], prm_outcome=0)
        out.append(t)
    return out


def test_the_prm_learns_line_labels_and_a_critic_can_start_as_it(tmp_path):
    torch.manual_seed(0)
    prm = ProcessRewardModel.new("tiny:chatml")
    data = labeled_synthetic()
    before = prm.evaluate(data)["held_mse"]
    prm.train(data, epochs=30, lr=3e-3, batch_size=8, held_out=0.0)
    after = prm.evaluate(data)
    assert after["held_mse"] < 0.5 * before and after["held_line_accuracy"] >= 0.9
    prm.save(tmp_path / "prm")
    again = ProcessRewardModel.load(tmp_path / "prm")
    positions = [[i for i, _ in targets(t)] for t in data[:3]]
    flat = lambda rows: [v for row in rows for v in row]
    assert flat(again.scores(data[:3], positions)) == pytest.approx(flat(prm.scores(data[:3], positions)), abs=1e-6)
    models = build_models(
        type(
            "A",
            (),
            {"needs_reference": False, "critic": lambda self: CriticSpec("tiny:chatml", None, str(tmp_path / "prm"))},
        )(),
        tiny_model(TOK),
        TOK,
    )
    ids = torch.tensor([data[0].token_ids])
    assert torch.allclose(models.critic.after(ids, torch.ones_like(ids)), prm.critic.after(ids, torch.ones_like(ids)))
    with pytest.raises(ValueError, match="trained on 'tiny:chatml'"):
        load_into(models.critic, tmp_path / "prm", "tiny:llama3")


# ---- in a run ----


def run_config(tmp_path, **extra):
    return TrainConfig.model_validate(
        {
            "model": "tiny",
            "env": {"id": FN, "kwargs": {"split": "train"}},
            "algorithm": {"name": "ppo", "critic_model": "tiny:chatml"},
            "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 24},
            "optim": {"lr": 1e-3, "minibatch_size": 4},
            "steps": 2,
            "eval_tasks": 2,
            "out_dir": str(tmp_path / "run"),
            **extra,
        }
    )


def test_ppo_trains_with_dense_process_rewards_and_a_critic_started_as_the_prm(tmp_path, one_thread, trainer_of):
    torch.manual_seed(0)
    prm = ProcessRewardModel.new("tiny:chatml")
    prm.train(labeled_synthetic(8), epochs=2, lr=1e-3, held_out=0.0)
    prm.save(tmp_path / "prm")
    cfg = run_config(
        tmp_path,
        algorithm={"name": "ppo", "critic_init": str(tmp_path / "prm")},
        process_reward={"model": str(tmp_path / "prm"), "coef": 0.5},
    )
    tok = tiny_tokenizer("chatml")
    trainer = trainer_of(cfg, tok)
    ids = torch.tensor([labeled_synthetic(1)[0].token_ids])
    start = trainer.critic.after(ids, torch.ones_like(ids))
    assert torch.allclose(start, prm.critic.after(ids, torch.ones_like(ids)))  # the critic starts as the PRM
    history = trainer.train()
    assert "process_reward_mean" in history[1] and history[1]["process_rewarded_tokens"] >= 1
    saved = (tmp_path / "run" / "train" / "step-1" / "trajectories.jsonl").read_text()
    assert '"dense_rewards"' in saved


def test_settings_that_cannot_work_fail_before_a_model_loads(tmp_path):
    with pytest.raises(ValueError, match="only an algorithm with a critic"):
        TrainConfig.model_validate({"env": {"id": FN}, "process_reward": {"model": str(tmp_path)}})
    tok = tiny_tokenizer("chatml")
    with pytest.raises(FileNotFoundError, match="holds no process reward model"):  # when the critic is built
        Trainer(
            run_config(tmp_path, algorithm={"name": "ppo", "critic_init": str(tmp_path / "nothing")}),
            model=tiny_model(tok),
            tokenizer=tok,
        )
    with pytest.raises(FileNotFoundError, match="holds no process reward model"):
        Trainer(run_config(tmp_path, process_reward={"model": str(tmp_path / "nothing")}))


def test_dense_rewards_join_the_token_rewards_only_on_generated_tokens():
    t = labeled_synthetic(1)[0]
    span = t.turns[0].token_span
    t.turns[0].reward = 1.0
    t.metadata["dense_rewards"] = [[span[0] + 1, 0.25], [span[1] - 1, -0.5]]
    r = t.token_rewards()
    assert r[span[0] + 1] == 0.25 and r[span[1] - 1] == 0.5 and sum(r) == 0.75 and t.total_reward == 1.0
    t.metadata["dense_rewards"] = [[0, 1.0]]  # a prompt token
    with pytest.raises(ValueError, match="not a generated token"):
        t.token_rewards()
