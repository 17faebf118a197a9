import pytest

from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.agents.openai import OpenAIAgent
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.serving.server import AgentServer
from turnrl.verifiers.judge import HybridReward, OutcomeJudge, PairwiseJudge, ProcessJudge, parse_label

TOK = tiny_tokenizer("chatml")


class Counting(ScriptedAgent):
    def __init__(self, policy):
        super().__init__(TOK, policy)
        self.prompts_seen = 0

    def generate(self, prompts, params):
        self.prompts_seen += len(prompts)
        return super().generate(prompts, params)


@pytest.mark.parametrize(
    "text, label",
    [
        ("The query targets the right entity.\nGOOD", "GOOD"),
        ("reasoning...\n**BAD**", "BAD"),
        ("Answer: GOOD.", "GOOD"),
        ("GOOD or BAD? hard to say", None),
        ("It is GOOD\nmaybe", None),
        ("good", None),  # labels are exact
        ("GOOD BAD", None),
        ("", None),
    ],
)
def test_strict_parsing(text, label):
    assert parse_label(text, ("GOOD", "BAD")) == label


def test_process_judge_batches_caches_and_never_reads_off_format_as_good():
    agent = Counting(lambda p: "Fine step.\nGOOD" if "capital" in p else ("Sure!" if "weather" in p else "Nope.\nBAD"))
    judge = ProcessJudge(agent)
    items = [{"question": "q", "context": "c", "step": s} for s in ("search capital", "answer 42", "weather?")]
    js = judge.judge_many(items)
    assert [j.label for j in js] == ["GOOD", "BAD", None] and agent.prompts_seen == 3 and judge.calls == 1
    assert judge.verdict(js[2]).correct is False and judge.verdict(js[2]).details["unparseable"] is True
    judge.judge_many(items + items[:1])
    assert agent.prompts_seen == 3  # all cached
    with pytest.raises(ValueError, match="needs the field 'step'"):
        judge.judge(question="q", context="c")


def test_outcome_judge_as_a_verifier():
    judge = OutcomeJudge(
        ScriptedAgent(TOK, lambda p: "Same person.\nYES" if "Shirley" in p.split("My answer is:")[1] else "NO")
    )
    assert judge("Shirley Temple Black", "Shirley Temple", question="who?").correct
    v = judge("Judy Garland", "Shirley Temple")
    assert not v.correct and v.score == 0.0 and v.extracted == "NO"


def test_pairwise_judge_removes_position_bias():
    always_a = PairwiseJudge(ScriptedAgent(TOK, lambda p: "A"))
    assert always_a.compare("q", "x", "y") == 0.5
    prefers_long = PairwiseJudge(
        ScriptedAgent(
            TOK,
            lambda p: (
                "A"
                if len(p.split("Response A:")[1].split("Response B:")[0]) > len(p.split("Response B:")[1]) - 120
                else "B"
            ),
        )
    )
    assert prefers_long.compare("q", "a much longer and better answer", "short") == 1.0
    assert prefers_long.compare("q", "short", "a much longer and better answer") == 0.0
    assert PairwiseJudge(ScriptedAgent(TOK, lambda p: "dunno")).compare("q", "x", "y") is None


def test_a_failing_judge_reports_errors():
    class Broken:
        tokenizer = TOK

        def generate(self, prompts, params):
            raise RuntimeError("GPU fell off")

    j = OutcomeJudge(Broken()).judge(question="q", gold="a", prediction="a")
    assert j.label is None and "GPU fell off" in j.error


def test_judge_over_http_and_timeouts():
    tok = tiny_tokenizer("chatml")
    local = HFAgent(tiny_model(tok), tok)
    with AgentServer(local, "tiny") as server:
        judge = ProcessJudge(OpenAIAgent(server.url, "tiny"), params=SamplingParams(temperature=0, max_new_tokens=8))
        j = judge.judge(question="q", context="c", step="s")
        assert j.error is None and j.label is None  # a random tiny model rambles: unparseable, not GOOD
    dead = OutcomeJudge(OpenAIAgent("http://127.0.0.1:9/v1", "m", max_retries=0, timeout=1))
    j = dead.judge(question="q", gold="a", prediction="a")
    assert j.label is None and "ConnectError" in j.error


def test_a_real_tiny_model_judges_in_one_batch():
    judge = ProcessJudge(HFAgent(tiny_model(TOK), TOK), params=SamplingParams(temperature=0, max_new_tokens=6))
    js = judge.judge_many([{"question": "q", "context": "c", "step": str(i)} for i in range(5)])
    assert len(js) == 5 and judge.calls == 1 and all(j.label in (None, "GOOD", "BAD") for j in js)


def test_hybrid_reward_uses_rules_where_they_apply():
    agent = Counting(lambda p: "YES")
    reward = HybridReward(OutcomeJudge(agent))
    v = reward("so \\boxed{42}", "42")
    assert v.correct and v.details["source"] == "rule" and agent.prompts_seen == 0
    v = reward("\\boxed{41}", "42")
    assert not v.correct and v.details["source"] == "rule"  # a judge cannot be talked into it
    v = reward("Shirley Temple", "Shirley Temple Black", question="who?")
    assert v.correct and v.details["source"] == "judge" and agent.prompts_seen == 1
