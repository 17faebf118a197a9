"""PAG (docs/algorithms.md §7) through the registered algorithms: turn-independent GAE, RoleAdvNorm, the ablations,
per-turn GRPO, the PAG metrics and the verdict-collapse monitor."""

import pytest
import torch
import toy_envs  # noqa: F401 — registers tests/ToyPAG-v0
from pydantic import ValidationError
from tiny_trainer import train_tiny

import turnrl
from turnrl.agents.base import Capabilities, SamplingParams
from turnrl.agents.scripted import FixedAgent, ScriptedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.envs.formats.self_verify_metrics import pag_episode, pag_summary
from turnrl.methods.pag.algorithm import balance_verifier_rewards, final_only_rewards, turn_group_advantages
from turnrl.methods.pag.monitors import verdict_collapse
from turnrl.rl.algorithms import get_algorithm, parse_algorithm_config
from turnrl.rl.core.batch import Batch
from turnrl.rl.run.evaluate import evaluate
from turnrl.rl.run.monitors import check_health, registered_monitors
from turnrl.rl.run.trainer import TrainConfig
from turnrl.rollout.engine import Rollout

MASK = [1, 1, 1, 0, 1, 1, 0, 1, 1]  # answer, template, verify, template, revise (§7's check)
TURNS = [0, 0, 0, -1, 1, 1, -1, 2, 2]
ROLES = [0, 0, 0, -1, 1, 1, -1, 0, 0]


def batch(rewards_per_turn, correct=(1.0,), groups=(0,)):
    """Sequences with §7's mask, each turn's reward on its last token."""
    B, T = len(rewards_per_turn), len(MASK)
    rewards = torch.zeros(B, T)
    for b, (r1, r2, r3) in enumerate(rewards_per_turn):
        rewards[b, 2], rewards[b, 5], rewards[b, 8] = r1, r2, r3
    mask = torch.tensor([MASK] * B, dtype=torch.float32)
    return Batch(
        input_ids=torch.ones(B, T, dtype=torch.long),
        attention_mask=torch.ones(B, T, dtype=torch.long),
        loss_mask=mask,
        old_logp=torch.zeros(B, T),
        token_rewards=rewards,
        turn_ids=torch.tensor([TURNS] * B),
        roles=torch.tensor([ROLES] * B),
        response_lengths=mask.sum(-1),
        scores=rewards.sum(-1),
        correct=torch.tensor(list(correct)),
        group_ids=torch.tensor(list(groups)),
        truncated=torch.zeros(B),
    )


def pag(**options):
    return get_algorithm(parse_algorithm_config({"name": "pag", **options}))


def test_defaults_are_those_of_section_7_and_foreign_options_are_errors():
    c = pag().cfg
    assert (c.lam_actor, c.lam_critic, c.turn_independent, c.role_norm, c.eps_low, c.eps_high, c.agg, c.kl_coef) == (
        1.0,
        1.0,
        True,
        True,
        0.2,
        0.28,
        "token-mean",
        0.0,
    )
    assert pag().uses_critic and not pag().needs_reference
    with pytest.raises(ValidationError, match="dynamic_sampling"):
        TrainConfig.model_validate(
            {"env": {"id": "tests/ToyPAG-v0"}, "algorithm": {"name": "pag", "dynamic_sampling": True}}
        )
    with pytest.raises(ValidationError, match="role_norm"):
        TrainConfig.model_validate(
            {"env": {"id": "tests/ToyPAG-v0"}, "algorithm": {"name": "grpo", "role_norm": False}}
        )


def test_each_turns_advantage_is_its_own_reward_with_the_cut():
    b = batch([(0.5, 1.0, 2.0)])
    adv, returns = pag(role_norm=False).advantages(b, 8, torch.zeros(1, 9))
    expected = torch.tensor([[0.5, 0.5, 0.5, 0, 1, 1, 0, 2, 2]])
    assert torch.allclose(adv, expected) and torch.allclose(returns, expected)
    leaky, _ = pag(role_norm=False, turn_independent=False).advantages(b, 8, torch.zeros(1, 9))
    assert torch.allclose(leaky[0, :3], torch.tensor([3.5] * 3))  # the ablation: later rewards flow back
    # with a critic, each turn's advantage is its reward minus the baseline of its own tokens only
    values = torch.tensor([[0.2, 0.3, 0.4, 9.0, 0.1, 0.6, 9.0, 1.0, 1.5]])
    adv, _ = pag(role_norm=False).advantages(b, 8, values)
    assert torch.allclose(adv[0, 2], torch.tensor(0.5 - 0.4)) and torch.allclose(adv[0, 5], torch.tensor(1.0 - 0.6))
    assert torch.allclose(adv[0, 0], torch.tensor(0.5 - 0.2))  # λ = 1 within the turn: the turn's return - V


def test_role_adv_norm_gives_each_role_mean_0_and_variance_1():
    b = batch([(1, 0, 2), (0, 1, 0), (1, 1, -1), (0, 0, 0)], correct=(1, 0, 0, 0), groups=(0, 0, 1, 1))
    adv, _ = pag().advantages(b, 8, torch.rand(4, 9))
    for role in (0, 1):
        sel = (b.roles == role) & b.loss_mask.bool()
        assert abs(float(adv[sel].mean())) < 1e-5 and abs(float(adv[sel].var(correction=0)) - 1) < 1e-3
    assert (adv[b.loss_mask == 0] == 0).all()


def test_verifier_balance_makes_a_verdict_that_ignores_the_answer_earn_nothing():
    # 3 right first answers, 1 wrong; the verifier says "correct" to all: rewards 1, 1, 1, 0 (a collapsed verifier)
    b = batch([(1, 1, 0), (1, 1, 0), (1, 1, 0), (0, 0, 0)], correct=(1, 1, 1, 0), groups=(0, 0, 0, 0))
    r = balance_verifier_rewards(b.token_rewards, b.turn_ids, b.roles, b.loss_mask)
    ver = lambda x: x[:, 5].tolist()  # the verifier turn's last token
    assert ver(r) == pytest.approx([2 / 3, 2 / 3, 2 / 3, 0.0])  # weights n/(2 n_c): 4/6 for right, 4/2 for wrong
    # saying "wrong" to everything earns the same total: the verdict alone, without the truth, gains nothing
    flipped = batch([(1, 0, 0), (1, 0, 0), (1, 0, 0), (0, 1, 0)], correct=(1, 1, 1, 0), groups=(0, 0, 0, 0))
    r_flip = balance_verifier_rewards(flipped.token_rewards, flipped.turn_ids, flipped.roles, flipped.loss_mask)
    assert sum(ver(r)) == pytest.approx(sum(ver(r_flip))) == pytest.approx(2.0)
    # a verifier that tells them apart earns more than either; the policy turns' rewards are untouched
    right = batch([(1, 1, 0), (1, 1, 0), (1, 1, 0), (0, 1, 0)], correct=(1, 1, 1, 0), groups=(0, 0, 0, 0))
    r_right = balance_verifier_rewards(right.token_rewards, right.turn_ids, right.roles, right.loss_mask)
    assert sum(ver(r_right)) == pytest.approx(4.0)
    assert torch.equal(r[:, [2, 8]], b.token_rewards[:, [2, 8]])
    # one truth only: nothing to balance
    same = batch([(1, 1, 0), (1, 0, 0)], correct=(1, 1), groups=(0, 0))
    assert torch.equal(
        balance_verifier_rewards(same.token_rewards, same.turn_ids, same.roles, same.loss_mask), same.token_rewards
    )
    # through both algorithms: the option changes the verifier turns' advantages only
    plain, _ = pag(role_norm=False).advantages(b, 8, torch.zeros(4, 9))
    bal, _ = pag(role_norm=False, verifier_balance=True).advantages(b, 8, torch.zeros(4, 9))
    assert torch.allclose(bal[:, 4:6], r[:, 5:6].expand(4, 2)) and torch.equal(bal[:, :3], plain[:, :3])


