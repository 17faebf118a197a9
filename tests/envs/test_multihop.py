"""turnrl/MultiHop-v0 (issue 79): a generated knowledge base of fictional entities, 2- and 3-hop questions, the search
tool of HotPotQA over their documents, splits by world.

What is checked: the knowledge base is the same from the same seed; no entity of a test (or validation) question's
path, nor any document of its world, appears in training; a scripted agent that reads only what `search` returns
answers every question; BM25 finds the documents a question names from its text and never the next hop; the grader
pays nothing for the ways a policy could game it (each attempt is kept below); the split check and `turnrl envs check`
pass; an episode's state is plain attributes, so a deep copy carries on as the original.
"""

import copy
import json
import re

import pytest
from typer.testing import CliRunner

import turnrl
from turnrl.cli.commands import app
from turnrl.envs.builtin.multihop import DEMOS, MultiHopEnv, split_worlds
from turnrl.envs.builtin.multihop_kb import BRIDGES, COMPARISONS, build
from turnrl.envs.conformance.contract import check_environment
from turnrl.envs.conformance.split_check import check_splits
from turnrl.envs.formats.swirl_format import demo_messages
from turnrl.types import Message, Trajectory, Turn

ID = "turnrl/MultiHop-v0"
SPLITS = ("train", "validation", "test")


@pytest.fixture(scope="module")
def envs():
    return {s: turnrl.make(ID, split=s) for s in SPLITS}


def tasks_of(env):
    return [env.task_at(i) for i in range(len(env))]


# ---- generation ----


def test_the_knowledge_base_is_the_same_from_the_same_seed_and_another_from_another():
    a, b = build.__wrapped__(0), build.__wrapped__(0)  # not the cache: generated twice
    assert a == b and sum(len(q) for q in a.questions) > 2000
    assert [e.text for e in a.entities.values()] != [e.text for e in build.__wrapped__(1).entities.values()]
    one, two = turnrl.make(ID, split="test"), MultiHopEnv(split="test")
    assert tasks_of(one) == tasks_of(two)
    assert [t.id for t in tasks_of(turnrl.make(ID, split="test", kb_seed=1))] and tasks_of(
        turnrl.make(ID, split="test", kb_seed=1)
    ) != tasks_of(one)


def test_documents_are_short_names_unique_and_the_question_names_no_hidden_entity(envs):
    kb = envs["train"].kb
    assert max(len(e.text.split()) for e in kb.entities.values()) <= 20
    words = {w.lower() for t in [*BRIDGES.values(), *COMPARISONS.values()] for w in re.findall(r"[A-Za-z]+", t)}
    for name in kb.entities:  # no name is a word of the questions (a search for "born" would find a person)
        assert not {w.lower() for w in name.split()} & words, name
    for _split, env in envs.items():
        for t in tasks_of(env):
            hidden = set(t.metadata["supporting_titles"]) - set(t.metadata["named"])
            assert all(n in t.prompt for n in t.metadata["named"]) and not any(h in t.prompt for h in hidden)
            if t.metadata["kind"] == "bridge":  # the answer is on the last document only
                assert t.answer not in t.prompt and t.answer in kb.entities[t.metadata["supporting_titles"][-1]].text
                assert not any(t.answer in kb.entities[n].text for n in t.metadata["supporting_titles"][:-1])
            else:
                assert t.answer in t.metadata["supporting_titles"]


def test_sizes_hops_and_kinds(envs):
    sizes = {s: len(e) for s, e in envs.items()}
    assert sizes == {"train": 1930, "validation": 208, "test": 430}, sizes
    kinds = {(t.metadata["kind"], t.metadata["hops"]) for t in tasks_of(envs["test"])}
    assert kinds == {("bridge", 2), ("bridge", 3), ("comparison", 2), ("comparison", 3)}
    only = turnrl.make(ID, split="test", hops=[3], kinds=["bridge"])
    assert {(t.metadata["kind"], t.metadata["hops"]) for t in tasks_of(only)} == {("bridge", 3)}
    assert len(turnrl.make(ID, split="test", limit=10)) == 10
    with pytest.raises(ValueError, match="hops must be drawn"):
        turnrl.make(ID, hops=[4])
    with pytest.raises(ValueError, match="split must be one of"):
        turnrl.make(ID, split="dev")
    with pytest.raises(ValueError, match="a training world left"):
        turnrl.make(ID, worlds=3, test_worlds=2, validation_worlds=1)


