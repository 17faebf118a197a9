"""SWiRL's training side (docs/algorithms.md §1, §10): step judges, the states source, ``swirl`` and ``sft``."""

import pytest
import torch
import toy_envs  # noqa: F401 — registers tests/Upper-v0
from tiny_trainer import train_tiny

import turnrl
from turnrl.agents.base import SamplingParams
from turnrl.agents.scripted import FixedAgent, ScriptedAgent
from turnrl.agents.tiny import tiny_tokenizer
from turnrl.methods.swirl.judges import LLMStepJudge, RuleStepJudge, StepLabel, make_step_judge
from turnrl.methods.swirl.reading import parse_step
from turnrl.methods.swirl.source import StateError, StateSource
from turnrl.methods.swirl.steps import decompose_all
from turnrl.rl.algorithms import get_algorithm
from turnrl.rl.algorithms.base import Experience, Forward
from turnrl.rl.core.batch import collate
from turnrl.rl.formulas.advantages import leave_one_out
from turnrl.rl.run.trainer import TrainConfig, Trainer
from turnrl.rollout.engine import Rollout
from turnrl.storage import save
from turnrl.types import Message, Trajectory, Turn


def episode(question, steps, system="Examples: <math_exp>12 * 7</math_exp> 12 * 7 -> 84 <answer>84</answer>"):
    """A text-only trajectory: ``steps`` = [(action, tool result or None)]."""
    turns = [
        Turn(
            index=i,
            action=Message(role="assistant", content=a),
            observation=[Message(role="tool", name="calculator", content=o)] if o else [],
        )
        for i, (a, o) in enumerate(steps)
    ]
    return Trajectory(
        prompt=[Message(role="system", content=system), Message(role="user", content=question)], turns=turns
    )


def labels(question, steps):
    return [lb.good for lb in RuleStepJudge().label_trajectory(episode(question, steps))]


# ---- the formula ----


def test_leave_one_out_subtracts_the_mean_of_the_other_samples():
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 5.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    adv = leave_one_out(scores, groups)
    assert torch.allclose(adv, torch.tensor([1.0, -0.5, -0.5, 0.0, 0.0, 0.0]))  # a group of one gets 0
    for g in (0, 1):  # per group the advantages sum to 0 (G/(G-1) times the mean-centred reward)
        assert abs(float(adv[groups == g].sum())) < 1e-6


# ---- the rule judge, and attempts to game it ----


def test_a_grounded_calculation_whose_result_is_the_answer_is_good():
    q = "What is 23 + 45?"
    assert labels(q, [("<math_exp>23 + 45</math_exp>", "23 + 45 -> 68"), ("<answer>68</answer>", None)]) == [True, True]
    # two steps: the second uses the first's result
    q = "Ava has 5 bags of 12 apples and gives away 7. How many are left?"
    assert labels(
        q,
        [
            ("<math_exp>5 * 12</math_exp>", "5 * 12 -> 60"),
            ("<math_exp>60 - 7</math_exp>", "60 - 7 -> 53"),
            ("<answer>53</answer>", None),
        ],
    ) == [True, True, True]


