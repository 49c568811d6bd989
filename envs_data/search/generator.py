"""Search domain: multi-hop questions answered over a bundled fictional encyclopedia.

World: an invented world of countries, cities, rivers, people, companies
(publishers among them), books, inventions and sports clubs
(:mod:`.corpus`), one short encyclopedia document per entity (~420
documents; the corpus of ``corpus_seed=0`` is the bundled one).

Tools: ``search(query, top_k=5)`` ranks the corpus with BM25F
(:mod:`.index`) and returns a JSON list of ``{doc_id, title, snippet}``;
``open(doc_id)`` returns a document's title and text. The final answer is a
plain assistant text turn ("... The answer is Port Avila.").

Task families (``meta["task"]``):

- 2-hop chains: ``founder_birthplace``, ``author_birthplace``,
  ``publisher_city``, ``inventor_birth_year``, ``club_rival_city``,
  ``birthplace_river``, ``hq_country``, ``publisher_founded``;
- 3-hop chains: ``book_publisher_river``, ``invention_company_city``,
  ``founder_birthplace_country``, ``club_rival_river``,
  ``author_birthplace_river``;
- comparisons: ``compare_founded``, ``compare_club_age``,
  ``compare_population``, ``compare_born``.

The expert searches for each entity of the chain with a sensible query, opens
the best document, reads the bridge entity, and so on; now and then a first
query is too vague or misspelled and is refined, and a few ``open`` calls use
a wrong id and get an ``Error:`` result before the corrected call. About 10% of
episodes fail (reward 0.0): the expert stops one hop early or misreads a fact.
Every tool result is computed by really running the index over the corpus.
``write_corpus(path)`` (re-exported here for the bundling step) writes the
corpus of seed 0 next to the trajectories.

``meta`` carries ``answer``, ``answer_aliases``, ``gold_docs`` (the chain's
documents), ``search_targets`` (message index of each good search turn -> the
document it is meant to find) and ``alternatives`` (other queries for which
the index returns the same top document; other phrasings of the final answer).
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from pivot_envs.types import Message, Trajectory

from .corpus import (  # noqa: F401  (write_corpus: used by envs_data/build.py)
    Entity,
    World,
    build_world,
    render_documents,
    running_name,
    write_corpus,
)
from .index import SearchIndex

DOMAIN = "search"
SOURCE = "pivot-envs/search"
TOP_K_DEFAULT = 5
TOP_K_MAX = 10
MAX_ASSISTANT_TURNS = 8

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the encyclopedia. Returns a JSON list of the best-matching documents, "
            "each with doc_id, title and a short snippet, best first.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Keywords or a question."},
                    "top_k": {
                        "type": "integer",
                        "description": "How many results to return.",
                        "default": TOP_K_DEFAULT,
                        "minimum": 1,
                        "maximum": TOP_K_MAX,
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "open",
            "description": "Open a document by its doc_id (as returned by search) and return its full text.",
            "parameters": {
                "type": "object",
                "properties": {"doc_id": {"type": "string", "description": "A doc_id from the search results."}},
                "required": ["doc_id"],
                "additionalProperties": False,
            },
        },
    },
]

SYSTEM_PROMPTS = [
    "You are a research assistant with access to a local encyclopedia. Use `search` to find documents and "
    "`open` to read them. Questions may need several look-ups. When you know the answer, reply with a short "
    "final answer.",
    "You answer questions using only the encyclopedia tools provided (search, open). Look facts up rather than "
    "guessing, follow the chain of facts step by step, and finish with a brief answer.",
    "You are a careful fact-finding agent. Tools: search(query, top_k) returns ranked documents with snippets; "
    "open(doc_id) returns a document's text. Answer concisely once you have verified the facts.",
]


# ---------------------------------------------------------------- tools


def run_search(index: SearchIndex, arguments: dict[str, Any]) -> str:
    """Execute the ``search`` tool: a JSON list of hits, or an ``Error:`` message."""
    query = arguments.get("query")
    top_k = arguments.get("top_k", TOP_K_DEFAULT)
    if not isinstance(query, str) or not query.strip():
        return "Error: 'query' must be a non-empty string."
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= TOP_K_MAX:
        return f"Error: 'top_k' must be an integer between 1 and {TOP_K_MAX}, got {top_k!r}."
    return json.dumps([hit.to_result() for hit in index.search(query, top_k)], ensure_ascii=False)


def run_open(index: SearchIndex, arguments: dict[str, Any]) -> str:
    """Execute the ``open`` tool: the document's title and text, or an ``Error:`` message."""
    doc_id = arguments.get("doc_id")
    if not isinstance(doc_id, str) or not doc_id.strip():
        return "Error: 'doc_id' must be a non-empty string."
    doc = index.get(doc_id.strip())
    if doc is None:
        guess = index.id_for_title(doc_id)
        hint = f" Did you mean '{guess}'?" if guess else " Use a doc_id exactly as returned by search."
        return f"Error: no document with doc_id '{doc_id}'.{hint}"
    return f"{doc['title']}\n\n{doc['text']}"