# ---- splits: by entity ----


def test_no_entity_of_a_held_out_question_is_seen_in_training(envs):
    """ "Seen" is any entity on a training question's path (its answer included), in a training document, or in the
    training corpus a search can return: a held-out question's entities are none of them."""
    kb = envs["train"].kb

    def path_entities(env):
        return {n for t in tasks_of(env) for n in [*t.metadata["supporting_titles"], t.answer]}

    train = path_entities(envs["train"])
    train_docs = " \n ".join(text for _, text in kb.documents(envs["train"].worlds))
    for split in ("validation", "test"):
        held = path_entities(envs[split])
        assert held and not held & train, (split, sorted(held & train)[:5])
        assert not [n for n in held if re.search(rf"\b{re.escape(n)}\b", train_docs)], split  # nor in a document
        assert not held & path_entities(envs["validation" if split == "test" else "test"])
        env = envs[split]
        env.reset(options={"index": 0})
        assert {p.title for p in env._index.passages} <= {n for w in env.worlds for n in kb.worlds[w]}


def test_the_split_check_passes_and_held_out_splits_hold_distinct_problems():
    report = check_splits(ID)
    assert report.ok, str(report)
    assert report.tasks == report.distinct == {"train": 1930, "test": 430, "validation": 208}
    keys = [t.metadata["canonical"] for t in tasks_of(turnrl.make(ID, split="test"))]
    assert all(k.startswith("multihop:0:") for k in keys)


def test_split_worlds_are_disjoint_and_cover_every_world():
    parts = [set(split_worlds(s, 12, 2, 1)) for s in SPLITS]
    assert parts[0] | parts[1] | parts[2] == set(range(12)) and sum(map(len, parts)) == 12


# ---- answerable by search, and one search finds only the first hop ----

DOC = {
    "person": r"(?P<name>.+) was born in (?P<birthplace>.+) in (?P<year>\d+) and works for (?P<employer>.+)\.",
    "org": r"(?P<name>.+) is an? .+ founded in (?P<year>\d+) by (?P<founder>.+)\. It is based in (?P<base>.+)\.",
    "city": r"(?P<name>.+) is a city in the region of (?P<region>.+)\.",
    "region": r"(?P<name>.+) is a region whose capital is (?P<capital>.+)\.",
}
_TEMPLATES = sorted(
    [(t, ("bridge", k)) for k, t in BRIDGES.items()] + [(t, ("comparison", k)) for k, t in COMPARISONS.items()],
    key=lambda x: -len(x[0]),
)  # the longer first: "the founder of the organization that …"


def _pattern(template):
    return re.compile(re.escape(template).replace(r"\{0\}", "(.+)").replace(r"\{1\}", "(.+)"))


class GoldAgent:
    """Answers from what the search tool returns: parses the question with the templates, searches each name on
    the path, reads the next name (or the year) from the document whose title is that name."""

    def __init__(self, env):
        self.env = env
        self.steps = []

    def read(self, name):
        result = self.env.call("search", query=name)
        assert result.ok, result.content
        for line in result.content.splitlines():
            body = line.split(" -> ", 1)[1] if self.env.style == "swirl" else line.split(". ", 1)[1]
            title, _, text = body.partition(": ")
            if title == name:
                for pattern in DOC.values():
                    if m := re.fullmatch(pattern, text.removesuffix(" (you already searched this)")):
                        return m.groupdict()
        raise AssertionError(f"search({name!r}) did not return its document: {result.content}")

    def answer(self, question):
        for template, (kind, spec) in _TEMPLATES:  # noqa: B007 — the matching template's, read after the loop
            if m := _pattern(template).fullmatch(question):
                break
        else:
            raise AssertionError(f"no template matches {question!r}")
        if kind == "bridge":
            name = m.group(1)
            for relation in spec:
                name = self.read(name)[relation]
            return name
        _, via = spec
        first = self.read(m.group(1))[via] if via else m.group(1)
        years = {n: int(self.read(n)["year"]) for n in (first, m.group(2))}
        return min(years, key=years.get)