@pytest.mark.parametrize(
    "steps, bad_step, why",
    [
        # made-up operands: the number 46 is in neither the question nor a result
        (
            [("<math_exp>23 + 46</math_exp>", "23 + 46 -> 69"), ("<answer>69</answer>", None)],
            0,
            "neither in the question",
        ),
        # the demos' numbers in the system prompt are not the question's
        (
            [("<math_exp>12 * 7</math_exp>", "12 * 7 -> 84"), ("<answer>84</answer>", None)],
            0,
            "neither in the question",
        ),
        # a calculation whose result is never used, then a guess
        ([("<math_exp>23 + 45</math_exp>", "23 + 45 -> 68"), ("<answer>70</answer>", None)], 0, "never used"),
        # the same calculation twice to farm GOOD steps
        (
            [
                ("<math_exp>23 + 45</math_exp>", "23 + 45 -> 68"),
                ("<math_exp>23+45</math_exp>", "23+45 -> 68"),
                ("<answer>68</answer>", None),
            ],
            1,
            "repeats",
        ),
        # what SWiRL training on SmolLM2 first learned to farm: "calculating" the last result again instead of answering
        (
            [
                ("<math_exp>23 + 45</math_exp>", "23 + 45 -> 68"),
                ("<math_exp>68</math_exp>", "68 -> 68"),
                ("<answer>68</answer>", None),
            ],
            1,
            "computes nothing",
        ),
        (
            [
                ("<math_exp>23 + 45</math_exp>", "23 + 45 -> 68"),
                ("<math_exp>(68)</math_exp>", "(68) -> 68"),
                ("<answer>68</answer>", None),
            ],
            1,
            "computes nothing",
        ),
        (
            [
                ("<math_exp>23 + 45</math_exp>", "23 + 45 -> 68"),
                ("<math_exp>68 + 45 - 45</math_exp>", "68 + 45 - 45 -> 68"),
                ("<answer>68</answer>", None),
            ],
            1,
            "already known",
        ),
        # answering without any tool result (a guess, even a right one)
        ([("<answer>68</answer>", None)], 0, "no tool result"),
        # two calls in one step, an unclosed tag, free text, an expression that does not evaluate, an empty answer
        (
            [("<math_exp>23 + 45</math_exp><math_exp>45 + 23</math_exp>", "x"), ("<answer>68</answer>", None)],
            0,
            "2 tool",
        ),
        ([("<math_exp>23 + 45", None)], 0, "never closed"),
        ([("The answer is 68.", None)], 0, "neither a tool call"),
        ([("<math_exp>23 +* 45</math_exp>", "error")], 0, "does not evaluate"),
        ([("<math_exp>23 + 45</math_exp>", "23 + 45 -> 68"), ("<answer></answer>", None)], 1, "empty answer"),
    ],
)
def test_the_rule_judge_refuses_what_a_policy_could_exploit(steps, bad_step, why):
    result = RuleStepJudge().label_trajectory(episode("What is 23 + 45?", steps))
    assert result[bad_step].good is False and why in result[bad_step].reason, result[bad_step]


def test_search_steps_must_be_new_and_find_something_new():
    def ep(steps):
        turns = [
            Turn(
                index=i,
                action=Message(role="assistant", content=a),
                observation=[Message(role="tool", name="search", content=f"{a} -> {o}")] if o is not None else [],
            )
            for i, (a, o) in enumerate(steps)
        ]
        return Trajectory(prompt=[Message(role="user", content="Who directed Jaws?")], turns=turns)

    judge = RuleStepJudge()
    good = ep(
        [
            ("<search_query>Jaws film</search_query>", "Jaws is a 1975 film directed by Steven Spielberg."),
            ("<answer>Steven Spielberg</answer>", None),
        ]
    )
    assert [lb.good for lb in judge.label_trajectory(good)] == [True, True]
    repeat = ep(
        [
            ("<search_query>Jaws film</search_query>", "Jaws is a film."),
            ("<search_query>jaws  FILM</search_query>", "Jaws is a film."),
        ]
    )
    assert [lb.good for lb in judge.label_trajectory(repeat)] == [True, False]
    same_result = ep(
        [
            ("<search_query>Jaws film</search_query>", "Jaws is a film."),
            ("<search_query>Jaws movie</search_query>", "Jaws is a film."),
        ]
    )
    assert "nothing new" in judge.label_trajectory(same_result)[1].reason
    empty = ep([("<search_query> </search_query>", ""), ("<search_query>Jaws</search_query>", "no results")])
    assert [lb.good for lb in judge.label_trajectory(empty)] == [False, False]
    unsupported = ep(
        [
            ("<search_query>Jaws film</search_query>", "Jaws is a 1975 film."),
            ("<answer>Steven Spielberg</answer>", None),
        ]
    )
    assert judge.label_trajectory(unsupported)[1].good is False  # not in any retrieved result
    copied = ep(
        [
            (
                "<search_query>Jaws film</search_query>",
                "Jaws is a 1975 American thriller film directed by Steven "
                "Spielberg, based on the novel by Peter Benchley.",
            ),
            ("<answer>Jaws is a 1975 American thriller film directed by Steven Spielberg</answer>", None),
        ]
    )
    label = judge.label_trajectory(copied)[1]  # found in the result, but a copied passage, not an answer
    assert label.good is False and "not a short answer" in label.reason