def run_tool(index: SearchIndex, name: str, arguments: dict[str, Any]) -> str:
    """Execute one tool call of this domain by name."""
    if name == "search":
        return run_search(index, arguments)
    if name == "open":
        return run_open(index, arguments)
    return f"Error: unknown tool '{name}'. Available tools: search, open."


# ---------------------------------------------------------------- questions


@dataclass
class Hop:
    """One look-up of a chain: find and read the document of ``entity`` for ``need``.

    Attributes:
        entity: the entity whose document must be opened.
        need: the information sought in that document (a key of ``_NEEDS``).
    """

    entity: Entity
    need: str


@dataclass
class Question:
    """A multi-hop question with its gold chain and answer.

    Attributes:
        task: the task family name.
        text: the user's question.
        hops: the look-ups, in order.
        answer: the gold answer.
        aliases: other accepted spellings of the answer.
        explanation: one or two sentences that walk the chain.
        wrong: plausible wrong answers (misread facts), for failed episodes.
        bridge: the intermediate answer before the last hop (what an expert stopping early states).
    """

    task: str
    text: str
    hops: list[Hop]
    answer: str
    aliases: list[str]
    explanation: str
    wrong: list[str] = field(default_factory=list)
    bridge: str | None = None


# query templates ({n} = the entity's name) and "thought" templates per information need
_NEEDS: dict[str, tuple[list[str], list[str]]] = {
    "founder": (["{n} founder", "who founded {n}", "{n} founded by", "founder of {n}", "{n} company history", "{n}"],
                ["First I need to find out who founded {n}.", "Let me look up {n} to see who founded it."]),
    "born_in": (["{n} born", "where was {n} born", "{n} birthplace", "{n} biography", "{n} place of birth", "{n}"],
                ["Now I need to find where {n} was born.", "Next, let me look up {n}'s birthplace."]),
    "born_year": (["{n} born", "when was {n} born", "{n} birth year", "{n} biography", "{n}"],
                  ["Now let me find out when {n} was born.", "Next I'll look up {n}'s year of birth."]),
    "author": (["{n} author", "who wrote {n}", "{n} book", "{n} written by", "{n}"],
               ["First I need the author of {n}.", "Let me find out who wrote {n}."]),
    "publisher": (["{n} publisher", "who published {n}", "{n} published by", "{n} book", "{n}"],
                  ["First I need to find the publisher of {n}.", "Let me look up who published {n}."]),
    "hq": (["{n} headquarters", "where is {n} headquartered", "{n} head office", "{n} company", "{n}"],
           ["Now I need to find where {n} is headquartered.", "Next, where is {n} based?"]),
    "river": (["{n} river", "which river flows through {n}", "{n} city", "{n} town", "{n}"],
              ["Now let me find which river flows through {n}.", "Next I need the river of {n}."]),
    "country": (["{n} country", "which country is {n} in", "{n} city", "{n} town", "{n}"],
                ["Now let me check which country {n} is in.", "Next I need the country of {n}."]),
    "inventor": (["{n} inventor", "who invented the {n}", "{n} invention", "{n} invented by", "{n}"],
                 ["First I need to find who invented the {n}.", "Let me look up the inventor of the {n}."]),
    "company_founded": (["{n} founded company", "{n} founder of", "{n} biography", "{n} entrepreneur", "{n}"],
                        ["Now let me find which company {n} founded.", "Next I'll look up {n} to see what company they founded."]),
    "rival": (["{n} rival", "{n} rivalry", "{n} club", "{n} rivals", "{n}"],
              ["First I need to find the rival of {n}.", "Let me look up {n} to find its rival."]),
    "club_city": (["{n} club", "where does {n} play", "{n} based in", "{n} home city", "{n}"],
                  ["Now I need to find where {n} is based.", "Next, which city does {n} play in?"]),
    "founded_year": (["{n} founded", "when was {n} founded", "{n} founding year", "{n} history", "{n}"],
                     ["Let me find when {n} was founded.", "I'll look up the founding year of {n}."]),
    "population": (["{n} population", "how many people live in {n}", "{n} inhabitants", "{n} city", "{n}"],
                   ["Let me look up the population of {n}.", "I'll check how many people live in {n}."]),
    "publisher_year": (["{n} founded", "when was {n} founded", "{n} publishing house", "{n} publisher history", "{n}"],
                       ["Now let me find when {n} was founded.", "Next, the founding year of {n}."]),
}

