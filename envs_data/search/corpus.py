"""The fictional world behind the search domain, and its encyclopedia-style documents.

``build_world(seed)`` draws (with ``random.Random(seed)``) a small invented
world: countries, cities, rivers, people, companies (some of them publishers),
books, inventions and sports clubs, linked by relations (born_in, died_in,
founded_by, headquartered_in, written_by, published_by, invented_by,
manufactured_by, located_on, flows_through, capital_of, rival_of, plays_in)
and numbers (years, populations, lengths). ``render_documents(world, seed)``
writes one short document (3-8 sentences) per entity, with the facts in
varied natural phrasing; a document names only its entity's *direct* relations
so that multi-hop questions really need several look-ups.

``build_corpus(seed)`` is both at once; the corpus of seed 0 is the one
bundled with the package (``write_corpus(path)`` writes it as JSONL, gzipped
when the path ends in ``.gz``; ``load_bundled_corpus()`` reads it back).
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------- world model


@dataclass
class Entity:
    """One thing of the world that gets a document.

    Attributes:
        id: the document id (``<kind>-<nnn>``).
        kind: country, city, river, person, company, book, invention or club.
        name: the document title and the entity's name in other documents.
        attrs: facts; relations hold other entities' ids (e.g. ``born_in``), numbers are ints.
    """

    id: str
    kind: str
    name: str
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class World:
    """All entities, in document order, with lookups.

    Attributes:
        entities: every entity, in corpus order.
        by_id: id -> entity.
    """

    entities: list[Entity]
    by_id: dict[str, Entity]

    def of_kind(self, kind: str) -> list[Entity]:
        """The entities of one kind, in corpus order."""
        return [e for e in self.entities if e.kind == kind]

    def name(self, entity_id: str) -> str:
        """The name of the entity with id ``entity_id``."""
        return self.by_id[entity_id].name


@dataclass
class WorldConfig:
    """Sizes of the generated world.

    Attributes:
        countries: number of countries.
        cities: number of cities (spread over the countries; each country's first city is its capital).
        rivers: number of rivers.
        people: number of people.
        companies: number of companies (``publishers`` of them are publishing houses).
        publishers: number of publishing houses among the companies.
        books: number of books.
        inventions: number of inventions.
        clubs: number of sports clubs (an even number: clubs come in rival pairs).
    """

    countries: int = 8
    cities: int = 60
    rivers: int = 18
    people: int = 130
    companies: int = 72
    publishers: int = 14
    books: int = 60
    inventions: int = 36
    clubs: int = 40


_SYLLABLES = (
    "va vel rin or ane tes sar mar lo den hal bri to kes ir nor ven sel dra mo ri an thal cor mi lin fa ros "
    "ul ber gan ash el ka dun pe sto wyn ith qua ly bar ten so vi mer at ob ra ce nu gor fen dal is tor"
).split()
_FIRST_NAMES = {
    "f": "Amara Ilse Maren Corra Thessaly Livia Odile Nerys Saffi Junia Elsbeth Mireille Talia Ysolde Brisa "
    "Wenna Ottilie Rhosyn Isaura Kalinda Perrine Vaska Dagna Lumi Aveline".split(),
    "m": "Teodor Corvin Oskar Anselm Bram Casimir Deverel Emrys Faustin Gideon Halvard Ivo Jory Lorcan Matthias "
    "Nestor Orrin Piet Quillon Rufus Silvan Tobiah Ulric Vasco Wendel".split(),
}
_OCCUPATIONS = {
    "writer": ["novelist", "writer", "poet and novelist", "author"],
    "entrepreneur": ["industrialist", "entrepreneur", "businessman", "merchant and industrialist"],
    "inventor": ["engineer", "inventor", "engineer and inventor", "chemist"],
    "other": ["painter", "composer", "politician", "architect", "botanist", "athlete"],
}
_INDUSTRIES = {
    "tools": ("Tools", "tool maker", "hand tools and machine parts"),
    "motors": ("Motors", "vehicle manufacturer", "engines and motor cars"),
    "textiles": ("Textiles", "textile company", "cloth and yarn"),
    "shipping": ("Shipping", "shipping line", "cargo and passenger ships"),
    "foods": ("Foods", "food company", "preserves and biscuits"),
    "optics": ("Optics", "optics firm", "lenses and telescopes"),
    "instruments": ("Instruments", "instrument maker", "clocks and measuring instruments"),
    "chemicals": ("Chemicals", "chemical company", "dyes and fertilisers"),
    "railways": ("Railway Works", "railway engineering firm", "locomotives and carriages"),
    "electric": ("Electric", "electrical company", "lamps and generators"),
    "publishing": ("Press", "publishing house", "novels and poetry"),
}
_PUBLISHER_SUFFIXES = ["Press", "Books", "& Co. Publishers", "House", "Editions"]
_BOOK_ADJ = "Glass Silent Hollow Crimson Distant Iron Paper Salt Winter Amber Broken Quiet Northern Last Golden".split()
_BOOK_NOUN = "Orchard Harbour Lantern Kingdom Meridian Archive Ferry Garden Clockmaker Orchid Tide Bell Vineyard Mapmaker Ledger".split()
_GENRES = ["novel", "novel", "historical novel", "collection of short stories", "travel memoir", "detective novel", "poetry collection"]
_INVENTION_ADJ = "rotary pneumatic folding steam-driven electric hydraulic automatic portable double-action mechanical".split()
_INVENTION_NOUN = "loom press lamp pump sorter telegraph lathe kiln compass calculator typewriter thresher furnace barometer".split()
_PURPOSES = {
    "loom": "for weaving cloth", "press": "for printing and pressing", "lamp": "for lighting rooms and streets",
    "pump": "for moving water and other fluids", "sorter": "for sorting mail and parcels", "telegraph": "for sending messages over wires",
    "lathe": "for shaping wood and metal", "kiln": "for firing pottery and bricks", "compass": "for finding direction",
    "calculator": "for doing arithmetic", "typewriter": "for writing by machine", "thresher": "for separating grain from straw",
    "furnace": "for smelting and heating", "barometer": "for measuring air pressure",
}
_CAREERS = {
    "writer": ["{He} began writing while working as a schoolteacher.", "{His} prose is noted for its plain, spare style.",
               "{He} also wrote essays for several newspapers.", "Critics regard {him} as a master of the short form."],
    "entrepreneur": ["{He} started out as a clerk in a trading house.", "{He} was known as a shrewd but generous employer.",
                     "{He} later served on the board of a savings bank.", "{His} business letters are kept in a public archive."],
    "inventor": ["{He} trained as a mechanic before studying engineering.", "{He} held more than a dozen patents.",
                 "{He} worked for years in a small private workshop.", "{His} notebooks were published after {his} death."],
    "other": ["{His} work is held in several public collections.", "{He} was admired by {his} contemporaries.",
              "{He} received many honours during {his} lifetime.", "{He} travelled widely as a young adult."],
}
_CLUB_SUFFIX = ["Rovers", "Athletic", "Wanderers", "United", "FC", "Rangers", "Harriers", "Albion", "Olympic", "Dynamo"]
_CLUB_INVENTED_PREFIX = "Kestrel Ironside Blackwater Redhill Greystone Foxhollow Oakmere Stormgate Highfield Lanternfield".split()
_SPORTS = ["football", "rugby", "ice hockey", "basketball"]
_SEAS = ["Amber Sea", "Gulf of Orsa", "Pale Sea", "Bay of Kell", "Western Ocean", "Narrow Sea"]
_SOURCES = ["the {x} Mountains", "Lake {x}", "the {x} Hills", "the {x} Glacier", "the {x} Marshes"]
_CITY_PATTERNS = ["{x}", "{x}", "{x}", "{x}", "Port {x}", "{x}ford", "{x}haven", "New {x}", "{x} Falls", "San {x}", "{x}by"]
_COUNTRY_SUFFIX = ["ia", "ar", "enia", "ovia", "and", "esh", "or", "ia"]


class _Names:
    """Draws unique invented names (a helper of :func:`build_world`)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self, min_syl: int = 2, max_syl: int = 3) -> str:
        for _ in range(1000):
            n = self.rng.randint(min_syl, max_syl)
            w = "".join(self.rng.choice(_SYLLABLES) for _ in range(n))
            if 4 <= len(w) <= 10 and w.casefold() not in self.used:
                self.used.add(w.casefold())
                return w.capitalize()
        raise RuntimeError("name space exhausted")

    def unique(self, make) -> str:
        for _ in range(1000):
            name = make()
            if name.casefold() not in self.used:
                self.used.add(name.casefold())
                return name
        raise RuntimeError("name space exhausted")