def qa_episode(question, steps):
    """A HotPotQA-style trajectory: ``steps`` = [(action, "TITLE: TEXT" or None)], results shown as the SWiRL env
    shows them (``QUERY -> TITLE: TEXT``)."""
    turns = []
    for i, (a, hit) in enumerate(steps):
        query = parse_step(a).text
        obs = [Message(role="tool", name="search", content=f"{query} -> {hit}")] if hit is not None else []
        turns.append(Turn(index=i, action=Message(role="assistant", content=a), observation=obs))
    return Trajectory(prompt=[Message(role="user", content=question)], turns=turns)


JAWS = "Jaws (film): Jaws is a 1975 American thriller film directed by Steven Spielberg, known for its score."
DUEL = "Duel (1971 film): Duel is a 1971 television film directed by Steven Spielberg."


@pytest.mark.parametrize(
    "question, searches, answer, good, why",
    [
        ("Who directed Jaws?", [JAWS], "Steven Spielberg", True, "found in a retrieved text"),
        # what SWiRL on HotPotQA learned first: "No" to everything ("no" is inside "known"; not a word of the text)
        ("Who directed Jaws?", [JAWS, DUEL], "No", False, "does not ask yes or no"),
        ("Who composed the score of Jaws?", [JAWS], "kno", False, "found in no retrieved text"),
        # yes/no needs a yes/no question and both sides searched
        ("Were Jaws and Duel directed by the same person?", [JAWS], "yes", False, "fewer than two searches"),
        ("Were Jaws and Duel directed by the same person?", [JAWS, DUEL], "yes", True, "yes/no"),
        # the title of what the search returned is not an answer; the question's own words are not one either
        (
            "Which film did Spielberg make in 1975?",
            ["Jaws 2: The 1978 sequel, by Jeannot Szwarc."],
            "Jaws 2",
            False,
            "no retrieved",
        ),
        ("Who directed the film Jaws?", [JAWS], "Jaws", False, "every word of it is in the question"),
        ("Who directed the film Jaws?", [JAWS], "the film", False, "every word of it is in the question"),
        ("Who directed Jaws?", [JAWS], "the", False, "only stop words"),
        # ... unless the question offers the choice
        ("Which is older, Jaws or Duel?", [JAWS, DUEL], "Duel", True, "found in a retrieved text"),
    ],
)
def test_answers_come_from_retrieved_text_not_from_the_question_a_title_or_a_guessed_no(
    question, searches, answer, good, why
):
    steps = [(f"<search_query>q{i}</search_query>", hit) for i, hit in enumerate(searches)]
    row = qa_episode(question, [*steps, (f"<answer>{answer}</answer>", None)])
    label = RuleStepJudge().label_rows([row])[0]
    assert label.good is good and why in label.reason, label


def test_max_searches_makes_searching_on_instead_of_answering_bad(tmp_path):
    hits = [JAWS, DUEL, "Spielberg: Steven Spielberg is an American film director.", "E.T.: E.T. is a 1982 film."]
    steps = [(f"<search_query>q{i}</search_query>", hit) for i, hit in enumerate(hits)]
    row = qa_episode("Who directed Jaws?", steps)
    assert [lb.good for lb in RuleStepJudge().label_trajectory(row)] == [True] * 4  # new searches: always GOOD
    capped = RuleStepJudge(max_searches=2).label_trajectory(row)
    assert [lb.good for lb in capped] == [True, True, False, False] and "at most 2" in capped[2].reason
    # from a run's config, and a wrong option is an error that names the right ones
    cfg = TrainConfig.model_validate(
        {
            "env": {"id": "turnrl/HotPotQA-v0"},
            "data": {"path": str(tmp_path / "x.parquet")},
            "algorithm": {"name": "swirl", "judge_options": {"max_searches": 2}},
        }
    )
    assert cfg.algorithm.judge_options == {"max_searches": 2}
    assert make_step_judge("rule", **cfg.algorithm.judge_options).max_searches == 2  # what StateSource builds
    with pytest.raises(ValueError, match="max_answer_words, max_searches"):
        TrainConfig.model_validate(
            {
                "env": {"id": "turnrl/HotPotQA-v0"},
                "data": {"path": "x.parquet"},
                "algorithm": {"name": "swirl", "judge_options": {"searches": 2}},
            }
        )
    with pytest.raises(ValueError, match="max_searches >= 1"):
        RuleStepJudge(max_searches=0)