@pytest.mark.parametrize(
    "split, options", [(s, {"tool_style": "swirl"}) for s in SPLITS] + [("test", {}), ("test", {"corpus": "split"})]
)
def test_a_scripted_agent_that_only_searches_answers_every_question(split, options):
    env = turnrl.make(ID, split=split, **options)  # swirl: top_k=1, the document must come first
    for i in range(len(env)):
        env.reset(options={"index": i})
        answer = GoldAgent(env).answer(env.task.prompt)
        _, reward, terminated, _, info = env.step(f"<answer>{answer}</answer>")
        assert terminated and reward == 1.0 and info["metrics"]["support_recall"] == 1.0, (env.task, answer)
        assert info["metrics"]["searches"] == env.task.metadata["hops"]


@pytest.mark.parametrize("corpus, misses", [("world", 0), ("split", 5)])
def test_the_question_finds_its_first_hop_and_not_the_next(corpus, misses):
    env = turnrl.make(ID, split="train", corpus=corpus)
    named_missing = hidden_found = 0
    for i in range(len(env)):
        env.reset(options={"index": i})
        hits = {p.title for p in env._index.search(env.task.prompt, env.top_k)}
        named_missing += not set(env.task.metadata["named"]) <= hits
        hidden_found += bool(hits & (set(env.task.metadata["supporting_titles"]) - set(env.task.metadata["named"])))
    assert named_missing <= misses and hidden_found <= misses, (named_missing, hidden_found)


def test_the_search_tool_is_hotpotqas_with_its_budget():
    env = turnrl.make(ID, split="test", max_searches=2)
    env.reset(options={"index": 0})
    call = lambda q: f'<tool_call>{{"name": "search", "arguments": {{"query": {json.dumps(q)}}}}}</tool_call>'
    obs, *_ = env.step(call(env.task.prompt))
    assert obs[0].content.startswith("1. ") and env.task.metadata["named"][0] in obs[0].content
    env.step(call("x"))
    obs, _, _, truncated, _ = env.step(call("y"))
    assert "search budget (2) is used up" in obs[0].content and truncated


# ---- the grader, gamed ----


def _attempts(env, kb):
    t = env.task
    seen = sorted({n for title in t.metadata["supporting_titles"] for n in kb.entities if n in kb.entities[title].text})
    last_doc = kb.entities[t.metadata["supporting_titles"][-1]].text
    return {
        "every name seen, commas": ", ".join(seen),
        "every name seen, spaces": " ".join(seen),
        "every name seen, one tag each": "</answer><answer>".join([*seen, t.answer]),
        "the last document": last_doc,
        "the question": t.prompt,
        "the named entity": t.metadata["named"][0],
        "both candidates": " or ".join(t.metadata["named"]),
        "the answer and more": f"{t.answer} and {t.metadata['named'][0]}",
        "empty": "",
    }


@pytest.mark.parametrize("reward", ["em", "f1"])
def test_the_ways_to_game_the_grader_earn_nothing(envs, reward):
    env = turnrl.make(ID, split="test", reward=reward)
    kb, paid = env.kb, {}
    for i in range(0, len(env), 7):
        env.reset(options={"index": i})
        for name, text in _attempts(env, kb).items():
            if name == "the named entity" and env.task.metadata["kind"] == "comparison":
                continue  # a comparison's answer is one of the two it names: right by chance half the time
            v = env.score(f"<answer>{text}</answer>")
            if v.score > 0:
                paid.setdefault(name, []).append((env.task.prompt, text, v.score))
        assert env.score(f"<answer>{env.task.answer}</answer>").score == 1.0
        assert env.score(f"<answer>the {env.task.answer.lower()}.</answer>").score == 1.0  # normalized, not gamed
        assert env.score(env.task.answer).score == 0.0  # no answer tags
    assert not paid, {k: v[:2] for k, v in paid.items()}