_OPEN_THOUGHTS = ["The first result is the right document; let me open it.", "Opening the document on {n}.",
                  "That looks like the right page. Let me read it."]


def _aliases(entity: Entity) -> list[str]:
    n = entity.name
    if entity.kind == "river":
        return [n, f"the {n}", n[: -len(" River")]]
    if entity.kind == "person":
        return [n, n.split()[-1]]
    return [n]


def _other(world: World, kind: str, exclude: set[str], rng: random.Random, key: Callable[[Entity], bool] = lambda e: True) -> Entity:
    pool = [e for e in world.of_kind(kind) if e.id not in exclude and key(e)]
    return rng.choice(pool)


def _ask(rng: random.Random, templates: list[str], **names: str) -> str:
    return rng.choice(templates).format(**names)


def _q_founder_birthplace(w: World, rng: random.Random) -> Question | None:
    c = rng.choice(w.of_kind("company"))
    p = w.by_id[c.attrs["founded_by"]]
    city = w.by_id[p.attrs["born_in"]]
    text = _ask(rng, ["In which city was the founder of {c} born?", "Where was the person who founded {c} born?",
                      "What is the birthplace of the founder of {c}?", "{c} was founded by someone. In what city was that person born?"], c=c.name)
    wrong = [w.name(p.attrs["died_in"]) if p.attrs.get("died_in") else None, w.name(c.attrs["headquartered_in"])]
    return Question("founder_birthplace", text, [Hop(c, "founder"), Hop(p, "born_in")], city.name, _aliases(city),
                    f"{c.name} was founded by {p.name}, who was born in {city.name}.", [x for x in wrong if x], p.name)


def _q_author_birthplace(w: World, rng: random.Random) -> Question | None:
    b = rng.choice(w.of_kind("book"))
    a = w.by_id[b.attrs["written_by"]]
    city = w.by_id[a.attrs["born_in"]]
    text = _ask(rng, ["Where was the author of {b} born?", "In which city was the writer of {b} born?",
                      "What is the birthplace of the person who wrote {b}?", "The author of {b} was born in which city?"], b=b.name)
    wrong = [w.name(a.attrs["died_in"]) if a.attrs.get("died_in") else None, w.name(b.attrs["setting"])]
    return Question("author_birthplace", text, [Hop(b, "author"), Hop(a, "born_in")], city.name, _aliases(city),
                    f"{b.name} was written by {a.name}, who was born in {city.name}.", [x for x in wrong if x], a.name)


def _q_publisher_city(w: World, rng: random.Random) -> Question | None:
    b = rng.choice(w.of_kind("book"))
    pub = w.by_id[b.attrs["published_by"]]
    city = w.by_id[pub.attrs["headquartered_in"]]
    text = _ask(rng, ["In which city is the publisher of {b} headquartered?", "Where is the company that published {b} based?",
                      "The publisher of {b} has its head office in which city?", "Which city is home to the publisher of {b}?"], b=b.name)
    wrong = [w.name(b.attrs["setting"]), w.name(w.by_id[b.attrs["written_by"]].attrs["born_in"])]
    return Question("publisher_city", text, [Hop(b, "publisher"), Hop(pub, "hq")], city.name, _aliases(city),
                    f"{b.name} was published by {pub.name}, which is headquartered in {city.name}.", wrong, pub.name)


def _q_inventor_birth_year(w: World, rng: random.Random) -> Question | None:
    inv = rng.choice(w.of_kind("invention"))
    p = w.by_id[inv.attrs["invented_by"]]
    lower = running_name(inv)
    text = _ask(rng, ["In what year was the inventor of the {i} born?", "When was the person who invented the {i} born?",
                      "What is the birth year of the inventor of the {i}?", "The {i} was invented by someone; in which year was that person born?"], i=lower)
    year = str(p.attrs["born"])
    wrong = [str(inv.attrs["year"])] + ([str(p.attrs["died"])] if p.attrs.get("died") else [])
    return Question("inventor_birth_year", text, [Hop(inv, "inventor"), Hop(p, "born_year")], year, [year],
                    f"The {lower} was invented by {p.name}, who was born in {year}.", wrong, p.name)


def _rival_ok(w: World, club: Entity) -> bool:
    rival = w.by_id[club.attrs["rival_of"]]
    return w.name(rival.attrs["plays_in"]) not in rival.name