def test_the_rule_judge_finds_hotpotqas_gold_answers_good_given_the_supporting_paragraphs():
    from turnrl.envs.builtin.hotpotqa import hotpotqa_tasks

    tasks = hotpotqa_tasks("dev")
    verdicts, no_everywhere = [], []
    for task in tasks:
        support = [f"{t}: {x}" for t, x in task.metadata["context"] if t in task.metadata["supporting_titles"]]
        steps = [(f"<search_query>{t.split(':')[0]}</search_query>", hit) for t, hit in zip(support, support)]
        verdicts.append(
            RuleStepJudge()
            .label_rows([qa_episode(task.prompt, [*steps, (f"<answer>{task.answer}</answer>", None)])])[0]
            .good
        )
        no_everywhere.append(
            RuleStepJudge().label_rows([qa_episode(task.prompt, [*steps, ("<answer>no</answer>", None)])])[0].good
        )
    assert sum(verdicts) >= 0.95 * len(tasks)  # 491 of 500 on the shared dev file
    gold_no = sum(t.answer.strip().lower() == "no" for t in tasks)
    assert sum(no_everywhere) <= 2 * gold_no + 5  # "no" is GOOD only on the few yes/no questions


def test_rows_are_judged_on_their_last_step_without_looking_ahead():
    row = episode("What is 23 + 45?", [("<math_exp>23 + 45</math_exp>", "23 + 45 -> 68")])
    assert RuleStepJudge().label_rows([row])[0].good is True  # a whole trajectory would also need its use later
    assert RuleStepJudge().label_trajectory(row)[0].good is False
    # the fresh step SWiRL samples at the answer state: a no-op "calculation" of the known result is BAD, the answer GOOD
    for step, good in (
        ("<math_exp>68</math_exp>", False),
        ("<math_exp>23 + 45</math_exp>", False),
        ("<answer>68</answer>", True),
    ):
        fresh = episode("What is 23 + 45?", [("<math_exp>23 + 45</math_exp>", "23 + 45 -> 68"), (step, None)])
        assert RuleStepJudge().label_rows([fresh])[0].good is good, step


def test_the_llm_judge_sees_no_gold_answer_and_never_reads_an_unparseable_reply_as_good():
    tok = tiny_tokenizer("chatml")
    seen = []

    def judge_policy(prompt):
        seen.append(prompt)
        step = prompt.rsplit("Last step:", 1)[1]
        return "Fine.\nGOOD" if "<math_exp>" in step else ("Nope.\nBAD" if "<answer>" in step else "It depends.")

    judge = LLMStepJudge(ScriptedAgent(tok, judge_policy, end_with_eos=False))
    traj = episode(
        "What is 23 + 45?",
        [("<math_exp>23 + 45</math_exp>", "23 + 45 -> 68"), ("<answer>68</answer>", None), ("hmm", None)],
    )
    traj.metadata["gold"] = "SECRET-GOLD-68"
    got = judge.label_trajectory(traj)
    assert [lb.good for lb in got] == [True, False, None] and "unparseable" in got[2].reason
    assert StepLabel(None).score == 0.0 and seen and not any("SECRET-GOLD" in p for p in seen)
    assert "23 + 45 -> 68" in seen[1]  # the context holds the earlier step and its result


# ---- the algorithm ----