def build_world(seed: int = 0, config: WorldConfig | None = None) -> World:
    """Draw the fictional world of ``seed`` (entities in corpus order)."""
    cfg = config or WorldConfig()
    rng = random.Random(f"search-world-{seed}")
    names = _Names(rng)
    entities: list[Entity] = []

    def add(kind: str, name: str, **attrs: Any) -> Entity:
        n = sum(1 for e in entities if e.kind == kind)
        entity = Entity(id=f"{kind}-{n:03d}", kind=kind, name=name, attrs=attrs)
        entities.append(entity)
        return entity

    countries = [
        add("country", names.unique(lambda: names.word(2, 2)[:-1] + rng.choice(_COUNTRY_SUFFIX)),
            founded=rng.randint(1200, 1870), government=rng.choice(["republic", "kingdom", "federal republic", "principality"]))
        for _ in range(cfg.countries)
    ]
    for c in countries:
        c.attrs["demonym"] = c.name.rstrip("aeiou") + rng.choice(["ian", "ese", "ic", "i"])

    cities: list[Entity] = []
    for i in range(cfg.cities):
        country = countries[i % len(countries)]
        name = names.unique(lambda: rng.choice(_CITY_PATTERNS).format(x=names.word(2, 2)))
        capital = i < len(countries)
        pop = rng.randint(400, 2600) * 1000 if capital else rng.choice([rng.randint(8, 95) * 1000, rng.randint(100, 900) * 1000])
        cities.append(add("city", name, country=country.id, population=pop, capital=capital,
                          founded=rng.randint(900, 1850), coastal=rng.random() < 0.3))
        if capital:
            country.attrs["capital"] = cities[-1].id

    rivers: list[Entity] = []
    shuffled = list(cities)
    rng.shuffle(shuffled)
    on_river = shuffled[: int(len(cities) * 0.8)]
    for i in range(cfg.rivers):
        rname = names.unique(lambda: names.word(2, 2) + " River")
        rivers.append(add("river", rname, length_km=rng.randint(90, 2400),
                          source=rng.choice(_SOURCES).format(x=names.word(2, 2)), mouth=rng.choice(_SEAS), cities=[]))
    for i, city in enumerate(on_river):
        river = rivers[i % len(rivers)]
        city.attrs["river"] = river.id
        river.attrs["cities"].append(city.id)
    for river in rivers:
        river.attrs["cities"].sort()
        first = next((c for c in cities if c.id in river.attrs["cities"]), None)
        river.attrs["country"] = first.attrs["country"] if first else countries[0].id

    people: list[Entity] = []
    roles = (["writer"] * 40 + ["entrepreneur"] * 42 + ["inventor"] * 30 + ["other"] * (cfg.people - 112))[: cfg.people]
    for role in roles:
        gender = rng.choice(["f", "m"])
        name = names.unique(lambda: f"{rng.choice(_FIRST_NAMES[gender])} {names.word(2, 3)}")
        born = rng.randint(1750, 1950)
        birth = rng.choice(cities)
        death_city = rng.choice(cities) if rng.random() < 0.6 else birth
        lifespan = rng.randint(38, 94)
        people.append(add("person", name, gender=gender, role=role, occupation=rng.choice(_OCCUPATIONS[role]),
                          born=born, born_in=birth.id, died=born + lifespan if born + lifespan < 2020 else None,
                          died_in=death_city.id if born + lifespan < 2020 else None))

    by_role = {r: [p for p in people if p.attrs["role"] == r] for r in _OCCUPATIONS}
    companies: list[Entity] = []
    founders = by_role["entrepreneur"] + by_role["inventor"][: cfg.companies - len(by_role["entrepreneur"])]
    industries = [k for k in _INDUSTRIES if k != "publishing"]
    for i in range(cfg.companies):
        founder = founders[i % len(founders)]
        publisher = i < cfg.publishers
        industry = "publishing" if publisher else rng.choice(industries)
        if publisher:
            name = names.unique(lambda: f"{names.word(2, 2)} {rng.choice(_PUBLISHER_SUFFIXES)}")
        elif rng.random() < 0.2:
            name = names.unique(lambda: f"{founder.name.split()[-1]} & Sons")
        else:
            name = names.unique(lambda: f"{names.word(2, 2)} {_INDUSTRIES[industry][0]}")
        year = founder.attrs["born"] + rng.randint(22, 45)
        companies.append(add("company", name, industry=industry, founded_by=founder.id, founded=year,
                             headquartered_in=rng.choice(cities).id, employees=rng.randint(40, 90000)))
        founder.attrs.setdefault("founded", []).append(companies[-1].id)
    publishers = companies[: cfg.publishers]

    books: list[Entity] = []
    writers = by_role["writer"]
    for i in range(cfg.books):
        author = writers[i % len(writers)]
        pub = rng.choice(publishers)

        def title() -> str:
            form = rng.random()
            if form < 0.45:
                return f"The {rng.choice(_BOOK_ADJ)} {rng.choice(_BOOK_NOUN)}"
            if form < 0.7:
                return f"{rng.choice(['A Winter', 'A Summer', 'Letters', 'Nights', 'Rain'])} in {names.word(2, 2)}"
            return f"The {rng.choice(_BOOK_NOUN)} of {names.word(2, 2)}"

        year = max(author.attrs["born"] + rng.randint(24, 60), pub.attrs["founded"] + rng.randint(1, 30))
        books.append(add("book", names.unique(title), genre=rng.choice(_GENRES), written_by=author.id,
                         published_by=pub.id, year=year, setting=rng.choice(cities).id))
        author.attrs.setdefault("wrote", []).append(books[-1].id)
        pub.attrs.setdefault("published", []).append(books[-1].id)

    inventions: list[Entity] = []
    inventors = by_role["inventor"]
    for i in range(cfg.inventions):
        inventor = inventors[i % len(inventors)]
        eponym = rng.random() < 0.25
        if eponym:
            name = names.unique(lambda: f"{inventor.name.split()[-1]} {rng.choice(_INVENTION_NOUN)}")
        else:
            name = names.unique(lambda: f"{rng.choice(_INVENTION_ADJ)} {rng.choice(_INVENTION_NOUN)}".capitalize())
        year = inventor.attrs["born"] + rng.randint(20, 50)
        maker = rng.choice([c for c in companies if c.attrs["industry"] != "publishing"])
        inventions.append(add("invention", name, eponym=eponym, invented_by=inventor.id, year=year,
                              manufactured_by=maker.id if rng.random() < 0.6 else None))
        inventor.attrs.setdefault("invented", []).append(inventions[-1].id)

    clubs: list[Entity] = []
    for i in range(cfg.clubs):
        city = rng.choice(cities)
        sport = _SPORTS[(i // 2) % len(_SPORTS)]
        if rng.random() < 0.5:
            name = names.unique(lambda: f"{city.name} {rng.choice(_CLUB_SUFFIX)}")
        else:
            name = names.unique(lambda: f"{rng.choice(_CLUB_INVENTED_PREFIX + [names.word(2, 2)])} {rng.choice(_CLUB_SUFFIX)}")
        clubs.append(add("club", name, sport=sport, plays_in=city.id, founded=rng.randint(1860, 1975),
                         stadium=f"{names.word(2, 2)} {rng.choice(['Park', 'Arena', 'Ground', 'Stadium', 'Field'])}",
                         titles=rng.randint(0, 24)))
    for a, b in zip(clubs[0::2], clubs[1::2]):
        if a.attrs["plays_in"] == b.attrs["plays_in"]:
            others = [c for c in cities if c.id != a.attrs["plays_in"]]
            b.attrs["plays_in"] = rng.choice(others).id
        a.attrs["rival_of"], b.attrs["rival_of"] = b.id, a.id

    return World(entities=entities, by_id={e.id: e for e in entities})


# ---------------------------------------------------------------- documents


def running_name(entity: Entity) -> str:
    """How a name reads inside a sentence: inventions are common nouns ("the rotary loom") unless eponymous."""
    if entity.kind == "invention" and not entity.attrs.get("eponym"):
        return entity.name[0].lower() + entity.name[1:]
    return entity.name


def _pron(person: Entity) -> tuple[str, str]:
    return ("she", "her") if person.attrs["gender"] == "f" else ("he", "his")


def _join(names: list[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _num(n: int) -> str:
    return f"{n:,}"


def _article(word: str) -> str:
    return "an" if word[0].lower() in "aeiou" else "a"


def _render(entity: Entity, world: World, rng: random.Random) -> list[str]:
    """The sentences of one entity's document."""
    a, n = entity.attrs, entity.name
    name = world.name
    pick = rng.choice
    out: list[str] = []
    if entity.kind == "country":
        out.append(pick([f"{n} is a {a['government']} whose capital and largest city is {name(a['capital'])}.",
                         f"{n} is a {a['government']}; its capital is {name(a['capital'])}."]))
        out.append(pick([f"The state dates its founding to {a['founded']}.", f"{n} was established as a state in {a['founded']}."]))
        cities = [c for c in world.of_kind("city") if c.attrs["country"] == entity.id]
        others = [c.name for c in cities if not c.attrs["capital"]][:4]
        if others:
            out.append(pick([f"Other important cities include {_join(others)}.", f"Besides the capital, its main towns are {_join(others)}."]))
        rivers = [r.name for r in world.of_kind("river") if r.attrs["country"] == entity.id][:3]
        if rivers:
            out.append(f"Its principal {'rivers are' if len(rivers) > 1 else 'river is'} the {_join(rivers)}.")
        out.append(f"People from {n} are called {a['demonym']}s.")
    elif entity.kind == "city":
        country = name(a["country"])
        if a["capital"]:
            out.append(pick([f"{n} is the capital of {country}.", f"{n} is the capital city of {country}."]))
        else:
            out.append(pick([f"{n} is a city in {country}.", f"{n} is a town in {country}.", f"{n} is a city located in {country}."]))
        out.append(pick([f"It has a population of about {_num(a['population'])}.",
                         f"Around {_num(a['population'])} people live there.",
                         f"The city has roughly {_num(a['population'])} inhabitants."]))
        if a.get("river"):
            out.append(pick([f"{n} lies on the {name(a['river'])}.", f"The {name(a['river'])} flows through the city.",
                             f"It stands on the banks of the {name(a['river'])}."]))
        if a["coastal"]:
            out.append(pick(["It is also a seaport.", "The city has a busy harbour on the coast."]))
        out.append(pick([f"The settlement was first recorded in {a['founded']}.", f"It was founded in {a['founded']}.",
                         f"Its history goes back to {a['founded']}."]))
        based = [c.name for c in world.of_kind("company") if c.attrs["headquartered_in"] == entity.id][:3]
        if based:
            out.append(pick([f"Companies based in {n} include {_join(based)}.", f"{_join(based)} {'have' if len(based) > 1 else 'has'} {'their' if len(based) > 1 else 'its'} head office here."]))
        natives = [p.name for p in world.of_kind("person") if p.attrs["born_in"] == entity.id][:3]
        if natives:
            out.append(pick([f"Notable people born in {n} include {_join(natives)}.", f"{_join(natives)} {'were' if len(natives) > 1 else 'was'} born here."]))
        clubs = [c.name for c in world.of_kind("club") if c.attrs["plays_in"] == entity.id][:2]
        if clubs:
            out.append(f"It is home to {_join(clubs)}.")
    elif entity.kind == "river":
        cities = [name(c) for c in a["cities"]]
        out.append(pick([f"The {n} is a river in {name(a['country'])}, {_num(a['length_km'])} kilometres long.",
                         f"The {n} is a {_num(a['length_km'])}-kilometre river of {name(a['country'])}."]))
        out.append(pick([f"It rises in {a['source']} and empties into the {a['mouth']}.",
                         f"Its source is {a['source']}, and its mouth is on the {a['mouth']}."]))
        if cities:
            out.append(pick([f"Along its course it flows through {_join(cities)}.",
                             f"Cities on the river include {_join(cities)}.",
                             f"The river passes {_join(cities)}."]))
        out.append(pick(["It is navigable in its lower reaches.", "Several dams regulate its flow.", "It is known for its salmon runs."]))
    elif entity.kind == "person":
        he, his = _pron(entity)
        surname = n.split()[-1]
        occ = a["occupation"].replace("businessman", "businesswoman" if a["gender"] == "f" else "businessman")
        dates = f"{a['born']}–{a['died']}" if a.get("died") else f"born {a['born']}"
        out.append(f"{n} ({dates}) was {_article(occ)} {occ}.")
        born_in = name(a["born_in"])
        out.append(pick([f"{he.capitalize()} was born in {born_in}.", f"{surname} was born in {born_in} in {a['born']}.",
                         f"Born in {born_in}, {he} spent {his} early years there.", f"A native of {born_in}, {surname} grew up there."]))
        him = "her" if a["gender"] == "f" else "him"
        out.append(pick(_CAREERS[a["role"]]).format(He=he.capitalize(), His=his.capitalize(), him=him, his=his))
        for cid in a.get("founded", []):
            c = world.by_id[cid]
            out.append(pick([f"In {c.attrs['founded']} {he} founded {c.name}.", f"{surname} established {c.name} in {c.attrs['founded']}.",
                             f"{he.capitalize()} is the founder of {c.name}."]))
        for iid in a.get("invented", [])[:2]:
            i = world.by_id[iid]
            out.append(pick([f"{he.capitalize()} invented the {running_name(i)} in {i.attrs['year']}.",
                             f"{surname} is credited with the invention of the {running_name(i)}."]))
        books = [world.by_id[b] for b in a.get("wrote", [])]
        if books:
            titles = [b.name for b in books]
            out.append(pick([f"{his.capitalize()} best-known {'works are' if len(books) > 1 else 'work is'} {_join(titles)}.",
                             f"{surname} wrote {_join(titles)}."]))
        if a.get("died_in"):
            if a["died_in"] == a["born_in"]:
                out.append(pick([f"{he.capitalize()} died in {born_in} in {a['died']}.", f"{surname} died in {a['died']} in {his} home town."]))
            else:
                out.append(pick([f"{he.capitalize()} died in {name(a['died_in'])} in {a['died']}.",
                                 f"{surname} later moved to {name(a['died_in'])}, where {he} died in {a['died']}."]))
    elif entity.kind == "company":
        ind = _INDUSTRIES[a["industry"]]
        founder = name(a["founded_by"])
        out.append(pick([f"{n} is {_article(ind[1])} {ind[1]} known for {ind[2]}.", f"{n} is {_article(ind[1])} {ind[1]}."]))
        out.append(pick([f"It was founded in {a['founded']} by {founder}.", f"{founder} established the company in {a['founded']}.",
                         f"The firm was started by {founder} in {a['founded']}.", f"Its founder, {founder}, set it up in {a['founded']}."]))
        hq = name(a["headquartered_in"])
        out.append(pick([f"{n} is headquartered in {hq}.", f"Its head office is in {hq}.", f"The company is based in {hq}.",
                         f"Its headquarters are in {hq}."]))
        if a["industry"] == "publishing":
            pub = [world.by_id[b].name for b in a.get("published", [])][:3]
            if pub:
                out.append(pick([f"Its list includes {_join(pub)}.", f"It published {_join(pub)}."]))
        else:
            made = [running_name(i) for i in world.of_kind("invention") if i.attrs.get("manufactured_by") == entity.id][:2]
            if made:
                out.append(f"It was the first to manufacture the {_join(made)}.")
        out.append(pick([f"It employs about {_num(a['employees'])} people.", f"The company has around {_num(a['employees'])} employees."]))
    elif entity.kind == "book":
        author = name(a["written_by"])
        out.append(pick([f"{n} is a {a['year']} {a['genre']} by {author}.", f"{n} is a {a['genre']} written by {author} and first published in {a['year']}.",
                         f"{n} is a {a['genre']} by the writer {author}, published in {a['year']}."]))
        pub = name(a["published_by"])
        out.append(pick([f"It was published by {pub}.", f"The first edition appeared from {pub}.", f"{pub} brought out the first edition."]))
        out.append(pick([f"It is set in {name(a['setting'])}.", f"Most of the book takes place in {name(a['setting'])}."]))
        out.append(pick(["It was well received by critics.", "It has been translated into several languages.",
                         "It was later adapted for the stage.", "Reviewers praised its prose."]))
    elif entity.kind == "invention":
        inv = name(a["invented_by"])
        lower = running_name(entity)
        out.append(pick([f"The {lower} was invented by {inv} in {a['year']}.", f"The {lower} is a device invented in {a['year']} by {inv}.",
                         f"{inv} invented the {lower} in {a['year']}."]))
        noun = n.split()[-1].lower()
        out.append(pick([f"It is a kind of {noun} {_PURPOSES[noun]}.", f"Like other {noun + ('es' if noun.endswith(('s', 'sh', 'ch')) else 's')}, it is used {_PURPOSES[noun]}."]))
        if a.get("manufactured_by"):
            out.append(pick([f"It was first produced commercially by {name(a['manufactured_by'])}.",
                             f"{name(a['manufactured_by'])} was the first company to manufacture it."]))
        out.append(pick(["It was widely adopted in factories.", "Early models were expensive and unreliable.",
                         "It remained in use for decades.", "Improved versions followed within a few years."]))
    elif entity.kind == "club":
        city = name(a["plays_in"])
        out.append(pick([f"{n} is a professional {a['sport']} club based in {city}.", f"{n} is {_article(a['sport'])} {a['sport']} club from {city}.",
                         f"{n} is {_article(a['sport'])} {a['sport']} team that plays in {city}."]))
        out.append(pick([f"The club was founded in {a['founded']}.", f"It was formed in {a['founded']}.", f"Founded in {a['founded']}, it is one of the older clubs in the league."]))
        out.append(pick([f"Its home ground is {a['stadium']}.", f"The team plays its home matches at {a['stadium']}."]))
        rival = name(a["rival_of"])
        out.append(pick([f"Its fiercest rival is {rival}.", f"The club has a long-standing rivalry with {rival}.",
                         f"Matches against {rival} draw the largest crowds."]))
        out.append(f"It has won {a['titles']} national {'title' if a['titles'] == 1 else 'titles'}." if a["titles"] else "It has never won the national title.")
    return out


def render_documents(world: World, seed: int = 0) -> list[dict[str, str]]:
    """One ``{"doc_id", "title", "text"}`` document per entity, in corpus order."""
    rng = random.Random(f"search-docs-{seed}")
    docs: list[dict[str, str]] = []
    for entity in world.entities:
        docs.append({"doc_id": entity.id, "title": entity.name, "text": " ".join(_render(entity, world, rng))})
    return docs


def build_corpus(seed: int = 0) -> list[dict[str, str]]:
    """The documents of the world of ``seed`` (seed 0 is the bundled corpus)."""
    return render_documents(build_world(seed), seed)


def write_corpus(path: str | Path, seed: int = 0) -> Path:
    """Write the corpus of ``seed`` as JSONL (gzip-compressed, reproducibly, when ``path`` ends in ``.gz``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n" for d in build_corpus(seed)).encode("utf-8")
    if path.suffix == ".gz":
        with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return path


BUNDLED_CORPUS = Path(__file__).resolve().parent / "corpus.jsonl.gz"
"""Where the packaging step writes the corpus of seed 0 (``write_corpus(BUNDLED_CORPUS)``)."""


def load_bundled_corpus() -> list[dict[str, str]]:
    """The bundled corpus: read from :data:`BUNDLED_CORPUS` when present, else rebuilt with ``build_corpus(0)``."""
    return read_corpus(BUNDLED_CORPUS) if BUNDLED_CORPUS.is_file() else build_corpus(0)


def read_corpus(path: str | Path) -> list[dict[str, str]]:
    """Read a corpus written by :func:`write_corpus` (plain or gzipped JSONL)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