def _q_club_rival_city(w: World, rng: random.Random) -> Question | None:
    k = rng.choice([c for c in w.of_kind("club") if _rival_ok(w, c)])
    r = w.by_id[k.attrs["rival_of"]]
    city = w.by_id[r.attrs["plays_in"]]
    text = _ask(rng, ["In which city is the main rival of {k} based?", "Where does the fiercest rival of {k} play?",
                      "{k} has a long-standing rival. Which city is that club from?", "What is the home city of the rival club of {k}?"], k=k.name)
    return Question("club_rival_city", text, [Hop(k, "rival"), Hop(r, "club_city")], city.name, _aliases(city),
                    f"The main rival of {k.name} is {r.name}, which is based in {city.name}.", [w.name(k.attrs["plays_in"])], r.name)


def _q_birthplace_river(w: World, rng: random.Random) -> Question | None:
    p = rng.choice([x for x in w.of_kind("person") if w.by_id[x.attrs["born_in"]].attrs.get("river")])
    city = w.by_id[p.attrs["born_in"]]
    river = w.by_id[city.attrs["river"]]
    text = _ask(rng, ["Which river flows through the birthplace of {p}?", "On which river does the town where {p} was born lie?",
                      "{p} was born in a city on a river. Which river?", "What river runs through the city where {p} was born?"], p=p.name)
    died = w.by_id[p.attrs["died_in"]] if p.attrs.get("died_in") else None
    wrong = [w.name(died.attrs["river"])] if died is not None and died.attrs.get("river") and died.attrs["river"] != river.id else []
    wrong.append(_other(w, "river", {river.id}, rng).name)
    return Question("birthplace_river", text, [Hop(p, "born_in"), Hop(city, "river")], river.name, _aliases(river),
                    f"{p.name} was born in {city.name}, which lies on the {river.name}.", wrong, city.name)


def _q_hq_country(w: World, rng: random.Random) -> Question | None:
    c = rng.choice(w.of_kind("company"))
    city = w.by_id[c.attrs["headquartered_in"]]
    country = w.by_id[city.attrs["country"]]
    text = _ask(rng, ["In which country is {c} headquartered?", "Which country is the head office of {c} in?",
                      "{c} is based in a city. Which country is that city in?", "In what country are the headquarters of {c}?"], c=c.name)
    founder_country = w.by_id[w.by_id[w.by_id[c.attrs["founded_by"]].attrs["born_in"]].attrs["country"]]
    wrong = [founder_country.name] if founder_country.id != country.id else []
    wrong.append(_other(w, "country", {country.id}, rng).name)
    return Question("hq_country", text, [Hop(c, "hq"), Hop(city, "country")], country.name, _aliases(country),
                    f"{c.name} is headquartered in {city.name}, which is in {country.name}.", wrong, city.name)


def _q_publisher_founded(w: World, rng: random.Random) -> Question | None:
    b = rng.choice(w.of_kind("book"))
    pub = w.by_id[b.attrs["published_by"]]
    year = str(pub.attrs["founded"])
    text = _ask(rng, ["In what year was the publisher of {b} founded?", "When was the company that published {b} established?",
                      "The publisher of {b} was founded in which year?", "How old is the publisher of {b}? Give its founding year."], b=b.name)
    return Question("publisher_founded", text, [Hop(b, "publisher"), Hop(pub, "publisher_year")], year, [year],
                    f"{b.name} was published by {pub.name}, which was founded in {year}.", [str(b.attrs["year"])], pub.name)


def _q_book_publisher_river(w: World, rng: random.Random) -> Question | None:
    b = rng.choice([x for x in w.of_kind("book") if w.by_id[w.by_id[x.attrs["published_by"]].attrs["headquartered_in"]].attrs.get("river")])
    pub = w.by_id[b.attrs["published_by"]]
    city = w.by_id[pub.attrs["headquartered_in"]]
    river = w.by_id[city.attrs["river"]]
    text = _ask(rng, ["Which river flows through the city where the publisher of {b} is headquartered?",
                      "The publisher of {b} is based in a city on a river. Which river?",
                      "What river runs through the headquarters city of the company that published {b}?",
                      "Name the river that flows through the home city of {b}'s publisher."], b=b.name)
    setting = w.by_id[b.attrs["setting"]]
    wrong = [w.name(setting.attrs["river"])] if setting.attrs.get("river") and setting.attrs["river"] != river.id else []
    wrong.append(_other(w, "river", {river.id}, rng).name)
    return Question("book_publisher_river", text, [Hop(b, "publisher"), Hop(pub, "hq"), Hop(city, "river")], river.name, _aliases(river),
                    f"{b.name} was published by {pub.name}, which is based in {city.name}; {city.name} lies on the {river.name}.", wrong, city.name)


