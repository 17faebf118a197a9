"""The knowledge base of ``turnrl/MultiHop-v0``: fictional worlds of people, organizations, cities and regions, one
short document per entity, and the 2- and 3-hop questions they answer. Deterministic from a seed; no files.

**A world** holds a few regions, cities, organizations and people, linked by six relations — a person's
``birthplace`` (a city) and ``employer`` (an organization); an organization's ``founder`` (a person) and ``base``
(a city); a city's ``region``; a region's ``capital`` (a city). A document states only its own entity's links, never
the links that point at it::

    Zorvek Labs: Zorvek Labs is a laboratory founded in 1873 by Maren Dusk. It is based in Tollow.
    Maren Dusk: Maren Dusk was born in Qellin in 1841 and works for Pashet Mills.

so the founder's document does not name the organization, and a search with the question's words finds the first
document but not the next one. Distractors come from the world itself: two organizations share each name root
("Zorvek Labs", "Zorvek Press"), people share first names, and the people who work for an organization name it.
Names are made of syllables, unique over the whole knowledge base (first names excepted), and never one of the
documents' or questions' own words.

**Questions** (:data:`BRIDGES`, :data:`COMPARISONS`): a *bridge* question names one entity and asks for the end of
a path of two or three relations ("Where was the founder of Zorvek Labs born?": Zorvek Labs → Maren Dusk → Qellin);
a *comparison* question asks which of two was born or founded earlier, naming both (2 documents) or one and the
way to the other ("Who was born earlier, the founder of Zorvek Labs or Ilse Varn?": 3 documents); its answer is
one of the two. Every answer is an entity's name. A question is kept only when its answer is written in no document
of its path but the last (a bridge question cannot be answered from the first document), and, where ``filter`` is
on, when a BM25 search of its text over its world finds every document it names in the top 3 and none of the others
in the top 5.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import cast

import numpy as np

from turnrl.utils import Shared

#: relation: (the kind it links from, the kind it links to)
RELATIONS = {
    "birthplace": ("person", "city"),
    "employer": ("person", "org"),
    "founder": ("org", "person"),
    "base": ("org", "city"),
    "region": ("city", "region"),
    "capital": ("region", "city"),
}
#: Bridge questions: the path of relations from the entity the question names, and the question.
BRIDGES = {
    ("founder", "birthplace"): "Where was the founder of {0} born?",
    ("founder", "employer"): "Which organization does the founder of {0} work for?",
    ("base", "region"): "In which region is {0} based?",
    ("employer", "founder"): "Who founded the organization that {0} works for?",
    ("employer", "base"): "In which city is the organization that {0} works for based?",
    ("birthplace", "region"): "In which region was {0} born?",
    ("region", "capital"): "What is the capital of the region that {0} is in?",
    ("founder", "birthplace", "region"): "In which region was the founder of {0} born?",
    ("base", "region", "capital"): "What is the capital of the region where {0} is based?",
    ("employer", "founder", "birthplace"): "Where was the founder of the organization that {0} works for born?",
    ("employer", "base", "region"): "In which region is the organization that {0} works for based?",
}
#: Comparison questions: (the kind compared, the relation that leads to the first of the two, or None) → question.
COMPARISONS = {
    ("person", None): "Who was born earlier, {0} or {1}?",
    ("org", None): "Which was founded earlier, {0} or {1}?",
    ("person", "founder"): "Who was born earlier, the founder of {0} or {1}?",
    ("org", "employer"): "Which was founded earlier, the organization that {0} works for or {1}?",
}
ORG_KINDS = {
    "Labs": "laboratory",
    "Press": "publishing house",
    "Foundry": "foundry",
    "Mills": "mill",
    "Guild": "guild",
    "Forge": "forge",
    "Trust": "trust",
    "Society": "society",
    "Bank": "bank",
    "Company": "company",
}
FIRST_NAMES = 16  # people share first names: searches for one person find namesakes
NAMED_K, HIDDEN_K = 3, 5  # the filter: named documents in the top 3 of the question's search, no other in the top 5
_ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "st", "th", "sh")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ou")
_CODAS = ("n", "r", "l", "s", "m", "k", "th", "nd", "rk", "", "", "")
# the documents' and questions' own words, and the names of the built-in SWiRL demonstrations: never a name
_RESERVED = {
    w.lower()
    for w in re.findall(
        r"[A-Za-z]+",
        " ".join(
            [
                *BRIDGES.values(),
                *COMPARISONS.values(),
                *ORG_KINDS,
                *ORG_KINDS.values(),
                "is a founded in by it based was born and works for city region of "
                "whose capital earlier person organization ostervale ilsa marrow quenby dunharrow pellin hask tam "
                "orsley wendel crake brinmoor lusk",
            ]
        ),
    )
}


@dataclass(frozen=True)
class Entity:
    """One entity: its unique name, kind, world, year (born or founded; None for places), links and document."""

    name: str
    kind: str
    world: int
    year: int | None
    links: tuple[tuple[str, str], ...]
    text: str

    def link(self, relation: str) -> str:
        """The name of the entity ``relation`` points to."""
        return dict(self.links)[relation]


@dataclass(frozen=True)
class Question:
    """One question: its kind (``bridge``/``comparison``), hops (documents on its path), text, answer, the entities
    whose documents answer it in reading order (``path``), those the text names, the relations, world and canonical
    form (``key``: the same for two renderings of one question)."""

    kind: str
    hops: int
    text: str
    answer: str
    path: tuple[str, ...]
    named: tuple[str, ...]
    relations: tuple[str, ...]
    world: int
    key: str


@dataclass(frozen=True)
class KnowledgeBase(Shared):
    """The entities by name, each world's entity names, and each world's questions (read-only: every fork of an
    environment shares it)."""

    seed: int
    entities: dict[str, Entity]
    worlds: tuple[tuple[str, ...], ...]
    questions: tuple[tuple[Question, ...], ...]

    def documents(self, worlds: range | list[int] | tuple[int, ...]) -> list[tuple[str, str]]:
        """``(title, text)`` of every entity of ``worlds``, in generation order."""
        return [(n, self.entities[n].text) for w in worlds for n in self.worlds[w]]


class _Namer:
    """Syllable names, unique over the knowledge base, never a reserved word."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng, self.used = rng, set(_RESERVED)

    def word(self) -> str:
        while True:  # two syllables, or three now and then; a final consonant most of the time
            n = 2 if self.rng.random() < 0.85 else 3
            syllables = [
                _ONSETS[self.rng.integers(len(_ONSETS))] + _VOWELS[self.rng.integers(len(_VOWELS))] for _ in range(n)
            ]
            word = "".join(syllables) + _CODAS[self.rng.integers(len(_CODAS))]
            if 4 <= len(word) <= 9 and word not in self.used:
                self.used.add(word)
                return word.capitalize()