def test_verifier_balance_removes_the_pull_to_the_majority_verdict():
    # a verifier that says "correct" half the time whatever the truth; 6 right first answers, 2 wrong
    rows = [(1, 1, 0)] * 3 + [(1, 0, 0)] * 3 + [(0, 0, 0), (0, 1, 0)]
    says_correct = torch.tensor([1.0] * 3 + [-1.0] * 3 + [1.0, -1.0])
    b = batch(rows, correct=(1,) * 6 + (0, 0), groups=(0,) * 8)

    def push(algo):  # Σ advantage × (+1 "correct", -1 "wrong"): the net push on the verdict "correct"
        adv, _ = algo.advantages(b, 8, torch.zeros(8, 9)) if algo.name == "pag" else algo.advantages(b, 8)
        return float((adv[:, 5] * says_correct).sum())

    for name in ("pag", "pag-grpo"):
        plain = get_algorithm(parse_algorithm_config({"name": name}))
        balanced = get_algorithm(parse_algorithm_config({"name": name, "verifier_balance": True}))
        assert push(plain) > 0.5  # pulled toward the majority truth's verdict
        assert abs(push(balanced)) < 1e-5  # no pull: only telling the truths apart would gain


def test_final_only_reward_puts_the_final_correctness_on_the_last_token():
    b = batch([(1, 1, 2), (0, 1, 0)], correct=(1.0, 0.0), groups=(0, 0))
    r = final_only_rewards(b.loss_mask, b.correct)
    assert r[0, 8] == 1 and r[0].sum() == 1 and r[1].sum() == 0
    adv, _ = pag(reward="final-only", role_norm=False).advantages(b, 8, torch.zeros(2, 9))
    assert adv[0, 4] == 0 and adv[0, 8] == 1  # with the cut, the verifier turn earns nothing under final-only


def test_pag_grpo_normalizes_each_turn_within_its_group_and_role():
    b = batch([(1, 0, 2), (0, 1, 0), (1, 1, -1)], groups=(0, 0, 0), correct=(1, 0, 0))
    adv, _ = get_algorithm(parse_algorithm_config({"name": "pag-grpo"})).advantages(b, 8)
    policy = torch.tensor([1, 0, 1, 2, 0, -1.0])  # the group's policy turns: answers then revisions
    verifier = torch.tensor([0, 1, 1.0])
    z = lambda x: (x - x.mean()) / (x.std() + 1e-6)
    zp, zv = z(policy), z(verifier)
    for row in range(3):
        assert torch.allclose(adv[row, :3], zp[row].repeat(3), atol=1e-5)
        assert torch.allclose(adv[row, 7:], zp[3 + row].repeat(2), atol=1e-5)
        assert torch.allclose(adv[row, 4:6], zv[row].repeat(2), atol=1e-5)
    assert (adv[b.loss_mask == 0] == 0).all()
    # by_role=False: every turn of the group is normalized together
    pooled = turn_group_advantages(b.token_rewards, b.turn_ids, b.roles, b.group_ids, b.loss_mask, by_role=False)
    everything = z(torch.tensor([1, 0, 1, 0, 1, 1, 2, 0, -1.0]))  # answers, verdicts, revisions of rows 0..2
    assert torch.allclose(pooled[1, 4:6], everything[4].repeat(2), atol=1e-5)


def episodes(replies, indices):
    tok = tiny_tokenizer("chatml")
    envs = [turnrl.make("tests/ToyPAG-v0") for _ in indices]
    return tok, Rollout(FixedAgent(tok, replies), SamplingParams(max_new_tokens=8)).run(
        envs, options=[{"index": i} for i in indices], group_ids=[str(i) for i in indices]
    )


def test_pag_metrics_of_scripted_episodes():
    # task 0's answer is wrong, tasks 1-3 right (ScriptedTruthEnv); "x…" says wrong, "Y…" says correct
    _, says_wrong = episodes(["answer", "x", "again"], [0, 1])  # right about 0, wrong about 1 -> revise both
    _, says_right = episodes(["answer", "Yes"], [0, 2, 3])
    _, unparseable = episodes(["answer", "..."], [1])
    eps = [pag_episode(t) for t in says_wrong + says_right + unparseable]
    m = pag_summary(eps)
    assert m["pag_episodes"] == 6 and m["pag_verdicts"] == 6
    assert m["pag_acc_turn1"] == pytest.approx(4 / 6) and m["pag_acc_final"] == pytest.approx(4 / 6)
    assert m["pag_verifier_acc"] == pytest.approx(3 / 6)  # wrong about 0 (said Y), right about 0 (x), 2, 3
    assert m["pag_verifier_acc_on_wrong"] == pytest.approx(1 / 2) and m["pag_verifier_acc_on_correct"] == pytest.approx(
        2 / 4
    )
    assert m["pag_verifier_balanced_acc"] == pytest.approx(1 / 2)
    # a verifier that says "correct" to everything: accuracy = the share of right answers, balanced accuracy 0.5
    always = pag_summary([pag_episode(t) for t in says_right + episodes(["answer", "Yes"], [1])[1]])
    assert always["pag_verifier_acc"] == pytest.approx(3 / 4) and always["pag_verifier_balanced_acc"] == 0.5
    assert (m["pag_verdict_correct"], m["pag_verdict_wrong"], m["pag_verdict_unparseable"]) == pytest.approx(
        (3 / 6, 2 / 6, 1 / 6)
    )
    assert m["pag_revision_rate"] == pytest.approx(2 / 6)  # train mode: only after "wrong"
    assert m["pag_wrong_to_right"] == 0 and m["pag_right_to_wrong"] == 0
    assert pag_episode(turnrl.Trajectory()) is None and pag_summary([None]) == {}


def test_eval_on_arithmetic_pag_reports_the_pag_figures(tmp_path):
    tok = tiny_tokenizer("chatml")

    def agent(prompt):  # answers wrong, says "wrong", then revises to the right answer
        if "previous answer was wrong" in prompt:
            q = prompt.split("What is ", 1)[1].split("?")[0]
            return f"\\boxed{{{eval(q)}}}"  # our generated arithmetic
        return (
            "The answer is wrong"
            if "Check the solution" in prompt.rsplit("<|im_start|>user", 1)[-1]
            else "\\boxed{-999}"
        )

    m = evaluate(ScriptedAgent(tok, agent), "turnrl/Arithmetic-PAG-v0", limit=4, out=tmp_path)
    assert m["pag_acc_turn1"] == 0 and m["pag_acc_final"] == 1 and m["pag_wrong_to_right"] == 1
    assert m["pag_verifier_acc"] == 1 and m["pag_verifier_acc_on_wrong"] == 1 and m["pag_revision_rate"] == 1
    report = (tmp_path / "report.md").read_text()
    assert "pag_acc_final" in report and m["env"]["pag_acc_final"] == 1
    # the headline, above the table: every first answer was wrong, so there is nothing to tell apart
    assert report.index("## Self-verification") < report.index("| metric | value |")
    assert "**Verifier balanced accuracy: n/a**" in report and "on wrong ones 100.0%" in report


def test_the_self_verification_headline_leads_with_balanced_accuracy():
    from turnrl.envs.formats.self_verify_metrics import self_verification_lines

    m = {
        "pag_acc_turn1": 0.7,
        "pag_acc_final": 0.75,
        "pag_verifier_acc_on_correct": 1.0,
        "pag_verifier_acc_on_wrong": 0.0,
        "pag_verifier_balanced_acc": 0.5,
        "pag_verdict_correct": 1.0,
        "pag_verdict_wrong": 0.0,
    }
    lines = self_verification_lines(m)
    assert lines[2] == "**Verifier balanced accuracy: 50.0%** (50 % is a verdict that ignores the answer)"
    assert "on right first answers 100.0%, on wrong ones 0.0%" in lines[4] and "unparseable n/a" in lines[4]
    assert "first answer 70.0% → final 75.0%" in lines[5]
    assert self_verification_lines({"accuracy": 1.0}) == []  # not a self-verification evaluation