def _one_group(rewards, tok):
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    trajs = []
    for r in rewards:
        gen = tok.encode("Yes")
        trajs.append(
            Trajectory(
                group_id="g",
                prompt=[Message(role="user", content="hi")],
                turns=[
                    Turn(
                        index=0,
                        action=Message(role="assistant", content="Yes"),
                        reward=r,
                        token_span=(len(ids), len(ids) + len(gen)),
                    )
                ],
                token_ids=ids + gen,
                loss_mask=[0] * len(ids) + [1] * len(gen),
                logprobs=[0.0] * len(ids) + [-1.0] * len(gen),
            )
        )
    return collate(trajs, tok.pad_token_id)


@pytest.mark.parametrize("baseline", ["rloo", "normalize"])
def test_flipping_the_reward_sign_flips_the_update(baseline):
    tok = tiny_tokenizer("chatml")
    alg = get_algorithm({"name": "swirl", "baseline": baseline})
    grads = []
    for sign in (1.0, -1.0):
        batch = _one_group([sign * 1.0, 0.0, sign * 1.0, 0.0], tok)
        adv, _ = alg.advantages(batch, 8)
        logp = batch.old_logp.clone().requires_grad_(True)
        loss, _ = alg.loss(
            Forward(logp=logp, entropy=torch.zeros_like(logp)), Experience(batch, adv), alg.counts(batch)
        )
        loss.backward()
        grads.append(logp.grad.clone())
    assert grads[0].abs().sum() > 0 and torch.allclose(grads[0], -grads[1])


def test_configs_say_what_swirl_and_sft_need(tmp_path):
    with pytest.raises(ValueError, match="turnrl swirl decompose"):
        TrainConfig.model_validate({"env": {"id": "turnrl/Arithmetic-v0"}, "algorithm": {"name": "swirl"}})
    with pytest.raises(ValueError, match="drop data.batch_size"):
        TrainConfig.model_validate(
            {
                "env": {"id": "turnrl/Arithmetic-v0"},
                "algorithm": {"name": "swirl"},
                "data": {"path": "x.parquet", "batch_size": 8},
            }
        )
    with pytest.raises(ValueError, match="needs `judge`"):
        TrainConfig.model_validate(
            {
                "env": {"id": "turnrl/Arithmetic-v0"},
                "algorithm": {"name": "swirl", "reward": "judge"},
                "data": {"path": "x.parquet"},
            }
        )
    with pytest.raises(ValueError, match="trains offline"):
        TrainConfig.model_validate({"env": {"id": "turnrl/Arithmetic-v0"}, "algorithm": {"name": "sft"}})
    with pytest.raises(ValueError, match="an algorithm that trains from it .*sft, swirl"):
        TrainConfig.model_validate({"env": {"id": "turnrl/Arithmetic-v0"}, "data": {"path": "x.parquet"}})
    cfg = TrainConfig.model_validate(
        {
            "env": {"id": "turnrl/Arithmetic-v0"},
            "algorithm": {"name": "swirl"},
            "data": {"path": str(tmp_path / "none.parquet")},
            "model": "tiny",
        }
    )
    with pytest.raises(StateError, match="no such file"):
        Trainer(cfg)  # before any model is loaded


# ---- the states source on real SWiRL-format episodes ----


def _arith_rows(tmp_path, tok):
    """Step rows of scripted Arithmetic episodes in the SWiRL format (calculator, then the answer)."""
    env_kwargs = {"level": 2, "tool_style": "swirl", "demos": "none"}
    env = turnrl.make("turnrl/Arithmetic-v0", **env_kwargs)
    obs, _ = env.reset(options={"index": 0})
    q = obs[-1].content.split("What is ", 1)[1].split("?")[0]
    agent = FixedAgent(tok, [f"<math_exp>{q}</math_exp>", f"<answer>{eval(q)}</answer>"])
    trajs = Rollout(agent, SamplingParams(max_new_tokens=32)).run(
        [turnrl.make("turnrl/Arithmetic-v0", **env_kwargs)],
        seeds=[0],
        options=[{"index": 0}],
        metadata=[{"dataset": {"env_id": "turnrl/Arithmetic-v0", "env_kwargs": env_kwargs}, "task_index": 0}],
    )
    assert trajs[0].correct and trajs[0].error is None
    rows = decompose_all(trajs)
    path = tmp_path / "rows.parquet"
    save(rows, path)
    return path, rows, q


