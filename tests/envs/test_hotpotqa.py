import json

import pytest

import turnrl
from turnrl.envs.conformance.contract import check_environment
from turnrl.envs.data import DataFormatError
from turnrl.episode import play_episode
from turnrl.tools.search import Passage, bm25_index
from turnrl.verifiers.qa import exact_match, f1_score, normalize_answer, verify


def test_official_normalization_em_f1():
    assert normalize_answer("The  Chief of Protocol!") == "chief of protocol"
    assert exact_match("the Chief of Protocol.", "Chief of Protocol") == 1.0
    assert f1_score("Chief", "Chief of Protocol") == pytest.approx(0.5)
    assert f1_score("yes", "no") == 0.0 and f1_score("no", "no") == 1.0
    v = verify("I think <answer>Chief</answer>", "Chief of Protocol")
    assert not v.correct and v.score == pytest.approx(0.5) and v.details["em"] == 0.0
    assert verify("Chief of Protocol", "Chief of Protocol").details["reason"] == "no_answer"
    assert verify("<answer>Chief of Protocol</answer>", "chief of protocol", reward="em").score == 1.0


def test_bm25_index_is_cached_and_handles_odd_queries():
    passages = [
        Passage("Shirley Temple", "American actress and Chief of Protocol."),
        Passage("Paris", "Capital of France."),
    ]
    idx = bm25_index(passages)
    assert bm25_index(list(passages)) is idx
    assert idx.search("who was chief of protocol", 2)[0].title == "Shirley Temple"
    assert idx.search("zzzz qqqq") == [] and idx.search("the of a") == []
    assert idx.lookup("paris").title == "Paris" and idx.lookup("Nowhere") is None


@pytest.mark.parametrize("kwargs", [{}, {"tool_style": "swirl"}, {"corpus": "split"}])
def test_oracle_reaches_em_1_on_every_question(kwargs):
    env = turnrl.make("turnrl/HotPotQA-v0", **kwargs)
    assert len(env) == 500 and check_environment(env).ok
    for i in range(len(env)):
        traj = play_episode(env, lambda conv, e: e.oracle_action(), options={"index": i})
        metrics = traj.turns[-1].info["metrics"]
        assert metrics["em"] == 1.0 and metrics["support_recall"] == 1.0, env.task.id


def test_swirl_style_search_budget_and_bad_queries():
    env = turnrl.make("turnrl/HotPotQA-v0", tool_style="swirl", max_searches=3)
    env.reset(options={"index": 0})
    obs, *_ = env.step("<search_query>Corliss Archer film actress</search_query>")
    assert obs[0].content.startswith("Corliss Archer film actress -> ")
    obs, *_ = env.step("<search_query>Corliss Archer film actress</search_query>")
    assert "(you already searched this)" in obs[0].content
    obs, *_ = env.step("<search_query>   </search_query>")
    assert obs[0].content == "Error: the query is empty"
    obs, _r, _term, trunc, info = env.step("<lookup>No Such Article</lookup>")
    assert "Error: no article titled 'No Such Article'" in obs[0].content
    assert trunc  # max_turns = max_searches + 1 = 4: still calling tools at the limit
    # an episode cut while searching has the figures of no answer, so a report's means count it (F1 0, not missing)
    assert info["metrics"]["f1"] == 0.0 and info["metrics"]["em"] == 0.0 and info["metrics"]["searches"] == 3.0
    assert info["metrics"]["support_recall"] == pytest.approx(env.unwrapped.score("").details["support_recall"])


def test_budget_and_huge_queries_are_refused():
    env = turnrl.make("turnrl/HotPotQA-v0", max_searches=1, max_turns=4)
    env.reset(options={"index": 0})
    call = lambda q: f'<tool_call>{{"name": "search", "arguments": {{"query": {json.dumps(q)}}}}}</tool_call>'
    obs, *_ = env.step(call("x" * 1000))
    assert "too long" in obs[0].content
    obs, *_ = env.step(call("Shirley Temple"))
    assert "Shirley Temple" in obs[0].content
    obs, *_ = env.step(call("Kiss and Tell"))
    assert "search budget (1) is used up" in obs[0].content
    _, r, term, _, info = env.step("<answer>Chief of Protocol</answer>")
    assert r == 1.0 and term and info["metrics"]["support_recall"] >= 0.5 and info["metrics"]["searches"] == 1.0


def test_broken_corpus_file(tmp_path):
    good = tmp_path / "ok.jsonl"
    good.write_text(
        json.dumps(
            {
                "_id": "1",
                "question": "q",
                "answer": "a",
                "supporting_facts": [["T", 0]],
                "context": [["T", ["a sentence."]]],
            }
        )
        + "\n{broken\n"
    )
    with pytest.raises(DataFormatError, match=r"ok\.jsonl:2"):
        turnrl.make("turnrl/HotPotQA-v0", path=str(good))
    good.write_text(json.dumps({"_id": "1", "question": "q"}) + "\n")
    with pytest.raises(DataFormatError, match="expected _id, question, answer"):
        turnrl.make("turnrl/HotPotQA-v0", path=str(good))