def test_verdict_collapse_monitor():
    step = lambda c, w, n=32: {
        "pag_verdict_correct": c,
        "pag_verdict_wrong": w,
        "pag_verdicts": n,
        "pag_verifier_acc": 0.5,
    }
    assert "say the answer is correct" in verdict_collapse([step(0.97, 0.03)] * 2, step(1.0, 0.0))
    assert "say the answer is wrong" in verdict_collapse([step(0.0, 1.0)] * 2, step(0.02, 0.98))
    assert verdict_collapse([step(0.6, 0.4)] * 2, step(0.99, 0.01)) is None  # not yet over the window
    assert verdict_collapse([], step(1.0, 0.0, n=4)) is None  # too few verdicts to say
    monitors = list(registered_monitors().values())  # PAG's check comes in as an entry point, as a plug-in's would
    assert "pag-verdict-collapse" in registered_monitors()
    assert any("collapsed" in w for w in check_health([step(1.0, 0.0)] * 2, step(1.0, 0.0), 64, monitors=monitors))
    assert not any("collapsed" in w for w in check_health([step(1.0, 0.0)] * 2, step(1.0, 0.0), 64))  # not handed
    assert check_health([], {"turn_length": 10.0, "response_length": 30.0}, 32) == []  # three turns of 10 tokens
    # an offline objective's episodes are stored data (e.g. verdict rows): their verdicts say nothing of the policy
    assert check_health([step(1.0, 0.0)] * 2, step(1.0, 0.0), 64, sampled=False) == []
    assert any("entropy" in w for w in check_health([], {"entropy": 0.01}, 64, sampled=False))


def test_pag_training_raises_the_verifiers_accuracy_on_a_toy_env(tmp_path, one_thread):
    """PAG's verdict reward reaches the verifier turn with its sign: the verdicts move to the one the reward favours.

    What the toy can show is that and no more. Its truth is scripted per task (3 tasks in 4 right, whatever is said),
    and the tiny model learns no task-conditional verdict: in the run measured for this docstring (seed 0, one thread)
    accuracy rose from 0.16 to 0.75 by saying "correct" always, balanced accuracy stayed at 0.5 and the collapse
    monitor warned. A verdict counts as right when its reward is 1 (envs/formats/self_verify.py), so with the verdict
    reward's sign flipped the metric reads 0.0 at every step and the test fails. Telling right from wrong is measured
    on SmolLM2 (docs/results/pag.md).

    One torch thread, as each of the suite's two processes runs torch: at lr 2e-2 the run is near the optimizer's
    edge, and run alone on two threads (sums in another order) seed 0 reached 0.75 by step 26 and fell back to
    0.2-0.4 from step 31, failing the test."""
    cfg = TrainConfig(
        model="tiny",
        env={"id": "tests/ToyPAG-v0"},
        algorithm={"name": "pag"},
        rollout={"prompts_per_step": 4, "group_size": 8, "max_new_tokens": 4},
        optim={"lr": 2e-2, "minibatch_size": 16},
        steps=40,
        eval_tasks=8,
        out_dir=str(tmp_path),
        save_trajectories=False,
    )
    tok = tiny_tokenizer("chatml")
    history = train_tiny(cfg, tok)
    acc = [h["pag_verifier_acc"] for h in history[1:]]
    early, late = sum(acc[:5]) / 5, sum(acc[-5:]) / 5
    # seeds 0-8 (an AVX2 host): 0.16-0.25 -> 0.73-0.76. At lr 3e-2 (seeds 0-2 passed on another host) seed 0 reached
    # 0.75 by step 21 here, then fell back to 0.2-0.4 from step 34: a critic's advantages keep moving verdicts that
    # have all become "correct" (zero-variance groups), and too large a step overshoots.
    assert late > early + 0.3 and late >= 0.6, (early, late)
    assert all(h["pag_acc_turn1"] == 0.75 for h in history[1:])  # the truth is scripted: 3 tasks in 4 are right
    for h in (history[0], history[-1]):  # held-out: the env's own figures beside eval_success
        assert h["eval_pag_acc_turn1"] == 0.75 and 0 <= h["eval_pag_verifier_balanced_acc"] <= 1


def test_pag_envs_are_evaluated_in_eval_mode_unless_told():
    from turnrl.rl.run.evaluate import held_out_kwargs

    env = turnrl.make("turnrl/Arithmetic-PAG-v0")
    assert held_out_kwargs(env, {}) == {"split": "test", "mode": "eval"}
    assert held_out_kwargs(env, {"mode": "train", "split": "train"}) is None
    # eval mode revises after an unparseable verdict too
    tok = tiny_tokenizer("chatml")
    m = evaluate(
        FixedAgent(tok, ["\\boxed{-999}", "I am not sure.", "\\boxed{-998}"]), "turnrl/Arithmetic-PAG-v0", limit=2
    )
    assert m["pag_revision_rate"] == 1 and m["pag_verdict_unparseable"] == 1


def test_math_envs_take_their_own_instruction():
    env = turnrl.make("turnrl/Arithmetic-PAG-v0", answer_format="auto", instruction="Put it in a box.")
    obs, _ = env.reset(options={"index": 0})
    assert obs[-1].content.endswith("Put it in a box.") and "The answer is N" not in obs[-1].content
    q = obs[-1].content.split("What is ", 1)[1].split("?")[0]
    _, reward, *_ = env.step(f"{q} = {eval(q)}")  # graded leniently all the same
    assert reward == 1.0


def test_a_prompt_that_is_not_text_is_refused_when_the_env_is_made():
    from typer.testing import CliRunner

    from turnrl.cli import app

    with pytest.raises(TypeError, match="verify_prompt must be a string"):
        turnrl.make("turnrl/Arithmetic-PAG-v0", verify_prompt={"Say": True})
    # `--kw` values are YAML: "Say: yes" is a mapping; the command says so in one line, not at the first step
    result = CliRunner().invoke(app, ["envs", "check", "turnrl/Arithmetic-PAG-v0", "--kw", "verify_prompt=Say: yes"])
    assert result.exit_code == 2 and "read as YAML" in result.output, result.output


# ---- the verifier warm-up's rows (ours) ----


def test_warm_up_rows_relabel_each_verify_turn_with_the_true_verdict_token_exactly(tmp_path):
    from turnrl.methods.pag.rows import VERDICT_TEXT, pag_rows
    from turnrl.rl.core.batch import untrainable
    from turnrl.storage import load, save

    # task 0's answer is wrong, 1-3 right; this policy says "wrong" about every answer, then revises
    tok, trajs = episodes(["answer", "x", "again"], [0, 1, 2, 3])
    rows, report = pag_rows(trajs, tok, balance="none")
    assert report["truth_wrong"] == 1 and report["truth_correct"] == 3 and report["sampled_verdict_agreed"] == 0.25
    # every row can be trained on: a right first answer's reward (on a context turn, without tokens) left in info
    # once made the "correct" rows untrainable, and SFT silently taught "wrong" only
    assert [untrainable(r) for r in rows] == [None] * 4 and rows[1].turns[0].info["reward"] == 1.0
    for traj, row in zip(trajs, rows):
        start = traj.turns[1].token_span[0]  # the verify turn of the source
        assert row.token_ids[:start] == traj.token_ids[:start]  # the state as the policy saw it
        truth = "correct" if traj.turns[0].info["correct"] else "wrong"
        action = row.token_ids[start:]
        assert row.loss_mask == [0] * start + [1] * len(action)
        assert tok.decode(action[:-1]) == VERDICT_TEXT[truth] and action[-1] == tok.eos_token_id
        assert row.turns[-1].action.content == VERDICT_TEXT[truth] and row.turns[-1].token_span == (
            start,
            len(row.token_ids),
        )
    # balance down (the default): one row of each verdict; up: the one "wrong" row is repeated three times
    down, report = pag_rows(trajs, tok)
    assert sorted(r.metadata["pag_rows"]["truth"] for r in down) == ["correct", "wrong"] and report["dropped_rows"] == 2
    with pytest.raises(ValueError, match="balance must be"):
        pag_rows(trajs, tok, balance="yes")
    balanced, report = pag_rows(trajs, tok, balance="up")
    truths = [r.metadata["pag_rows"]["truth"] for r in balanced]
    assert truths.count("wrong") == truths.count("correct") == 3 and report["repeated_rows"] == 2
    assert len({r.id for r in balanced}) == len(balanced)
    save(balanced, tmp_path / "rows.parquet")  # what sft reads
    assert [r.token_ids for r in load(tmp_path / "rows.parquet")] == [r.token_ids for r in balanced]
    with pytest.raises(ValueError, match="graded verify turn"):
        pag_rows([turnrl.Trajectory()], tok)
    # the command line
    from typer.testing import CliRunner

    from turnrl.cli import app

    save(trajs, tmp_path / "episodes.parquet")
    r = CliRunner().invoke(
        app,
        [
            "pag",
            "rows",
            str(tmp_path / "episodes.parquet"),
            "--tokenizer",
            "tiny:chatml",
            "--balance",
            "up",
            "--out",
            str(tmp_path / "cli-rows.parquet"),
        ],
    )
    assert r.exit_code == 0 and "6 rows" in r.output and "2 repeated to balance" in r.output, r.output
    assert [x.token_ids for x in load(tmp_path / "cli-rows.parquet")] == [x.token_ids for x in balanced]
    r = CliRunner().invoke(
        app,
        [
            "pag",
            "rows",
            str(tmp_path / "cli-rows.parquet"),
            "--tokenizer",
            "tiny:chatml",
            "--out",
            str(tmp_path / "again.parquet"),
        ],
    )
    assert r.exit_code != 0 and "graded verify turn" in r.output, r.output