def test_partial_names_earn_nothing_by_default_and_a_share_with_f1():
    """Why the default reward is exact match: an organization's kind ("Labs") or a namesake's first name is part of
    many answers, and token F1 pays a share for it."""
    env, f1 = turnrl.make(ID, split="test"), turnrl.make(ID, split="test", reward="f1")
    i = next(i for i in range(len(env)) if " " in env.task_at(i).answer)
    for e in (env, f1):
        e.reset(options={"index": i})
    part = env.task.answer.split()[-1]
    assert env.score(f"<answer>{part}</answer>").score == 0.0 and 0 < f1.score(f"<answer>{part}</answer>").score < 1


# ---- the conformance harness, turnrl envs check, the SWiRL format ----


@pytest.mark.parametrize("options", [{}, {"tool_style": "swirl"}, {"split": "test", "corpus": "split"}])
def test_conformance(options):
    report = check_environment(turnrl.make(ID, **options))
    assert report.ok, str(report)


def test_envs_check_and_envs_list():
    result = CliRunner().invoke(app, ["envs", "check", ID])
    assert result.exit_code == 0, result.output
    assert "splits: OK" in result.output
    listed = CliRunner().invoke(app, ["envs", "list"])
    assert ID in listed.output


def test_swirl_demos_are_in_the_knowledge_bases_style_and_name_no_entity(envs):
    env = turnrl.make(ID, split="test", tool_style="swirl")
    assert env.prompt_demos == demo_messages(DEMOS, "search", env.instruction) and env.top_k == 1
    shown = " ".join(m.content for m in env.prompt_demos)
    for m in env.prompt_demos:
        if m.role == "tool":
            text = m.content.split(": ", 1)[1]
            assert any(re.fullmatch(p, text) for p in DOC.values()), text
    kb = envs["train"].kb
    assert not [n for n in kb.entities if re.search(rf"\b{re.escape(n)}\b", shown)]
    assert env.stop == ("</search_query>", "</answer>", "</lookup>")


# ---- episode state: plain attributes, copied with the environment ----


def test_a_deep_copy_mid_episode_carries_on_as_the_original():
    env = turnrl.make(ID, split="test")
    env.reset(options={"index": 3})
    env.step(env.oracle_action())
    twin = copy.deepcopy(env)
    actions = []
    while True:
        a = env.oracle_action()
        actions.append(a)
        ra, rb = env.step(a), twin.step(twin.oracle_action())
        assert ra == rb and env._queries == twin._queries
        if ra[2] or ra[3]:
            break
    fresh = copy.deepcopy(twin)
    fresh.reset(options={"index": 3})
    fresh.call("search", query="something else")
    assert twin._queries == env._queries and fresh._queries == ["something else"]
    assert env.tools[0].fn.__self__ is env and twin.tools[0].fn.__self__ is twin  # tools act on their own copy
    assert twin.kb is env.kb and twin._index is env._index  # read-only data is shared, not copied


# ---- figures ----


def test_figures_by_question_kind():
    env = turnrl.make(ID, split="test")

    def traj(task_id, em):
        return Trajectory(
            task_id=task_id,
            turns=[Turn(index=0, action=Message(role="assistant", content="x"), info={"metrics": {"em": em}})],
        )

    trajs = [
        traj("multihop/test/bridge2/0", 1.0),
        traj("multihop/test/bridge2/1", 0.0),
        traj("multihop/test/comparison3/2", 1.0),
        traj("other/3", 1.0),
    ]
    figures = env.summarize_episodes(trajs)
    assert figures == {"em_bridge2": 0.5, "em_comparison3": 1.0}
    assert "bridge2 0.500, comparison3 1.000" in env.report_lines(figures)[0]