def _q_invention_company_city(w: World, rng: random.Random) -> Question | None:
    inv = rng.choice([x for x in w.of_kind("invention") if w.by_id[x.attrs["invented_by"]].attrs.get("founded")])
    p = w.by_id[inv.attrs["invented_by"]]
    c = w.by_id[p.attrs["founded"][0]]
    city = w.by_id[c.attrs["headquartered_in"]]
    lower = running_name(inv)
    text = _ask(rng, ["The inventor of the {i} founded a company. In which city is that company headquartered?",
                      "Where is the company founded by the inventor of the {i} based?",
                      "In which city does the firm started by the inventor of the {i} have its head office?",
                      "The person who invented the {i} also founded a company. Where is it headquartered?"], i=lower)
    wrong = [w.name(p.attrs["born_in"])]
    if inv.attrs.get("manufactured_by"):
        wrong.insert(0, w.name(w.by_id[inv.attrs["manufactured_by"]].attrs["headquartered_in"]))
    return Question("invention_company_city", text, [Hop(inv, "inventor"), Hop(p, "company_founded"), Hop(c, "hq")], city.name, _aliases(city),
                    f"The {lower} was invented by {p.name}, who founded {c.name}; {c.name} is headquartered in {city.name}.", wrong, c.name)


def _q_founder_birthplace_country(w: World, rng: random.Random) -> Question | None:
    c = rng.choice(w.of_kind("company"))
    p = w.by_id[c.attrs["founded_by"]]
    city = w.by_id[p.attrs["born_in"]]
    country = w.by_id[city.attrs["country"]]
    text = _ask(rng, ["In which country was the founder of {c} born?", "The founder of {c} was born in which country?",
                      "What country is the birthplace of the person who founded {c} in?",
                      "Which country does the founder of {c} come from (by place of birth)?"], c=c.name)
    hq_country = w.by_id[w.by_id[c.attrs["headquartered_in"]].attrs["country"]]
    wrong = [hq_country.name] if hq_country.id != country.id else []
    wrong.append(_other(w, "country", {country.id}, rng).name)
    return Question("founder_birthplace_country", text, [Hop(c, "founder"), Hop(p, "born_in"), Hop(city, "country")], country.name,
                    _aliases(country), f"{c.name} was founded by {p.name}, who was born in {city.name}, a city in {country.name}.", wrong, city.name)


def _q_club_rival_river(w: World, rng: random.Random) -> Question | None:
    ks = [c for c in w.of_kind("club") if _rival_ok(w, c) and w.by_id[w.by_id[c.attrs["rival_of"]].attrs["plays_in"]].attrs.get("river")]
    if not ks:
        return None
    k = rng.choice(ks)
    r = w.by_id[k.attrs["rival_of"]]
    city = w.by_id[r.attrs["plays_in"]]
    river = w.by_id[city.attrs["river"]]
    text = _ask(rng, ["Which river flows through the home city of the rival of {k}?",
                      "The main rival of {k} plays in a city on a river. Which river?",
                      "What river runs through the city where {k}'s fiercest rival is based?"], k=k.name)
    own = w.by_id[k.attrs["plays_in"]]
    wrong = [w.name(own.attrs["river"])] if own.attrs.get("river") and own.attrs["river"] != river.id else []
    wrong.append(_other(w, "river", {river.id}, rng).name)
    return Question("club_rival_river", text, [Hop(k, "rival"), Hop(r, "club_city"), Hop(city, "river")], river.name, _aliases(river),
                    f"The rival of {k.name} is {r.name}, based in {city.name}, which lies on the {river.name}.", wrong, city.name)


def _q_author_birthplace_river(w: World, rng: random.Random) -> Question | None:
    b = rng.choice([x for x in w.of_kind("book") if w.by_id[w.by_id[x.attrs["written_by"]].attrs["born_in"]].attrs.get("river")])
    a = w.by_id[b.attrs["written_by"]]
    city = w.by_id[a.attrs["born_in"]]
    river = w.by_id[city.attrs["river"]]
    text = _ask(rng, ["Which river flows through the birthplace of the author of {b}?",
                      "The writer of {b} was born in a city on a river. Which river is it?",
                      "What river runs through the town where the author of {b} was born?"], b=b.name)
    setting = w.by_id[b.attrs["setting"]]
    wrong = [w.name(setting.attrs["river"])] if setting.attrs.get("river") and setting.attrs["river"] != river.id else []
    wrong.append(_other(w, "river", {river.id}, rng).name)
    return Question("author_birthplace_river", text, [Hop(b, "author"), Hop(a, "born_in"), Hop(city, "river")], river.name, _aliases(river),
                    f"{b.name} was written by {a.name}, who was born in {city.name}; {city.name} lies on the {river.name}.", wrong, city.name)