def test_eval_reports_em_f1_recall(tmp_path):
    from turnrl.agents.scripted import FixedAgent
    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.rl.run.evaluate import evaluate

    agent = FixedAgent(
        tiny_tokenizer("chatml"),
        [
            '<tool_call>{"name": "search", "arguments": {"query": "film"}}</tool_call>',
            "<answer>Chief of Protocol</answer>",
        ],
    )
    m = evaluate(agent, "turnrl/HotPotQA-v0", limit=3, out=tmp_path)
    assert {"mean_em", "mean_f1", "mean_support_recall", "mean_searches"} <= set(m)
    assert m["mean_searches"] == 1.0 and m["tool_call_rate"] == 1.0 and 0 < m["mean_em"] < 1
    # an agent that searches until the turn limit never answers: every episode counts, with F1 0
    searcher = FixedAgent(
        tiny_tokenizer("chatml"), ['<tool_call>{"name": "search", "arguments": {"query": "film"}}</tool_call>']
    )
    m = evaluate(searcher, "turnrl/HotPotQA-v0", limit=3, out=tmp_path / "searcher")
    # (one reaches the turn limit after 5 searches; the context fills after 3 and 4 searches in the other two, which
    # count too: before unanswered_metrics the mean was 5.0, over the one episode the environment ended)
    assert m["truncated_rate"] == 1.0 and m["mean_f1"] == 0.0 and m["mean_searches"] == 4.0, m


def test_dense_retriever_finds_paraphrases():
    from turnrl.tools.search import DenseIndex

    idx = bm25_index(
        [
            Passage("Shirley Temple", "American actress who became a diplomat and ambassador."),
            Passage("Paris", "Capital city of France, on the Seine."),
            Passage("Mount Everest", "Earth's highest mountain above sea level."),
        ],
        kind="dense",
    )
    assert isinstance(idx, DenseIndex)
    assert idx.search("which child film star later served her country abroad", 1)[0].title == "Shirley Temple"
    assert idx.search("tallest peak in the world", 1)[0].title == "Mount Everest"  # no shared words with BM25
    env = turnrl.make("turnrl/HotPotQA-v0", retriever="dense", limit=5)
    assert check_environment(env).ok
    with pytest.raises(ValueError, match="retriever"):
        turnrl.make("turnrl/HotPotQA-v0", retriever="tfidf")


def test_the_env_refuses_an_answer_that_repeats_the_question(tmp_path):
    # a question that holds most of its long answer: echoing the question back would earn a high F1
    row = {
        "_id": "q1",
        "question": "Who wrote the Final Act of the Congress of Vienna?",
        "answer": "the Final Act of the Congress of Vienna",
        "supporting_facts": [["Vienna", 0]],
        "context": [["Vienna", ["The Congress of Vienna signed its Final Act in 1815."]]],
    }
    (tmp_path / "one.jsonl").write_text(json.dumps(row) + "\n")
    env = turnrl.make("turnrl/HotPotQA-v0", path=str(tmp_path / "one.jsonl"))
    echo = "<answer>wrote Final Act of Congress of Vienna</answer>"
    assert verify(echo, row["answer"]).score > 0.5  # without the question the echo is paid
    env.reset(options={"index": 0})
    _, reward, term, _, info = env.step(echo)
    assert term and reward == 0.0 and info["metrics"]["tampering"] == 1.0, info
    env.reset(options={"index": 0})
    assert env.step(f"<answer>{row['answer']}</answer>")[1] == 1.0


def test_dev_train_and_dev_test_are_disjoint_parts_of_the_dev_file():
    from turnrl.rl.run.evaluate import held_out_kwargs, run_eval_kwargs

    dev = turnrl.make("turnrl/HotPotQA-v0")
    train = turnrl.make("turnrl/HotPotQA-v0", split="dev-train", tool_style="swirl")
    test = turnrl.make("turnrl/HotPotQA-v0", split="dev-test")
    val = turnrl.make("turnrl/HotPotQA-v0", split="dev-validation")
    ids = lambda env: [env.tasks[i].id for i in range(len(env))]
    assert len(test) == 100 and len(val) == 50 and len(train) == len(dev) - 150
    assert ids(test) + ids(val) + ids(train) == ids(dev) and not set(ids(test)) & set(ids(train))
    assert train.validation_split == "dev-validation" and dev.validation_split is None
    # a run trained on dev-train is evaluated on dev-test, by default and by `turnrl eval`
    assert run_eval_kwargs(train, {"split": "dev-train"}, None)["split"] == "dev-test"
    assert held_out_kwargs(train, {})["split"] == "dev-test"
    assert test.split == test.held_out_split and train.split != train.held_out_split