def _counts(size: int) -> dict[str, int]:
    regions = max(2, round(size * 0.08))
    cities = max(2 * regions + 1, round(size * 0.2))
    orgs = max(4, round(size * 0.24))
    return {"region": regions, "city": cities, "org": orgs, "person": max(6, size - regions - cities - orgs)}


def _document(kind: str, name: str, year: int | None, links: dict[str, str]) -> str:
    if kind == "person":
        return f"{name} was born in {links['birthplace']} in {year} and works for {links['employer']}."
    if kind == "org":
        noun = ORG_KINDS[name.rsplit(" ", 1)[1]]
        return f"{name} is a {noun} founded in {year} by {links['founder']}. It is based in {links['base']}."
    if kind == "city":
        return f"{name} is a city in the region of {links['region']}."
    return f"{name} is a region whose capital is {links['capital']}."


def _world(w: int, rng: np.random.Generator, namer: _Namer, first: list[str], size: int) -> list[Entity]:
    c = _counts(size)
    regions = [namer.word() for _ in range(c["region"])]
    cities = [namer.word() for _ in range(c["city"])]
    roots = [namer.word() for _ in range((c["org"] + 1) // 2)]
    kinds = list(ORG_KINDS)
    orgs = []
    for root in roots:  # two organizations per root, of different kinds
        pair = rng.choice(len(kinds), size=2, replace=False)
        orgs += [f"{root} {kinds[int(k)]}" for k in pair]
    orgs = orgs[: c["org"]]
    people = [f"{first[int(rng.integers(len(first)))]} {namer.word()}" for _ in range(c["person"])]
    # every region has at least two cities; its capital is the first
    order = [int(i) for i in rng.permutation(len(cities))]
    region_of = {cities[i]: regions[k % len(regions)] for k, i in enumerate(order[: 2 * len(regions)])}
    region_of.update({cities[i]: regions[int(rng.integers(len(regions)))] for i in order[2 * len(regions) :]})
    capital = {r: next(cities[i] for i in order if region_of[cities[i]] == r) for r in regions}
    born = {p: int(rng.integers(1800, 1951)) for p in people}
    birthplace = {p: cities[int(rng.integers(len(cities)))] for p in people}
    founder = {o: people[int(rng.integers(len(people)))] for o in orgs}
    founded = {o: born[founder[o]] + int(rng.integers(20, 61)) for o in orgs}
    base = {o: cities[int(rng.integers(len(cities)))] for o in orgs}
    employer = {}
    for p in people:  # never an organization the person founded: its founder's document would name it
        choices = [o for o in orgs if founder[o] != p]
        employer[p] = choices[int(rng.integers(len(choices)))]
    spec = (
        [(r, "region", None, {"capital": capital[r]}) for r in regions]
        + [(x, "city", None, {"region": region_of[x]}) for x in cities]
        + [(o, "org", founded[o], {"founder": founder[o], "base": base[o]}) for o in orgs]
        + [(p, "person", born[p], {"birthplace": birthplace[p], "employer": employer[p]}) for p in people]
    )
    return [Entity(n, k, w, y, tuple(links.items()), _document(k, n, y, links)) for n, k, y, links in spec]


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) is not None


def _bridges(world: list[Entity], ents: dict[str, Entity], seed: int) -> list[Question]:
    out = []
    for relations, template in BRIDGES.items():
        for e in world:
            if e.kind != RELATIONS[relations[0]][0]:
                continue
            path = [e.name]
            for r in relations:
                path.append(ents[path[-1]].link(r))
            answer, text = path[-1], template.format(e.name)
            if (
                len(set(path)) < len(path)
                or _mentions(text, answer)
                or any(_mentions(ents[n].text, answer) for n in path[:-2])
            ):
                continue  # a cycle, or the answer readable before the last document of the path
            key = f"multihop:{seed}:{'>'.join(relations)}:{e.name}"
            out.append(
                Question("bridge", len(relations), text, answer, tuple(path[:-1]), (e.name,), relations, e.world, key)
            )
    return out


def _year(e: Entity) -> int:
    """The year of a person or a company (compared; only places have none)."""
    return cast(int, e.year)


def _comparisons(world: list[Entity], ents: dict[str, Entity], seed: int, rng: np.random.Generator) -> list[Question]:
    out = []
    for (kind, via), template in COMPARISONS.items():
        attr = "born" if kind == "person" else "founded"
        pool = [e for e in world if e.kind == kind]
        starts = [e for e in world if via and e.kind == RELATIONS[via][0]] if via else pool
        used: set[frozenset[str]] = set()
        for start in starts:
            first = ents[start.link(via)] if via else start
            want_first = bool(rng.random() < 0.5)  # which of the two is the answer: balanced
            others = [
                o
                for o in pool
                if o.name != first.name
                and o.name != start.name
                and o.year != first.year
                and frozenset((first.name, o.name)) not in used
            ]
            right = [o for o in others if (_year(first) < _year(o)) == want_first]
            if not (right or others):
                continue
            pick = right or others
            other = pick[int(rng.integers(len(pick)))]
            used.add(frozenset((first.name, other.name)))
            answer = min((first, other), key=_year).name
            path: tuple[str, ...]
            if via:
                text, path, named = (
                    template.format(start.name, other.name),
                    (start.name, first.name, other.name),
                    (start.name, other.name),
                )
                items = sorted([f"{via}({start.name})", other.name])
            else:
                a, b = (first, other) if rng.random() < 0.5 else (other, first)
                text, path, named, items = (
                    template.format(a.name, b.name),
                    (a.name, b.name),
                    (a.name, b.name),
                    sorted([a.name, b.name]),
                )
            key = f"multihop:{seed}:earlier-{attr}:{'|'.join(items)}"
            out.append(
                Question("comparison", len(path), text, answer, path, named, (via,) if via else (), start.world, key)
            )
    return out


def _findable(questions: list[Question], docs: list[tuple[str, str]]) -> list[Question]:
    """The questions whose text, searched with BM25 over ``docs``, finds every document it names in the top
    :data:`NAMED_K` and none of its other documents in the top :data:`HIDDEN_K`."""
    from turnrl.tools.search import Passage, bm25_index

    index = bm25_index([Passage(t, x) for t, x in docs])
    kept = []
    for q, found in zip(questions, index.search_many([q.text for q in questions], HIDDEN_K)):
        hits = [p.title for p in found]
        if set(q.named) <= set(hits[:NAMED_K]) and not (set(q.path) - set(q.named)) & set(hits):
            kept.append(q)
    return kept


@functools.lru_cache(maxsize=8)
def build(seed: int = 0, worlds: int = 12, world_size: int = 50, filter: bool = True) -> KnowledgeBase:
    """The knowledge base for ``seed``: ``worlds`` worlds of about ``world_size`` entities (see the module
    docstring), cached."""
    if worlds < 1 or world_size < 20:
        raise ValueError(f"need worlds >= 1 and world_size >= 20, got {worlds}, {world_size}")
    namer = _Namer(np.random.default_rng([seed, 2**20]))
    first = [namer.word() for _ in range(FIRST_NAMES)]
    entities: dict[str, Entity] = {}
    names, questions = [], []
    for w in range(worlds):
        rng = np.random.default_rng([seed, w])
        world = _world(w, rng, namer, first, world_size)
        entities.update((e.name, e) for e in world)
        names.append(tuple(e.name for e in world))
        qs = _bridges(world, entities, seed) + _comparisons(world, entities, seed, rng)
        if filter:
            qs = _findable(qs, [(e.name, e.text) for e in world])
        questions.append(tuple(qs))
    return KnowledgeBase(seed, entities, tuple(names), tuple(questions))