def _compare(w: World, rng: random.Random, task: str, kind: str, key: str, need: str, templates: list[str],
             earlier_wins: bool, phrase: Callable[[Entity, Entity], str], pool_key: Callable[[Entity], bool] = lambda e: True) -> Question | None:
    pool = [e for e in w.of_kind(kind) if pool_key(e)]
    x, y = rng.sample(pool, 2)
    if x.attrs[key] == y.attrs[key]:
        return None
    first_wins = (x.attrs[key] < y.attrs[key]) == earlier_wins
    win, lose = (x, y) if first_wins else (y, x)
    text = rng.choice(templates).format(x=x.name, y=y.name)
    return Question(task, text, [Hop(x, need), Hop(y, need)], win.name, _aliases(win), phrase(win, lose), [lose.name])


def _q_compare_founded(w: World, rng: random.Random) -> Question | None:
    return _compare(w, rng, "compare_founded", "company", "founded", "founded_year",
                    ["Which was founded first, {x} or {y}?", "Which company is older: {x} or {y}?",
                     "Was {x} founded before {y}, or the other way round? Name the older one.", "Of {x} and {y}, which was established earlier?"],
                    True, lambda a, b: f"{a.name} was founded in {a.attrs['founded']} and {b.name} in {b.attrs['founded']}.")


def _q_compare_club_age(w: World, rng: random.Random) -> Question | None:
    return _compare(w, rng, "compare_club_age", "club", "founded", "founded_year",
                    ["Which club is older, {x} or {y}?", "Which was formed first: {x} or {y}?",
                     "Of the clubs {x} and {y}, which was founded earlier?"],
                    True, lambda a, b: f"{a.name} was founded in {a.attrs['founded']}, {b.name} in {b.attrs['founded']}.")


def _q_compare_population(w: World, rng: random.Random) -> Question | None:
    return _compare(w, rng, "compare_population", "city", "population", "population",
                    ["Which city has more inhabitants, {x} or {y}?", "Which is larger by population: {x} or {y}?",
                     "Do more people live in {x} or in {y}?", "Between {x} and {y}, which city has the bigger population?"],
                    False, lambda a, b: f"{a.name} has about {a.attrs['population']:,} inhabitants and {b.name} about {b.attrs['population']:,}.")


def _q_compare_born(w: World, rng: random.Random) -> Question | None:
    return _compare(w, rng, "compare_born", "person", "born", "born_year",
                    ["Who was born first, {x} or {y}?", "Which of {x} and {y} was born earlier?",
                     "Was {x} or {y} born earlier?", "Who is older: {x} or {y}?"],
                    True, lambda a, b: f"{a.name} was born in {a.attrs['born']} and {b.name} in {b.attrs['born']}.")


FAMILIES: list[tuple[Callable[[World, random.Random], Question | None], float]] = [
    (_q_founder_birthplace, 1.2), (_q_author_birthplace, 1.0), (_q_publisher_city, 0.8), (_q_inventor_birth_year, 0.7),
    (_q_club_rival_city, 0.8), (_q_birthplace_river, 0.8), (_q_hq_country, 0.7), (_q_publisher_founded, 0.6),
    (_q_book_publisher_river, 0.8), (_q_invention_company_city, 0.8), (_q_founder_birthplace_country, 0.7),
    (_q_club_rival_river, 0.6), (_q_author_birthplace_river, 0.6),
    (_q_compare_founded, 0.7), (_q_compare_club_age, 0.5), (_q_compare_population, 0.6), (_q_compare_born, 0.6),
]
"""Question samplers and their sampling weights."""


# ---------------------------------------------------------------- episodes


@dataclass
class GenConfig:
    """Knobs of the expert's behaviour.

    Attributes:
        fail_rate: share of failed episodes (reward 0.0).
        refine_rate: chance, per hop, that the first query is too vague or misspelled and gets refined.
        error_rate: chance, per ``open``, of a wrong doc_id that returns an ``Error:`` result first.
        thought_rate: chance that a tool-call turn carries a short reasoning text.
        max_alternatives: most alternative queries kept per search turn.
    """

    fail_rate: float = 0.1
    refine_rate: float = 0.12
    error_rate: float = 0.05
    thought_rate: float = 0.35
    max_alternatives: int = 4