def test_training_on_the_whole_dev_file_is_refused_before_a_model_loads(tmp_path):
    """split dev is its own held-out split: `turnrl train` on it stops in one line, naming the split and the fix (the
    issue: only a warning on the first 16 prompts guarded it); dev-train against dev-test passes the same check."""
    from typer.testing import CliRunner

    from turnrl.cli.commands import app
    from turnrl.rl.run.held_out import HeldOutError, check_held_out

    dev = turnrl.make("turnrl/HotPotQA-v0")
    with pytest.raises(HeldOutError, match="would pose 100 problem"):
        check_held_out("turnrl/HotPotQA-v0", dev, dev, 100)
    train, test = (turnrl.make("turnrl/HotPotQA-v0", split=s) for s in ("dev-train", "dev-test"))
    assert check_held_out("turnrl/HotPotQA-v0", train, test, 100) is None
    config = tmp_path / "c.yaml"
    config.write_text(
        f"model: tiny\nenv: {{id: turnrl/HotPotQA-v0, kwargs: {{split: dev}}}}\nsteps: 1\nout_dir: {tmp_path / 'run'}\n"
    )
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code != 0 and "training figures" in result.output and "dev-train" in result.output
    assert not (tmp_path / "run").exists()  # refused before anything ran


def test_a_qa_verifier_looks_the_fact_up_before_its_verdict():
    """HotPotQA-PAG with verify_tools: the verifier searches (SWiRL's tags here), reads the passage, and its verdict
    is rewarded as in §7; a search past the budget is an observation; without verify_tools no tool turn is taken."""
    env = turnrl.make("turnrl/HotPotQA-PAG-v0", tool_style="swirl", verify_tools=True, max_searches=1)
    env.reset(options={"index": 0})
    assert "look the facts up with a tool" in env.unwrapped.verify_prompt
    task = env.unwrapped.task
    obs, reward, *_ = env.step("<answer>Paris</answer>")  # a wrong first answer
    assert reward == 0.0
    obs, reward, done, _, info = env.step(f"<search_query>{task.prompt[:80]}</search_query>")
    assert info["verify_tool"] and info["role"] == "verifier" and " -> " in obs[0].content and not done
    obs, reward, done, _, info = env.step(f"<search_query>{task.answer}</search_query>")  # past the search budget
    assert "budget" in obs[0].content and info["error"] is not None and not done
    obs, reward, done, _, info = env.step("The passage says otherwise. The answer is wrong.")
    assert (reward, info["verdict"], info["verify_tool_calls"]) == (1.0, "wrong", 2)
    obs, reward, done, _, info = env.step(f"<answer>{task.answer}</answer>")
    assert done and info["correct"] and reward == 2.0  # wrong -> right
    plain = turnrl.make("turnrl/HotPotQA-PAG-v0", tool_style="swirl")
    plain.reset(options={"index": 0})
    plain.step("<answer>Paris</answer>")
    obs, reward, done, _, info = plain.step(f"<search_query>{task.answer}</search_query>")
    assert info["verdict"] is None and reward == 0.0  # the paper's setting: a tool call is an unparseable verdict


def test_an_episode_the_rollout_cuts_counts_with_the_figures_of_no_answer(tmp_path):
    """An episode whose context fills after a search ends before the environment grades an answer: its row still
    holds the environment's figures of no answer (F1 0, the articles its searches found), so the report's means count
    it and `turnrl compare --score f1` can pair it."""
    from turnrl.agents.scripted import FixedAgent
    from turnrl.agents.tiny import tiny_tokenizer
    from turnrl.rl.run.evaluate import evaluate

    search = '<tool_call>{"name": "search", "arguments": {"query": "film"}}</tool_call>'
    agent = FixedAgent(tiny_tokenizer("chatml"), [search])
    m = evaluate(agent, "turnrl/HotPotQA-v0", limit=3, out=tmp_path, max_context=900)
    rows = [json.loads(x) for x in (tmp_path / "items.jsonl").read_text().splitlines()]
    assert {r["outcome"] for r in rows} == {"context limit"}, [r["outcome"] for r in rows]
    assert all(r["metrics"]["f1"] == 0.0 and r["metrics"]["searches"] >= 1 for r in rows)
    assert m["mean_f1"] == 0.0 and m["mean_searches"] == sum(r["metrics"]["searches"] for r in rows) / 3
    assert any(r["metrics"]["support_recall"] > 0 for r in rows)  # what its searches found counts