def test_the_source_samples_from_the_exact_state_and_runs_the_step_in_the_replayed_env(tmp_path):
    tok = tiny_tokenizer("chatml")
    path, rows, q = _arith_rows(tmp_path, tok)
    cfg = TrainConfig.model_validate(
        {
            "model": "tiny",
            "env": {"id": "turnrl/Arithmetic-v0", "kwargs": {"level": 2, "tool_style": "swirl", "demos": "none"}},
            "algorithm": {"name": "swirl"},
            "data": {"path": str(path), "shuffle": False},
            "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 64},
        }
    )
    # a policy that recomputes at the first state and answers 0 at the second
    policy = ScriptedAgent(
        tok,
        lambda p: "<answer>0</answer>" if "->" in p.rsplit("<|im_start|>user", 1)[1] else f"<math_exp>{q}</math_exp>",
        end_with_eos=False,
    )
    source = StateSource(cfg, policy)
    samples, metrics = source.collect(0)
    assert len(samples) == 4 and metrics["states"] == 2
    for k, s in enumerate(samples):
        row = rows[k // 2]
        start = row.turns[-1].token_span[0]
        assert s.token_ids[:start] == row.token_ids[:start]  # token-exact state
        assert s.loss_mask == [0] * start + [1] * (len(s.token_ids) - start)
        assert s.group_id == f"0-{row.id}"
    calc, answer = samples[0].turns[-1], samples[2].turns[-1]
    assert calc.observation[0].content == f"{q} -> {eval(q)}" and calc.reward == 1.0  # ran, grounded
    assert (
        answer.info["correct"] is False
        and answer.reward == 0.0
        and "equals no tool result" in answer.info["step_reason"]
    )
    assert metrics["step_good"] == 0.5 and metrics["step_calculator"] == 0.5
    # a stored observation the env does not reproduce: the state cannot be replayed
    bad = rows[1].model_copy(deep=True)
    bad.turns[0].observation[0].content = "tampered"
    save([bad], tmp_path / "bad.parquet")
    cfg2 = cfg.model_copy(update={"data": cfg.data.model_copy(update={"path": str(tmp_path / "bad.parquet")})})
    with pytest.raises(StateError, match="not deterministic"):
        StateSource(cfg2, policy).collect(0)


def test_rollout_rewards_score_the_end_of_the_episode(tmp_path):
    tok = tiny_tokenizer("chatml")
    path, _rows, q = _arith_rows(tmp_path, tok)
    cfg = TrainConfig.model_validate(
        {
            "model": "tiny",
            "env": {"id": "turnrl/Arithmetic-v0", "kwargs": {"level": 2, "tool_style": "swirl", "demos": "none"}},
            "algorithm": {"name": "swirl", "reward": "rollout"},
            "data": {"path": str(path), "shuffle": False},
            "rollout": {"prompts_per_step": 1, "group_size": 2, "max_new_tokens": 64},
        }
    )
    answer = str(eval(q))
    # after the calculator step, the policy copies the result; a first step that guesses ends wrong at once
    policy = ScriptedAgent(
        tok,
        lambda p: (
            f"<answer>{answer}</answer>" if "->" in p.rsplit("<|im_start|>user", 1)[1] else f"<math_exp>{q}</math_exp>"
        ),
        end_with_eos=False,
    )
    samples, _ = StateSource(cfg, policy).collect(0)
    assert [s.turns[-1].reward for s in samples] == [1.0, 1.0]  # calculator step, then played on to the answer
    assert samples[0].metadata["swirl"]["rollout_turns"] == 1


class AlwaysGood:
    """A step judge that finds every step GOOD."""

    def label_rows(self, rows):
        return [StepLabel(True, "good") for _ in rows]


def test_final_outcome_weighs_the_environments_reward_into_a_final_steps_label(tmp_path):
    tok = tiny_tokenizer("chatml")
    path, _rows, q = _arith_rows(tmp_path, tok)
    answer = int(eval(q))
    base = {
        "model": "tiny",
        "env": {"id": "turnrl/Arithmetic-v0", "kwargs": {"level": 2, "tool_style": "swirl", "demos": "none"}},
        "data": {"path": str(path), "shuffle": False},
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 64},
    }
    # the calculator at the first state; at the answer state one right and one wrong (but "GOOD") answer
    replies = iter(
        [
            f"<math_exp>{q}</math_exp>",
            f"<math_exp>{q}</math_exp>",
            f"<answer>{answer}</answer>",
            f"<answer>{answer + 1}</answer>",
        ]
        * 3
    )
    rewards = {}
    for outcome in (0.0, 1.0, 0.5):
        cfg = TrainConfig.model_validate({**base, "algorithm": {"name": "swirl", "final_outcome": outcome}})
        policy = ScriptedAgent(tok, lambda p: next(replies), end_with_eos=False)
        samples, _ = StateSource(cfg, policy, judge=AlwaysGood()).collect(0)
        rewards[outcome] = [s.turns[-1].reward for s in samples]
    assert rewards[0.0] == [1.0, 1.0, 1.0, 1.0]
    assert rewards[1.0] == [1.0, 1.0, 1.0, 0.0]  # the wrong answer: GOOD to the judge, 0 from the environment
    assert rewards[0.5] == [1.0, 1.0, 1.0, 0.5]  # GOOD × (1 − w + w·R)
    with pytest.raises(ValueError, match="final_outcome"):
        TrainConfig.model_validate({**base, "algorithm": {"name": "swirl", "final_outcome": 1, "reward": "rollout"}})