@dataclass
class _Episode:
    """Builds one conversation, running every tool call against the index."""

    index: SearchIndex
    rng: random.Random
    cfg: GenConfig
    messages: list[Message] = field(default_factory=list)
    alternatives: dict[str, list[Message]] = field(default_factory=dict)
    search_targets: dict[str, str] = field(default_factory=dict)

    def _call_id(self) -> str:
        return f"call_{self.rng.getrandbits(48):012x}"

    def call(self, name: str, args: dict[str, Any], content: str | None = None,
             alternatives: list[dict[str, Any]] | None = None) -> str:
        """Append an assistant tool call and its real tool result; return the result."""
        call_id = self._call_id()

        def message(arguments: dict[str, Any]) -> Message:
            fn = {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}
            return {"role": "assistant", "content": content, "tool_calls": [{"id": call_id, "type": "function", "function": fn}]}

        turn = len(self.messages)
        self.messages.append(message(args))
        if alternatives:
            self.alternatives[str(turn)] = [message(a) for a in alternatives]
        result = run_tool(self.index, name, args)
        self.messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": result})
        return result

    def thought(self, templates: list[str], **names: str) -> str | None:
        if self.rng.random() >= self.cfg.thought_rate:
            return None
        return self.rng.choice(templates).format(**names)


def _top(index: SearchIndex, query: str, top_k: int = TOP_K_DEFAULT) -> list[str]:
    return [h.doc_id for h in index.search(query, top_k)]


def _queries(entity: Entity, need: str) -> list[str]:
    """Candidate queries for one hop, in a stable order (natural phrasings, then case variants)."""
    name = running_name(entity)
    base = [t.format(n=name) for t in _NEEDS[need][0]]
    return list(dict.fromkeys(base + [q.lower() for q in base[:3]]))


def _bad_queries(entity: Entity, need: str, rng: random.Random) -> list[tuple[str, str]]:
    """Vague or misspelled first queries for a hop, each with the refining thought that follows it."""
    words = entity.name.split()
    kw = _NEEDS[need][0][0].replace("{n}", "").strip()
    longest = max(words, key=len)
    out: list[tuple[str, str]] = []
    if len(longest) >= 5:
        i = rng.randint(1, len(longest) - 3)
        typo = longest[:i] + longest[i + 1] + longest[i] + longest[i + 2:]
        out.append((f"{entity.name.replace(longest, typo)} {kw}".strip(),
                    f"I misspelled the name. Let me search again for {entity.name}."))
    if len(words) > 1:
        part = words[0] if entity.kind == "person" else words[-1]
        out.append((f"{part} {kw}".strip(), f"Those results are about something else. Let me use the full name, {entity.name}."))
    rng.shuffle(out)
    return out


def _do_hop(ep: _Episode, hop: Hop, budget: list[int]) -> str:
    """Search for the hop's entity (refining a bad first query sometimes), open its document; return its text."""
    index, rng, cfg = ep.index, ep.rng, ep.cfg
    target = hop.entity.id
    name_for_text = running_name(hop.entity)
    thought = ep.thought(_NEEDS[hop.need][1], n=name_for_text)
    top_k_choice = rng.choices([None, 5, 3], weights=[0.75, 0.15, 0.1])[0]
    k = top_k_choice or TOP_K_DEFAULT

    if budget[0] > 0 and rng.random() < cfg.refine_rate:
        for bad, refine_thought in _bad_queries(hop.entity, hop.need, rng):
            if target not in _top(index, bad, k):
                ep.call("search", _args(bad, top_k_choice), thought)
                budget[0] -= 1
                thought = refine_thought
                break

    candidates = _queries(hop.entity, hop.need)
    tops = {q: _top(index, q, k) for q in candidates}
    best = [q for q in candidates if tops[q] and tops[q][0] == target]
    fair = [q for q in candidates if target in tops[q]]
    pool = best or fair or [hop.entity.name]
    query = rng.choices(pool, weights=[max(1, 4 - j) for j in range(len(pool))])[0]
    ranked = tops[query] if query in tops else _top(index, query, k)
    same = [q for q in candidates if q != query and ranked and tops[q][:1] == ranked[:1]]
    rng.shuffle(same)
    alts = [_args(q, top_k_choice) for q in sorted(same[: cfg.max_alternatives], key=candidates.index)]
    if top_k_choice in (None, TOP_K_DEFAULT):
        alts.insert(0, _args(query, TOP_K_DEFAULT if top_k_choice is None else None))
    turn = len(ep.messages)
    result = ep.call("search", _args(query, top_k_choice), thought, alts)
    ep.search_targets[str(turn)] = target
    hits = json.loads(result)
    if target not in [h["doc_id"] for h in hits]:  # never expected: queries are checked above
        raise RuntimeError(f"search for {target} did not return it: {query!r}")

    open_thought = ep.thought(_OPEN_THOUGHTS, n=hop.entity.name)
    if budget[0] > 0 and rng.random() < cfg.error_rate:
        kind, num = target.rsplit("-", 1)
        wrong_id = rng.choice([hop.entity.name, f"{kind}-{int(num)}", f"{kind}_{num}"])
        ep.call("open", {"doc_id": wrong_id}, open_thought)
        budget[0] -= 1
        open_thought = rng.choice(["That id was wrong; let me use the exact doc_id from the results.", f"Retrying with the doc_id {target}."])
    return ep.call("open", {"doc_id": target}, open_thought)