def test_warm_up_rows_keep_only_revisions_that_turned_wrong_right():
    from turnrl.methods.pag.rows import pag_rows

    tok = tiny_tokenizer("chatml")

    def agent(prompt):  # answers wrong, says "wrong", revises right on task 0 (its first number is even) only
        q = prompt.split("What is ", 1)[1].split("?")[0]
        if "previous answer was wrong" in prompt:
            return f"\\boxed{{{eval(q) + (0 if int(q.split()[0]) % 2 == 0 else 1)}}}"
        return (
            "The answer is wrong"
            if "Check the solution" in prompt.rsplit("<|im_start|>user", 1)[-1]
            else "\\boxed{-999}"
        )

    envs = [turnrl.make("turnrl/Arithmetic-PAG-v0", level=1) for _ in range(8)]
    trajs = Rollout(ScriptedAgent(tok, agent), SamplingParams(max_new_tokens=16)).run(
        envs, options=[{"index": i} for i in range(8)]
    )
    fixed = [t for t in trajs if t.turns[-1].info.get("correct")]
    assert 0 < len(fixed) < 8
    rows, report = pag_rows(trajs, tok, revisions=True)
    revisions = [r for r in rows if r.metadata["pag_rows"]["kind"] == "revision"]
    assert report["revision_rows"] == len(revisions) == len(fixed)
    assert all(r.turns[-1].info["phase"] == "revise" and r.turns[-1].info["correct"] for r in revisions)