# ---- learning ----


def _upper_rows(tmp_path, tok):
    agent = FixedAgent(tok, ["ok"])
    trajs = Rollout(agent, SamplingParams(max_new_tokens=4)).run(
        [turnrl.make("tests/Upper-v0") for _ in range(8)], options=[{"index": i} for i in range(8)]
    )
    path = tmp_path / "upper-rows.parquet"
    save(decompose_all(trajs), path)
    return path


class CapitalJudge:
    """A scripted step judge: a step is GOOD when it starts with a capital letter."""

    def label_rows(self, rows):
        return [StepLabel(r.turns[-1].action.content.strip()[:1].isupper()) for r in rows]

    def label_trajectory(self, traj):
        return self.label_rows([traj])


def test_swirl_raises_the_mean_step_reward_on_a_toy_env(tmp_path, trainer_of):
    tok = tiny_tokenizer("chatml")
    cfg = TrainConfig(
        model="tiny",
        env={"id": "tests/Upper-v0"},
        algorithm={"name": "swirl", "execute": False},
        data={"path": str(_upper_rows(tmp_path, tok))},
        rollout={"prompts_per_step": 4, "group_size": 8, "max_new_tokens": 4},
        optim={"lr": 3e-2, "minibatch_size": 16},
        steps=30,
        eval_tasks=4,
        out_dir=str(tmp_path / "run"),
        save_trajectories=False,
    )
    trainer = trainer_of(cfg, tok)
    trainer.source.judge = CapitalJudge()
    history = trainer.train()
    reward = [h["reward_mean"] for h in history[1:]]
    early, late = sum(reward[:5]) / 5, sum(reward[-5:]) / 5
    assert late > early + 0.3, (early, late)
    # fresh steps after stored prefixes: not the stored episodes' sampling record (the guard checks the step's own)
    assert all(h["guard_violations"] == 0 and h["guard_token_mismatch"] == 0 for h in history[1:])


def test_sft_imitates_every_stored_row(tmp_path):
    tok = tiny_tokenizer("chatml")
    path = _upper_rows(tmp_path, tok)  # "ok" is a wrong answer in this env: rft would train on nothing
    cfg = TrainConfig(
        model="tiny",
        env={"id": "tests/Upper-v0"},
        algorithm={"name": "sft"},
        data={"path": str(path), "batch_size": 8},
        optim={"lr": 3e-2, "minibatch_size": 8},
        steps=15,
        eval_tasks=4,
        out_dir=str(tmp_path / "run"),
        save_trajectories=False,
    )
    history = train_tiny(cfg, tok)
    nll = [h["nll"] for h in history[1:]]
    assert history[1]["sft_rows"] == 8 and nll[-1] < 0.5 * nll[0], nll
    assert "zero_variance_groups" not in history[1]  # stored rows are no sampled groups: no "no signal" warning