def _args(query: str, top_k: int | None) -> dict[str, Any]:
    return {"query": query} if top_k is None else {"query": query, "top_k": top_k}


_FINAL = [
    "{e} The answer is {a}.",
    "The answer is {a}.",
    "{e} So the answer is {a}.",
    "{a}. {e}",
    "**{a}**. {e}",
    "Answer: {a}",
]
_WRONG_FINAL = ["The answer is {a}.", "Answer: {a}", "Based on what I found, the answer is {a}.", "It is {a}."]


def _random_wrong(world: World, answer: str, rng: random.Random) -> str:
    """A wrong answer of the same type as ``answer``: a nearby year, or another entity of the same kind."""
    if answer.isdigit():
        return str(int(answer) + rng.choice([-11, -6, -3, 2, 4, 9]))
    kind = next(e.kind for e in world.entities if e.name == answer)
    return rng.choice([e.name for e in world.of_kind(kind) if e.name != answer])


def _episode(world: World, index: SearchIndex, rng: random.Random, cfg: GenConfig, seed: int, i: int, corpus_seed: int) -> Trajectory:
    families, weights = zip(*FAMILIES)
    question: Question | None = None
    while question is None:
        question = rng.choices(families, weights=weights)[0](world, rng)
    failed = rng.random() < cfg.fail_rate
    outcome = "success"
    hops = list(question.hops)
    if failed:
        outcome = "early_stop" if len(hops) == 3 and question.bridge and rng.random() < 0.5 else "misread"
        if outcome == "early_stop":
            hops = hops[:-1]

    ep = _Episode(index=index, rng=rng, cfg=cfg)
    ep.messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    ep.messages.append({"role": "user", "content": question.text})
    extra = [min(2, MAX_ASSISTANT_TURNS - (2 * len(hops) + 1))]  # refinements and tool errors this episode may add
    for hop in hops:
        text = _do_hop(ep, hop, extra)
        if hop.entity.name not in text:
            raise RuntimeError(f"opened document of {hop.entity.id} does not name it")

    if outcome == "success":
        final = rng.choice(_FINAL).format(a=question.answer, e=question.explanation)
        turn = len(ep.messages)
        ep.alternatives[str(turn)] = [{"role": "assistant", "content": c}
                                      for c in (f"The answer is {question.answer}.", question.answer) if c != final]
    else:
        wrong = question.bridge if outcome == "early_stop" else next((x for x in question.wrong if x not in question.aliases), None)
        if not wrong or wrong in question.aliases:
            wrong = _random_wrong(world, question.answer, rng)
        final = rng.choice(_WRONG_FINAL).format(a=wrong)
    ep.messages.append({"role": "assistant", "content": final})

    meta: dict[str, Any] = {
        "source": SOURCE,
        "id": f"{DOMAIN}-{seed}-{i}",
        "task": question.task,
        "hops": len(question.hops),
        "question": question.text,
        "answer": question.answer,
        "answer_aliases": question.aliases,
        "gold_docs": [h.entity.id for h in question.hops],
        "outcome": outcome,
        "corpus_seed": corpus_seed,
        "search_targets": ep.search_targets,
        "alternatives": ep.alternatives,
    }
    return Trajectory(messages=ep.messages, tools=copy.deepcopy(TOOLS), reward=0.0 if failed else 1.0, meta=meta)


def generate(n: int, seed: int = 0, *, corpus_seed: int = 0, config: GenConfig | None = None) -> list[Trajectory]:
    """``n`` expert episodes over the corpus of ``corpus_seed`` (0 = the bundled corpus).

    Episode ``i`` depends only on ``(seed, i, corpus_seed)``, so a larger ``n`` extends a smaller one.
    """
    cfg = config or GenConfig()
    world = build_world(corpus_seed)
    index = SearchIndex.build(render_documents(world, corpus_seed))
    return [_episode(world, index, random.Random(f"search-{seed}-{i}"), cfg, seed, i, corpus_seed) for i in range(n)]