def sibling_episodes():
    """Two episodes of each of questions 0-2 (the first answers right, the second wrong), one of question 10 (right)
    and one of a question answered only wrong; every verdict "wrong", every revision wrong."""
    from turnrl.methods.pag.rows import VERDICT_TEXT

    tok = tiny_tokenizer("chatml")
    calls = []

    def agent(prompt):
        last = prompt.rsplit("<|im_start|>user", 1)[-1]
        if "Check the solution" in last:
            return VERDICT_TEXT["wrong"]
        if "previous answer was wrong" in last:
            return "\\boxed{-999}"
        q = prompt.split("What is ", 1)[1].split("?")[0]
        calls.append(q)
        return f"{q} = \\boxed{{{eval(q) + (len(calls) + 1) % 2}}}"

    envs = [turnrl.make("turnrl/Arithmetic-PAG-v0", level=1) for _ in range(8)]
    trajs = Rollout(ScriptedAgent(tok, agent), SamplingParams(max_new_tokens=24)).run(
        envs, options=[{"index": i // 2} for i in range(6)] + [{"index": 10}, {"index": 11}]
    )
    firsts = [t.turns[0].info["correct"] for t in trajs]
    assert firsts[:6] == [True, False] * 3 and all(t.num_turns == 3 for t in trajs)
    trajs[7] = trajs[7].model_copy(update={"task_id": trajs[6].task_id + "-other"})  # a question answered only wrong
    return tok, trajs


def test_sibling_revisions_pair_a_wrong_answers_revision_state_with_a_right_answer_to_the_same_question(tmp_path):
    from turnrl.methods.pag.rows import pag_rows
    from turnrl.rl.core.batch import untrainable
    from turnrl.storage import load, save

    tok, trajs = sibling_episodes()
    rows, report = pag_rows(trajs, tok, balance="none", sibling_revisions=True)
    paired = [r for r in rows if r.metadata["pag_rows"]["kind"] == "sibling_revision"]
    assert report["sibling_revision_rows"] == len(paired) == 3  # the wrong ones of questions 0-2, not of 10 or 11
    assert all(untrainable(r) is None for r in rows)
    for row, wrong, right in zip(paired, trajs[1:6:2], trajs[0:6:2]):
        start = wrong.turns[2].token_span[0]
        # the state: the wrong episode up to its revision, token for token as the rollout appended it
        assert row.token_ids[:start] == wrong.token_ids[:start] and row.turns[-1].token_span == (
            start,
            len(row.token_ids),
        )
        s, e = right.turns[0].token_span
        assert row.token_ids[start:] == right.token_ids[s:e] and row.logprobs[start:] == right.logprobs[s:e]
        assert row.loss_mask == [0] * start + [1] * (e - s) and row.task_id == wrong.task_id
        assert row.turns[-1].info["phase"] == "revise" and row.turns[-1].info["correct"]
    save(rows, tmp_path / "rows.parquet")
    assert len(load(tmp_path / "rows.parquet")) == len(rows)
    assert "sibling_revision_rows" not in pag_rows(trajs, tok)[1]


def test_rationale_verdict_rows_re_solve_with_a_right_sibling_answer_then_give_the_true_verdict(tmp_path):
    from turnrl.methods.pag.rows import VERDICT_TEXT, pag_rows
    from turnrl.rl.core.batch import untrainable
    from turnrl.storage import save

    tok, trajs = sibling_episodes()
    rows, report = pag_rows(trajs, tok, balance="none", rationales=True, sibling_revisions=True)
    verdicts = [r for r in rows if r.metadata["pag_rows"]["kind"] == "verdict"]
    # the last question was never answered right: nothing to re-solve with, no verdict row
    assert len(verdicts) == 7 and report["no_rationale"] == 1 and report["verdict_rows"] == 7
    assert all(untrainable(r) is None for r in rows)
    # a right answer re-solves with itself (its question's only right answer), a wrong one with its right sibling
    for row, traj, right in zip(
        verdicts, trajs[:7], [trajs[0], trajs[0], trajs[2], trajs[2], trajs[4], trajs[4], trajs[6]], strict=True
    ):
        truth = "correct" if traj.turns[0].info["correct"] else "wrong"
        text = f"{right.turns[0].action.content}\n\n{VERDICT_TEXT[truth]}"  # the right answer, then the truth
        start = traj.turns[1].token_span[0]
        assert row.turns[-1].action.content == text and row.token_ids[:start] == traj.token_ids[:start]
        assert tok.decode(row.token_ids[start:-1]) == text and row.token_ids[-1] == tok.eos_token_id
    # the wrong answer's verifier re-solves to a different number than the answer it judges
    assert trajs[1].turns[0].action.content not in verdicts[1].turns[-1].action.content
    # a sibling revision continues from the re-solving verdict, as a rollout of that verifier would
    paired = [r for r in rows if r.metadata["pag_rows"]["kind"] == "sibling_revision"]
    assert len(paired) == 3 and all(
        p.token_ids[: len(v.token_ids)] == v.token_ids for p, v in zip(paired, verdicts[1::2])
    )
    with pytest.raises(ValueError, match="no episode answered right"):
        pag_rows(trajs[7:], tok, rationales=True)
    # the command line
    from typer.testing import CliRunner

    from turnrl.cli import app

    save(trajs, tmp_path / "episodes.parquet")
    r = CliRunner().invoke(
        app,
        [
            "pag",
            "rows",
            str(tmp_path / "episodes.parquet"),
            "--tokenizer",
            "tiny:chatml",
            "--rationales",
            "--out",
            str(tmp_path / "rows.parquet"),
        ],
    )
    assert r.exit_code == 0 and "1 verify turns without a right answer" in r.output, r.output


# ---- verdict exploration (ours) ----


def test_verdict_exploration_replaces_a_share_of_verdicts_with_the_other_one_token_exactly():
    from turnrl.methods.pag.explore import VerdictExplorer
    from turnrl.rl.core.forward import sequence_logprobs

    tok = tiny_tokenizer("chatml")
    agent = FixedAgent(tok, ["answer", "x", "again"])  # always says "wrong" ("x…"), then revises
    agent.model = tiny_model(tok)  # scripted replies, scored by a real model: declared as the agent's own
    agent.capabilities = Capabilities(on_token=True, local_model=True)
    explorer = VerdictExplorer(agent, share=0.5, temperature=1.0, seed=0)
    envs = [turnrl.make("tests/ToyPAG-v0") for _ in range(16)]
    trajs = Rollout(agent, SamplingParams(max_new_tokens=8), rewrite=explorer).run(
        envs, options=[{"index": i % 4} for i in range(16)]
    )
    forced = [t for t in trajs if t.turns[1].info.get("rewritten")]
    kept = [t for t in trajs if not t.turns[1].info.get("rewritten")]
    assert 3 <= len(forced) <= 13 and kept  # about half
    for t in forced:
        verify = t.turns[1]
        assert verify.action.content == "Yes" and verify.info["verdict"] == "correct"
        assert t.num_turns == 2  # "correct" ends the episode: no revision
        assert verify.reward == (1.0 if verify.info["correct"] else 0.0)  # rewarded against the truth like any verdict
        a, b = verify.token_span
        assert t.token_ids[a:b] == [*tok.encode("Yes", add_special_tokens=False), tok.eos_token_id]
        want = sequence_logprobs(agent.model, [t.token_ids[:b]], 1.0)[0][a:b]
        assert t.logprobs[a:b] == pytest.approx(want, abs=1e-5) and all(m == 1 for m in t.loss_mask[a:b])
        assert not t.turns[0].info.get("rewritten")  # only verify turns
    assert all(t.turns[1].action.content == "x" and t.num_turns == 3 for t in kept)
    with pytest.raises(ValueError, match="in \\(0, 1\\)"):
        VerdictExplorer(agent, share=1.0, temperature=1.0)
    with pytest.raises(ValueError, match="has none"):
        VerdictExplorer(FixedAgent(tok, ["x"]), share=0.5, temperature=1.0)


def test_verdict_exploration_with_verify_tools_rewrites_the_verdict_and_never_the_check():
    from turnrl.methods.pag.explore import VerdictExplorer

    tok = tiny_tokenizer("chatml")
    agent = FixedAgent(tok, ["\\boxed{-999}", "<calculator>2 + 2</calculator>", "The answer is wrong.", "\\boxed{1}"])
    agent.model = tiny_model(tok)  # scripted replies, scored by a real model: declared as the agent's own
    agent.capabilities = Capabilities(on_token=True, local_model=True)
    explorer = VerdictExplorer(agent, share=0.9, temperature=1.0, seed=0)
    envs = [tool_pag() for _ in range(12)]
    trajs = Rollout(agent, SamplingParams(max_new_tokens=16), rewrite=explorer).run(envs, seeds=list(range(12)))
    forced = 0
    for t in trajs:
        assert t.error is None, t.error
        check, verdict = t.turns[1], t.turns[2]
        assert check.action.content.startswith("<calculator>") and check.info["verify_tool"]  # the check always ran
        assert not check.info.get("rewritten") and not t.turns[0].info.get("rewritten")
        if verdict.info.get("rewritten"):  # the forced "correct" on a wrong answer: judged after the check, no revision
            forced += 1
            assert verdict.info["verdict"] == "correct" and verdict.info["verify_tool_calls"] == 1
            assert verdict.reward == 0 and t.num_turns == 3
        else:
            assert verdict.info["verdict"] == "wrong" and verdict.reward == 1 and t.num_turns == 4
    assert 6 <= forced <= 12


def test_verdict_texts_must_be_read_as_their_verdicts():
    from toy_envs import ScriptedTruthEnv, case_verdict

    from turnrl.envs.formats.self_verify import SelfVerify

    assert turnrl.make("turnrl/Arithmetic-PAG-v0").unwrapped.verdict_texts == {
        "correct": "The answer is correct.",
        "wrong": "The answer is wrong.",
    }
    with pytest.raises(ValueError, match="is not read as 'wrong'"):
        SelfVerify(ScriptedTruthEnv(), verdict_parser=case_verdict, verdict_texts={"correct": "Yes", "wrong": "No"})
    assert SelfVerify(ScriptedTruthEnv(), verdict_parser=case_verdict).verdict_texts is None  # a parser of its own


def test_pag_trains_with_verdict_exploration(tmp_path):
    with pytest.raises(ValidationError):
        TrainConfig(model="tiny", env={"id": "tests/ToyPAG-v0"}, algorithm={"name": "pag", "verdict_explore": 1.0})
    cfg = TrainConfig(
        model="tiny",
        env={"id": "tests/ToyPAG-v0"},
        algorithm={"name": "pag-grpo", "verdict_explore": 0.5},
        rollout={"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 4},
        steps=2,
        eval_tasks=4,
        out_dir=str(tmp_path),
    )
    tok = tiny_tokenizer("chatml")
    history = train_tiny(cfg, tok)
    assert len(history) == 3 and all(torch.isfinite(torch.tensor(h["loss"])) for h in history[1:])
    from turnrl.storage import load

    trained = load(tmp_path / "train" / "step-1" / "trajectories.jsonl")
    assert any(t.turns[1].info.get("rewritten") for t in trained if t.num_turns > 1)
    evaluated = load(tmp_path / "eval" / "step-2" / "trajectories.jsonl")
    assert not any(turn.info.get("rewritten") for t in evaluated for turn in t.turns)  # held-out never explores


def test_a_per_truth_baseline_gives_a_constant_verdict_zero_net_advantage_on_each_truth():
    from turnrl.methods.pag.algorithm import first_answer_right, truth_roles

    # 3 right first answers, 1 wrong; the verifier says "correct" to all: verifier rewards 1, 1, 1, 0
    rows, correct = [(1, 1, 0)] * 3 + [(0, 0, 0)], (1, 1, 1, 0)
    b = batch(rows, correct=correct, groups=(0, 0, 0, 0))
    right = first_answer_right(b.token_rewards, b.turn_ids, b.loss_mask)
    assert right.tolist() == [True, True, True, False]
    roles = truth_roles(b.roles, right, b.loss_mask)
    assert roles[3, 4:6].tolist() == [2, 2] and roles[0, 4:6].tolist() == [1, 1]  # wrong-answer verdicts apart
    assert torch.equal(roles[:, [0, 1, 2, 7, 8]], b.roles[:, [0, 1, 2, 7, 8]]) and roles[3, 3] == -1
    values = torch.rand(4, 9, generator=torch.Generator().manual_seed(0))
    role, _ = pag().advantages(b, 8, values)
    truth, _ = pag(verifier_baseline="truth").advantages(b, 8, values)
    ver = (b.roles == 1) & b.loss_mask.bool()
    on_right, on_wrong = ver & right[:, None], ver & ~right[:, None]
    # RoleAdvNorm: the constant "correct" is pushed up on right answers, down on the wrong one — a truth-blind
    # verdict is scored by which truth it happened to meet
    assert float(role[on_right].mean()) > 0.3 and float(role[on_wrong].mean()) < -0.3
    # per truth: a constant verdict earns zero net advantage on each truth (only the critic's noise is left)
    assert abs(float(truth[on_right].sum())) < 1e-4 and abs(float(truth[on_wrong].sum())) < 1e-4
    assert torch.allclose(truth[b.roles == 0], role[b.roles == 0])  # the policy turns are untouched
    # a verdict that beats its truth's average gains: on the right answers, one says "wrong" (reward 0)
    mixed = batch([(1, 1, 0), (1, 1, 0), (1, 0, 0), (0, 0, 0), (0, 1, 0)], correct=(1, 1, 1, 0, 0), groups=(0,) * 5)
    adv, _ = pag(verifier_baseline="truth").advantages(mixed, 8, torch.zeros(5, 9))
    assert adv[0, 5] > 0 > adv[2, 5] and adv[4, 5] > 0 > adv[3, 5]
    # pag-grpo: the same split inside its per-group, per-role normalization
    g = get_algorithm(parse_algorithm_config({"name": "pag-grpo", "verifier_baseline": "truth"}))
    gadv, _ = g.advantages(b, 8)
    assert torch.allclose(gadv[ver], torch.zeros(int(ver.sum())))  # every verdict equals its truth's others
    with pytest.raises(ValidationError, match="needs role_norm: true"):
        parse_algorithm_config({"name": "pag", "verifier_baseline": "truth", "role_norm": False})


def test_balance_under_the_truth_baseline_weighs_the_normalized_advantages():
    # a verifier that says "correct" half the time whatever the truth; 2 right first answers, 6 wrong
    rows = [(1, 1, 0), (1, 0, 0)] + [(0, 0, 0), (0, 1, 0)] * 3
    says_correct = torch.tensor([1.0, -1.0] + [1.0, -1.0] * 3)
    b = batch(rows, correct=(1, 1) + (0,) * 6, groups=(0,) * 8)

    def push(options):  # Σ over the verdict tokens of advantage × (+1 "correct", -1 "wrong")
        algo = get_algorithm(parse_algorithm_config(options))
        adv, _ = algo.advantages(b, 8, torch.zeros(8, 9)) if algo.name == "pag" else algo.advantages(b, 8)
        return float((adv[:, 4:6].sum(-1) * says_correct).sum()), adv

    for name in ("pag", "pag-grpo"):
        truth, adv_t = push({"name": name, "verifier_baseline": "truth"})
        assert truth < -1  # each truth centred, but the 6 wrong answers pull to "wrong" harder than the 2 right ones
        # a weight on the rewards alone is divided out by the per-truth normalization: the pull would stay
        assert torch.allclose(
            balance_verifier_rewards(b.token_rewards, b.turn_ids, b.roles, b.loss_mask)[:, 5],
            b.token_rewards[:, 5] * torch.tensor([2.0, 2.0] + [2 / 3] * 6),
        )
        both, adv_b = push({"name": name, "verifier_baseline": "truth", "verifier_balance": True})
        if name == "pag":  # balanced: a truth-blind verdict has no net push
            assert abs(both) < 1e-5
        else:  # GRPO's sample std (n - 1) leaves the smaller truth's advantages a little smaller: a small remainder
            assert abs(both) < abs(truth) / 4
        assert torch.allclose(adv_b[b.roles == 0], adv_t[b.roles == 0])  # the policy turns are untouched
        assert torch.allclose(adv_b[:2, 4:6], 2.0 * adv_t[:2, 4:6]) and torch.allclose(
            adv_b[2:, 4:6], adv_t[2:, 4:6] * 2 / 3
        )


# ---- verify turns that may call tools (SelfVerify(verify_tools=True)) ----


def tool_pag(**kw):
    return turnrl.make("turnrl/Arithmetic-PAG-v0", calculator=True, tool_style="tags", level=2, verify_tools=True, **kw)


def test_a_verify_turn_may_check_with_the_tool_before_its_verdict():
    env = tool_pag()
    env.reset(seed=0)
    assert (env.task.answer, env.max_turns) == ("16", 5)  # 39 - 23; answer, two tool turns, verdict, revision
    obs, r, term, _, info = env.step("\\boxed{15}")
    assert "recompute it with a tool" in obs[0].content and info["next_role"] == "verifier"
    obs, r, term, _, info = env.step("<calculator>39 - 23</calculator>")
    assert [m.content for m in obs] == ["16"] and r == 0 and not term
    assert (info["phase"], info["role"], info["next_role"], info["verify_tool"]) == (
        "verify",
        "verifier",
        "verifier",
        True,
    )
    obs, r, term, _, info = env.step("The tool says 16, not 15. The answer is wrong.")
    assert r == 1 and info["verdict"] == "wrong" and info["next_role"] == "policy"
    assert (info["verify_tool_calls"], info["check_says_right"], info["tool_agreed"]) == (1, False, True)
    assert env.step("\\boxed{16}")[1] == 2.0  # the revision: acc2 + (acc2 - acc1)
    # a right answer, a tool error (an observation), then the limit: the next reply is the verdict, call or not
    env = tool_pag(max_verify_calls=1)
    env.reset(seed=0)
    env.step("\\boxed{16}")
    obs, r, term, _, info = env.step("<calculator>39 - </calculator>")
    assert "cannot parse" in obs[0].content and info["error"] and not term
    obs, r, term, _, info = env.step("<calculator>39 - 23</calculator>")
    assert term and r == 0 and info["verdict"] is None and info["verify_tool_calls"] == 1
    assert info["check_says_right"] is None and info["tool_agreed"] is None  # the failed call gave no result
    # a verdict that contradicts its own check
    env = tool_pag()
    env.reset(seed=0)
    env.step("\\boxed{16}")
    env.step("<calculator>39-23</calculator>")
    info = env.step("The answer is wrong.")[4]
    assert (info["check_says_right"], info["tool_agreed"], info["verdict_correct"]) == (True, False, False)


def test_verify_tools_are_refused_without_tools_and_off_by_default():
    with pytest.raises(ValueError, match="verify_tools needs an environment with tools.*calculator=True"):
        turnrl.make("turnrl/Arithmetic-PAG-v0", verify_tools=True)
    with pytest.raises(ValueError, match="max_verify_calls must be at least 1"):
        tool_pag(max_verify_calls=0)
    env = turnrl.make("turnrl/Arithmetic-PAG-v0", calculator=True, tool_style="tags")  # the paper's setting
    env.reset(seed=0)
    env.step("\\boxed{16}")
    _obs, _r, term, _, info = env.step("<calculator>39-23</calculator>")  # no tools in the verify turn: a verdict
    assert term and info["verdict"] is None and "verify_tool_calls" not in info and env.max_turns == 3


def test_verify_tool_turns_are_verifier_turns_token_exact_and_counted():
    tok = tiny_tokenizer("chatml")

    def agent(prompt):
        last = prompt.rsplit("<|im_start|>", 2)[-2]
        if "Check the solution" in last:
            q = prompt.split("What is ", 1)[1].split("?")[0]
            return f"<calculator>{q}</calculator>"
        if "previous answer was wrong" in last:
            q = prompt.split("What is ", 1)[1].split("?")[0]
            return f"\\boxed{{{eval(q)}}}"  # our generated arithmetic
        if last.startswith("tool"):  # the calculator's result came back
            return "The answer is wrong."
        return "\\boxed{-999}"

    envs = [tool_pag() for _ in range(3)]
    trajs = Rollout(ScriptedAgent(tok, agent), SamplingParams(max_new_tokens=32)).run(envs, seeds=[0, 1, 2])
    for t in trajs:
        assert [turn.role for turn in t.turns] == ["policy", "verifier", "verifier", "policy"], t.error
        assert [turn.info["phase"] for turn in t.turns] == ["answer", "verify", "verify", "revise"]
        assert t.turns[2].info["tool_agreed"] is True and [turn.reward for turn in t.turns] == [0, 0, 1, 2]
        for turn in t.turns:  # each turn's tokens are what the agent wrote
            s, e = turn.token_span
            assert tok.decode(t.token_ids[s:e], skip_special_tokens=True).strip() == turn.action.content.strip()
    m = envs[0].summarize_episodes(trajs)
    assert m["pag_verify_tool_rate"] == 1 and m["pag_verify_tool_agreement"] == 1 and m["pag_verify_check_right"] == 1
    assert m["pag_verifier_acc_on_wrong"] == 1 and m["pag_acc_final"] == 1


def test_every_verifier_turn_is_rewarded_with_its_verdict():
    from turnrl.methods.pag.algorithm import spread_verdict_reward

    # answer (turn 0), tool call (turn 1, verifier), verdict (turn 2, verifier), revision (turn 3)
    mask = torch.tensor([[1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1]] * 2, dtype=torch.float32)
    turns = torch.tensor([[0, 0, -1, 1, 1, -1, 2, 2, -1, 3, 3]] * 2)
    roles = torch.tensor([[0, 0, -1, 1, 1, -1, 1, 1, -1, 0, 0]] * 2)
    rewards = torch.zeros(2, 11)
    rewards[0, 1], rewards[0, 7], rewards[0, 10] = 0.0, 1.0, 2.0  # a right verdict on a wrong answer, then a fix
    rewards[1, 1], rewards[1, 7] = 1.0, 0.0  # a wrong verdict on a right answer
    out = spread_verdict_reward(rewards, turns, roles, mask)
    assert out[0].tolist() == [0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 2]  # the tool turn's last token gets R_v = 1
    assert out[1].tolist() == [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    single = batch([(1, 1, 0)])  # §7's plain episode: one verifier turn, nothing changes
    assert torch.equal(
        spread_verdict_reward(single.token_rewards, single.turn_ids, single.roles, single.loss_mask),
        single.token_rewards,
    )
    b = Batch(
        input_ids=torch.ones(2, 11, dtype=torch.long),
        attention_mask=torch.ones(2, 11, dtype=torch.long),
        loss_mask=mask,
        old_logp=torch.zeros(2, 11),
        token_rewards=rewards,
        turn_ids=turns,
        roles=roles,
        response_lengths=mask.sum(-1),
        scores=rewards.sum(-1),
        correct=torch.tensor([1.0, 1.0]),
        group_ids=torch.tensor([0, 1]),
        truncated=torch.zeros(2),
    )
    adv, _ = pag(role_norm=False).advantages(b, 8, torch.zeros(2, 11))
    assert adv[0, 3:5].tolist() == [1.0, 1.0]  # the tool call is credited with the verdict it led to


def test_a_comparing_check_subtracts_the_answer_and_its_verdict_reads_the_difference():
    """--compare: the check in two calls — the calculation, then the calculator on check − answer — and a verdict
    that states the difference; the check figures still judge the first call's result."""
    from turnrl.methods.pag.check_rows import checking_rows, generate_checks

    tok = tiny_tokenizer("chatml")

    def policy(prompt):  # right when the result is even, one too many when it is odd
        v = eval(prompt.split("What is ", 1)[1].split("?")[0])  # our generated arithmetic
        return f"\\boxed{{{v if v % 2 == 0 else v + 1}}}"

    kw = {"calculator": True, "tool_style": "tags", "level": 2, "verify_tools": True}
    trajs = generate_checks(
        ScriptedAgent(tok, policy), "turnrl/Arithmetic-PAG-v0", kw, tasks=8, max_new_tokens=64, compare=True
    )
    for t in trajs:
        right = t.turns[0].info["correct"]
        check, compare, verdict = t.turns[1:4]
        assert check.role == compare.role == verdict.role == "verifier"
        stated = t.turns[0].info["extracted"]
        assert compare.action.content == f"<calculator>{check.observation[0].content} - ({stated})</calculator>"
        assert compare.observation[0].content == ("0" if right else "-1")  # the answer is one too many
        assert verdict.action.content == (
            "The difference is 0. The answer is correct."
            if right
            else "The difference is -1, not 0. The answer is wrong."
        )
        assert verdict.info["check_says_right"] is right and verdict.info["tool_agreed"] is True
    rows, report = checking_rows(trajs, balance="none")
    assert report["dropped_steps"] == 0 and report["tool_rows"] == 2 * report["verdict_rows"] == 16
    from turnrl.envs.conformance.split_check import task_keys
    from turnrl.envs.registry import make

    keys = task_keys(make("turnrl/Arithmetic-PAG-v0", **kw), 8)  # each row names its problem, so that a run
    assert keys and [t.metadata["item"] for t in trajs] == keys  # refuses rows posing its held-out ones
    assert {r.metadata["item"] for r in rows} <= set(keys)
    small = generate_checks(
        ScriptedAgent(tok, policy),
        "turnrl/Arithmetic-PAG-v0",
        kw,
        tasks=4,
        samples=2,
        max_new_tokens=64,
        compare=True,
        batch_episodes=3,
    )  # batches across tasks and samples
    assert [t.metadata["item"] for t in small] == [k for k in keys[:4] for _ in range(2)]
    assert all(tu.info["rewritten"] for t in trajs for tu in t.turns if tu.role == "verifier")
    assert report["revision_rows"] == 0 and all(len(t.turns) == 4 + (not t.turns[0].info["correct"]) for t in trajs)
    # --revisions: after "wrong" the teacher states the check's result as the answer; the right ones become rows
    agent = ScriptedAgent(tok, policy)
    revised = generate_checks(
        agent, "turnrl/Arithmetic-PAG-v0", kw, tasks=8, max_new_tokens=64, compare=True, revisions=True
    )
    wrong = [t for t in revised if not t.turns[0].info["correct"]]
    assert wrong and len(wrong) < len(revised)
    assert sum(len(batch) for batch in agent.calls) == 8  # the teacher's turns are never sampled: first answers only
    for t in wrong:
        revision = t.turns[4]
        assert revision.info["phase"] == "revise" and revision.info["rewritten"] and revision.info["correct"]
        assert revision.action.content == f"The answer is \\boxed{{{t.turns[1].observation[0].content}}}."
        assert revision.reward == 2.0  # wrong -> right
    assert not any(
        tu.info.get("rewritten")
        for t in revised
        for tu in t.turns
        if tu.role == "policy" and tu.info.get("phase") == "answer"
    )  # the first answers stay the policy's own
    rows, report = checking_rows(revised, balance="none")
    assert report["revision_rows"] == len(wrong) and report["rows"] == 3 * 8 + len(wrong)
    kinds = [r.metadata["pag_rows"]["kind"] for r in rows]
    assert kinds.count("check_revision") == len(wrong)
    # a revision the check got wrong is filtered out, never trained
    bad = revised.index(wrong[0])
    revised[bad] = revised[bad].model_copy(deep=True)
    revised[bad].turns[4].info.update(correct=False)
    assert checking_rows(revised, balance="none")[1]["revision_rows"] == len(wrong) - 1


def test_checking_warm_up_rows_call_the_tool_then_give_the_true_verdict(tmp_path):
    from typer.testing import CliRunner

    from turnrl.cli import app
    from turnrl.methods.pag.check_rows import CheckingTeacher, checking_rows, generate_checks
    from turnrl.storage import load

    tok = tiny_tokenizer("chatml")

    def policy(prompt):  # right when the result is even, one too many when it is odd
        v = eval(prompt.split("What is ", 1)[1].split("?")[0])  # our generated arithmetic
        return f"\\boxed{{{v if v % 2 == 0 else v + 1}}}"

    kw = {"calculator": True, "tool_style": "tags", "level": 2, "verify_tools": True}
    trajs = generate_checks(ScriptedAgent(tok, policy), "turnrl/Arithmetic-PAG-v0", kw, tasks=12, max_new_tokens=64)
    for t in trajs:
        right = t.turns[0].info["correct"]
        call, verdict = t.turns[1], t.turns[2]
        assert call.role == verdict.role == "verifier" and call.action.content.startswith("<calculator>")
        assert call.observation[0].content == t.turns[2].action.content.split("The check gives ")[1].split(" ")[0]
        assert verdict.info["verdict"] == ("correct" if right else "wrong") and verdict.info["tool_agreed"] is True
        assert [tu.role for tu in t.turns] == ["policy", "verifier", "verifier"] + ([] if right else ["policy"])
    rows, report = checking_rows(trajs)
    assert report["right_first"] + report["wrong_first"] == 12 and report["dropped_steps"] == 0
    small = min(report["right_first"], report["wrong_first"])
    assert report["tool_rows"] == report["verdict_rows"] == 2 * small  # balanced: as many of each truth
    kinds = [(r.metadata["pag_rows"]["kind"], r.metadata["pag_rows"]["truth"]) for r in rows]
    assert kinds.count(("check_verdict", "correct")) == kinds.count(("check_verdict", "wrong")) == small
    for row in rows:  # a step row: the state as the policy saw it, the loss on the step's action only
        s, e = row.turns[-1].token_span
        assert row.loss_mask == [0] * s + [1] * (e - s) and len(row.token_ids) == e
        assert tok.decode(row.token_ids[s:e], skip_special_tokens=True) == row.turns[-1].action.content
    # step-wise filtering: a verdict that is not the truth, and a check whose result misled, are left out
    bad = trajs[0].model_copy(deep=True)
    bad.turns[2].info.update(verdict_correct=False)
    bad.turns[2].info.update(check_says_right=not bad.turns[0].info["correct"])
    _, r2 = checking_rows([bad], balance="none")
    assert (r2["rows"], r2["dropped_steps"]) == (0, 2)
    with pytest.raises(ValueError, match="verify_tools=True"):
        env = turnrl.make("turnrl/Arithmetic-PAG-v0")
        env.reset(seed=0)
        env.step("\\boxed{1}")
        CheckingTeacher(tok)([env], ["verifier"], [[1]], [None])
    # the command: the same rows from a tiny model's answers (mostly wrong: balanced down to the right ones)
    out = tmp_path / "checks.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "pag",
            "checks",
            "--env",
            "turnrl/Arithmetic-PAG-v0",
            "--agent",
            "tiny:chatml",
            "--out",
            str(out),
            "--tasks",
            "4",
            "--max-new-tokens",
            "8",
            "--kw",
            "calculator=true",
            "--kw",
            "tool_style=tags",
            "--kw",
            "verify_tools=true",
            "--balance",
            "none",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "rows in" in result.output and len(load(out)) == 8  # four episodes: a tool call and a verdict each
    assert all(r.metadata["item"] for r in load(out))  # stored with their problems: a run checks them (held out)
    refused = CliRunner().invoke(
        app,
        [
            "pag",
            "checks",
            "--env",
            "turnrl/Arithmetic-PAG-v0",
            "--agent",
            "tiny:chatml",
            "--out",
            str(tmp_path / "x.jsonl"),
        ],
    )
    assert refused.exit_code != 0 and "verify_tools=true" in refused.output


def test_gsm8k_pag_verifies_with_the_calculator_on_its_last_calculation():
    from turnrl.methods.pag.check_rows import check_call, check_verdict

    env = turnrl.make("turnrl/GSM8K-PAG-v0", calculator=True, tool_style="tags", verify_tools=True)
    env.reset(seed=0)
    wrong = str(int(float(env.task.answer)) + 1)
    env.step(f"\\boxed{{{wrong}}}")
    call = check_call(env)
    assert call is not None and call.startswith("<calculator>")
    obs, _r, term, _, info = env.step(call)
    assert float(obs[0].content) == float(env.task.answer) and info["verify_tool"] and not term
    verdict = check_verdict(env)
    assert verdict.endswith("The answer is wrong.") and f"the answer was {wrong}" in verdict
    info = env.step(verdict)[4]
    assert (info["verdict"], info["check_says_right"], info["tool_agreed"]) == ("wrong", False, True)


def test_recall_answer_puts_the_first_answer_beside_the_first_check_only():
    env = tool_pag(recall_answer=True)
    env.reset(seed=0)  # 39 - 23
    env.step("\\boxed{15}")
    obs, r, term, _, info = env.step("<calculator>39 - 23</calculator>")
    assert [(m.role, m.content) for m in obs] == [("tool", "16"), ("user", "Your answer was 15.")]
    assert r == 0 and not term and info["next_role"] == "verifier"
    obs = env.step("<calculator>16 - 15</calculator>")[0]  # a second call: its result alone
    assert [m.content for m in obs] == ["1"]
    env = tool_pag(recall_answer=True)
    env.reset(seed=0)
    env.step("I do not know.")  # nothing extracted: said so, and the check cannot agree with it
    assert env.step("<calculator>39 - 23</calculator>")[0][-1].content == "Your answer stated no result."
    info = env.step("The answer is wrong.")[4]
    assert info["verdict_correct"] and info["check_says_right"] is False
    with pytest.raises(ValueError, match="recall_answer .* needs verify_tools=True"):
        turnrl.make("turnrl/Arithmetic-PAG-v0", calculator=True, recall_answer=True)


def test_a_hook_that_claims_a_turn_but_writes_nothing_ends_the_round_with_a_clear_error():
    """A rollout hook's writes() keeps the agent from sampling a turn; a hook that then returns no completion for it
    ends those episodes with an error that says so (never a silent empty turn)."""
    tok = tiny_tokenizer("chatml")

    class Lazy:
        def writes(self, env, role):
            return role == "verifier"

        def __call__(self, envs, roles, prompts, completions):
            assert all(c.token_ids == [] for c, r in zip(completions, roles) if r == "verifier")
            return [None] * len(completions)

    agent = ScriptedAgent(tok, lambda prompt: "\\boxed{1}")
    envs = [turnrl.make("turnrl/Arithmetic-PAG-v0", level=1) for _ in range(2)]
    trajs = Rollout(agent, SamplingParams(max_new_tokens=16), rewrite=Lazy()).run(envs, seeds=[0, 1])
    for t in trajs:
        assert [tu.role for tu in t.turns] == ["policy"]  # the first answers are kept
        assert "writes() claimed turns [0, 1]" in t.error

    class Broken(Lazy):
        def writes(self, env, role):
            raise RuntimeError("the hook's own bug")

    envs = [turnrl.make("turnrl/Arithmetic-PAG-v0", level=1) for _ in range(2)]
    trajs = Rollout(agent, SamplingParams(max_new_tokens=16), rewrite=Broken()).run(envs, seeds=[0, 1])
    assert all(t.error and "the hook's own bug" in t.error and not t.turns for t in trajs)  # an error, not a crash


def test_a_code_verifier_runs_the_candidate_on_an_example_in_the_sandbox():
    """HumanEval-PAG with the python tool in the verify turn (a real sandbox): the verifier runs the candidate on
    one of the problem's examples, reads the output, and its verdict is rewarded as in §7; a failing or endless
    check is an observation, not a crash; token-exact through a rollout."""
    # a generous timeout for the checks that finish (a loaded machine starts a sandbox slowly), a short one below
    kw = {"limit": 1, "python": True, "tool_style": "tags", "verify_tools": True, "timeout": 30}
    env = turnrl.make("turnrl/HumanEval-PAG-v0", **kw)
    env.reset(seed=0)
    assert "run your code on the problem's examples" in env.unwrapped.verify_prompt
    assert "<python>INPUT</python>" in env.unwrapped.verify_prompt
    wrong = "def has_close_elements(numbers, threshold):\n    return False\n"
    obs, reward, *_ = env.step(f"```python\n{wrong}```")
    assert reward == 0.0
    check = f"<python>{wrong}print(has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3))</python>"
    obs, reward, done, _, info = env.step(check)
    assert [m.content for m in obs] == ["False"] and info["verify_tool"] and info["role"] == "verifier"
    obs, reward, done, _, info = env.step("<python>raise ValueError('no')</python>")  # the second, last call
    assert "ValueError: no" in obs[0].content and not done
    obs, reward, done, _, info = env.step("It printed False where the example says True. The answer is wrong.")
    assert (reward, info["verdict"], info["verify_tool_calls"]) == (1.0, "wrong", 2) and not done
    # an endless check stops at the sandbox's timeout and comes back as the tool's result
    env = turnrl.make("turnrl/HumanEval-PAG-v0", **{**kw, "timeout": 2})
    env.reset(seed=0)
    env.step(f"```python\n{wrong}```")
    obs, *_ = env.step("<python>while True:\n    pass</python>")
    assert "stopped" in obs[0].content and "timeout" in obs[0].content
    # no tools without python=True: a clear error, not a silent no-op
    with pytest.raises(ValueError, match="code: python=True"):
        turnrl.make("turnrl/HumanEval-PAG-v0", limit=1, verify_tools=True)
    # token-exact through a rollout: the answer, the check (a tool turn of the verifier), the verdict, the revision
    tok = tiny_tokenizer("chatml")

    def policy(prompt):
        if prompt.rstrip().endswith("Please provide the correct solution.<|im_end|>\n<|im_start|>assistant"):
            return (
                "```python\ndef has_close_elements(numbers, threshold):\n    return any(abs(a - b) < threshold "
                "for i, a in enumerate(numbers) for b in numbers[i + 1:])\n```"
            )
        if "<|im_start|>tool" in prompt:
            return "The answer is wrong."
        if "Check the solution" in prompt:
            return check
        return f"```python\n{wrong}```"

    [traj] = Rollout(ScriptedAgent(tok, policy), SamplingParams(max_new_tokens=200)).run(
        [turnrl.make("turnrl/HumanEval-PAG-v0", **kw)], seeds=[0]
    )
    assert traj.error is None, traj.error
    assert [(t.role, t.info["phase"]) for t in traj.turns] == [
        ("policy", "answer"),
        ("verifier", "verify"),
        ("verifier", "verify"),
        ("policy", "revise"),
    ]
    assert traj.turns[1].observation[0].content == "False"
    assert [t.reward for t in traj.turns] == [0.0, 0.0, 1.0, 2.0]  # wrong -> "wrong" -> right
    for t in traj.turns:  # each action's tokens are exactly what the agent produced
        s, e = t.token_span
        assert tok.decode(traj.token_ids[s:e], skip_special_tokens=True) == t.action.content