class ExactJudge:
    """A scripted step judge: only the stored step's exact text is GOOD (a random tiny model never writes it)."""

    def __init__(self, text):
        self.text = text

    def label_rows(self, rows):
        return [StepLabel(r.turns[-1].action.content == self.text) for r in rows]

    def label_trajectory(self, traj):
        return self.label_rows([traj])


def test_data_action_puts_the_stored_step_in_each_group_and_pulls_the_policy_to_it(tmp_path, trainer_of):
    from turnrl.rl.core.forward import sequence_logprobs

    tok = tiny_tokenizer("chatml")
    good = "Zebra crossing"
    trajs = Rollout(FixedAgent(tok, [good]), SamplingParams(max_new_tokens=32)).run(
        [turnrl.make("tests/Upper-v0") for _ in range(8)], options=[{"index": i} for i in range(8)]
    )
    rows = decompose_all(trajs)
    save(rows, tmp_path / "rows.parquet")

    def trainer(data_action, steps):
        cfg = TrainConfig(
            model="tiny",
            env={"id": "tests/Upper-v0"},
            algorithm={"name": "swirl", "execute": False, "data_action": data_action},
            data={"path": str(tmp_path / "rows.parquet"), "shuffle": False},
            rollout={"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 16},
            optim={"lr": 3e-2, "minibatch_size": 16},
            steps=steps,
            eval_tasks=4,
            out_dir=str(tmp_path / f"run-{data_action}"),
            save_trajectories=False,
        )
        t = trainer_of(cfg, tok)
        t.source.judge = ExactJudge(good)
        return t

    def stored_logp(t):
        return sum(
            sum(sequence_logprobs(t.learner.model, [r.token_ids])[0][r.turns[-1].token_span[0] :]) for r in rows
        ) / len(rows)

    # the source: 3 fresh steps and the stored one per state, token-exact, scored by the current policy
    t = trainer(True, 1)
    samples, metrics = t.source.collect(0)
    assert len(samples) == 16 and [s.metadata["swirl"]["data_action"] for s in samples[:4]] == [False] * 3 + [True]
    stored = samples[3]
    assert stored.token_ids == rows[0].token_ids and stored.turns[-1].action.content == good
    start = rows[0].turns[-1].token_span[0]
    expected = sequence_logprobs(t.learner.model, [rows[0].token_ids])[0][start:]
    assert stored.logprobs[start:] == pytest.approx(expected, abs=1e-5)
    assert metrics["data_step_good"] == 1.0 and metrics["step_good"] == 0.0  # the policy's own steps apart
    assert metrics["states"] == 4
    # training: without the stored step every group is all-BAD and nothing is learned; with it the policy moves to it
    plain, guided = trainer(False, 8), trainer(True, 8)
    before = stored_logp(plain)
    assert stored_logp(guided) == pytest.approx(before, abs=1e-4)  # the same initial weights
    plain.train()
    guided.train()
    assert stored_logp(plain) == pytest.approx(before, abs=1e-3)
    assert stored_logp(guided) > before + 5.0, (before, stored_logp(guided))


def test_offline_data_says_how_many_rows_it_cannot_train_on_and_why(tmp_path, caplog):
    from turnrl.methods.offline.algorithms import SFT, SFTConfig
    from turnrl.storage import load

    tok = tiny_tokenizer("chatml")
    rows = load(_upper_rows(tmp_path, tok))
    broken = rows[0].model_copy(
        update={"turns": [rows[0].turns[0].model_copy(update={"reward": 1.0, "token_span": None})]}
    )
    with caplog.at_level("WARNING", logger="turnrl.rl.algorithms.offline"):
        units, info = SFT(SFTConfig()).units([[broken], *([r] for r in rows[1:])])
    assert info["data_untrainable"] == 1 and len(units) == len(rows) - 1
    assert f"1 of {len(rows)} stored episodes cannot be trained on" in caplog.text and broken.id in caplog.text
    assert "no generated tokens" in caplog.text
