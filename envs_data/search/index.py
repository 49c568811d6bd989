"""A small ranked retrieval index (BM25F-lite) over the bundled search corpus.

Pure Python, no dependencies, deterministic on every machine:

- tokens: lower-cased ``[a-z0-9]+`` runs, a short English stop-word list
  removed (question words included, so "who founded X" ranks like "X
  founded"), and a light suffix stemmer (``founders``/``founded``/``founder``
  all become ``found``);
- scoring: BM25F over two fields, title and body, each length-normalised on
  its own, a title occurrence weighing ``title_weight`` body occurrences (a
  document titled "Velrin Tools" beats one that merely mentions Velrin Tools,
  and the city "Port Avila" beats the club "Port Avila Rovers" for the query
  "Port Avila");
- ties: equal scores are broken by the document's position in the corpus, so
  the ranking never depends on dict or set order;
- snippets: the sentence of the document that shares the most query terms
  (the first sentence on ties), cut to ``snippet_chars`` at a word boundary.

The same class serves the data generator (tool results are computed by really
running it) and the search environment at scoring time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

_TOKEN = re.compile(r"[a-z0-9]+")
_SENTENCE = re.compile(r"(?<=[.!?])(?<!\bCo\.)(?<!\bSt\.)\s+(?=[A-Z0-9\"'])")

STOPWORDS: frozenset[str] = frozenset(
    """a an and are as at be been by did do does for from had has have he her his how in into is it its
    of on or she that the their them then there they this to was were what when where which who whom
    whose why with s""".split()
)
"""Tokens dropped from documents and queries."""


def stem(token: str) -> str:
    """A light, deterministic suffix stripper (plural ``s``/``ies``, then ``ing``/``ed``/``er``)."""
    if len(token) > 4 and token.endswith("ies"):
        token = token[:-3] + "y"
    elif len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        token = token[:-1]
    for suffix in ("ing", "ed", "er"):
        if token.endswith(suffix) and len(token) - len(suffix) >= 4:
            return token[: -len(suffix)]
    return token


def tokenize(text: str) -> list[str]:
    """Index terms of ``text`` in order (lower-cased, stop words removed, stemmed)."""
    return [stem(t) for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


def split_sentences(text: str) -> list[str]:
    """Split a text into sentences (``.``, ``!``, ``?`` then a capital or digit; not after ``Co.``/``St.``)."""
    return [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip()]


@dataclass(frozen=True)
class Hit:
    """One ranked search result.

    Attributes:
        doc_id: the document's id.
        title: the document's title.
        snippet: the best-matching sentence of the document, shortened.
        score: the BM25 score (higher is better).
    """

    doc_id: str
    title: str
    snippet: str
    score: float

    def to_result(self) -> dict[str, str]:
        """The tool-result form: ``{"doc_id", "title", "snippet"}`` (no score)."""
        return {"doc_id": self.doc_id, "title": self.title, "snippet": self.snippet}


@dataclass
class IndexConfig:
    """Parameters of :class:`SearchIndex`.

    Attributes:
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation of the body (0 = none, 1 = full).
        b_title: length normalisation of the title (a short exact title beats a longer one).
        title_weight: weight of a title occurrence relative to a body occurrence (BM25F).
        snippet_chars: maximum snippet length in characters (an ellipsis marks a cut).
    """

    k1: float = 1.2
    b: float = 0.75
    b_title: float = 0.75
    title_weight: float = 3.0
    snippet_chars: int = 140


@dataclass
class SearchIndex:
    """An inverted BM25 index over documents ``{"doc_id", "title", "text"}``.

    Build it with :meth:`build`; query it with :meth:`search`; read a document with :meth:`get`.
    """

    docs: list[dict[str, str]]
    config: IndexConfig = field(default_factory=IndexConfig)
    _postings: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict, repr=False)
    _lengths: list[tuple[int, int]] = field(default_factory=list, repr=False)
    _by_id: dict[str, int] = field(default_factory=dict, repr=False)
    _by_title: dict[str, str] = field(default_factory=dict, repr=False)
    _avg_len: tuple[float, float] = (1.0, 1.0)

    @classmethod
    def build(cls, docs: Iterable[dict[str, Any]], config: IndexConfig | None = None) -> "SearchIndex":
        """Index ``docs`` (each needs string ``doc_id``, ``title`` and ``text``; ids must be unique)."""
        rows: list[dict[str, str]] = []
        for i, doc in enumerate(docs):
            for key in ("doc_id", "title", "text"):
                if not isinstance(doc.get(key), str) or not doc[key]:
                    raise ValueError(f"document #{i}: field {key!r} must be a non-empty string")
            rows.append({"doc_id": doc["doc_id"], "title": doc["title"], "text": doc["text"]})
        index = cls(docs=rows, config=config or IndexConfig())
        index._index()
        return index

    def _index(self) -> None:
        for pos, doc in enumerate(self.docs):
            if doc["doc_id"] in self._by_id:
                raise ValueError(f"document #{pos}: duplicate doc_id {doc['doc_id']!r}")
            self._by_id[doc["doc_id"]] = pos
            self._by_title.setdefault(doc["title"].casefold(), doc["doc_id"])
            counts: dict[str, list[int]] = {}
            title_terms = tokenize(doc["title"])
            body_terms = tokenize(doc["text"])
            for field_no, terms in ((0, title_terms), (1, body_terms)):
                for term in terms:
                    counts.setdefault(term, [0, 0])[field_no] += 1
            for term, (tf_title, tf_body) in counts.items():
                self._postings.setdefault(term, []).append((pos, tf_title, tf_body))
            self._lengths.append((len(title_terms), len(body_terms)))
        n = max(1, len(self._lengths))
        self._avg_len = (
            max(1e-9, sum(t for t, _ in self._lengths) / n),
            max(1e-9, sum(b for _, b in self._lengths) / n),
        )

    def __len__(self) -> int:
        return len(self.docs)

    def get(self, doc_id: str) -> dict[str, str] | None:
        """The document with id ``doc_id``, or ``None``."""
        pos = self._by_id.get(doc_id)
        return None if pos is None else self.docs[pos]

    def id_for_title(self, title: str) -> str | None:
        """The doc_id of the document titled ``title`` (case-insensitive), or ``None``."""
        return self._by_title.get(title.strip().casefold())

    def idf(self, term: str) -> float:
        """BM25 idf of an (already tokenized) term; 0 for an unknown term."""
        df = len(self._postings.get(term, ()))
        if df == 0:
            return 0.0
        n = len(self.docs)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def search(self, query: str, top_k: int = 5) -> list[Hit]:
        """The ``top_k`` best documents for ``query``, best first (only documents sharing a term)."""
        terms = list(dict.fromkeys(tokenize(query)))
        cfg = self.config
        avg_title, avg_body = self._avg_len
        scores: dict[int, float] = {}
        for term in terms:
            idf = self.idf(term)
            for pos, tf_title, tf_body in self._postings.get(term, ()):
                len_title, len_body = self._lengths[pos]
                tf = cfg.title_weight * tf_title / (1.0 - cfg.b_title + cfg.b_title * len_title / avg_title)
                tf += tf_body / (1.0 - cfg.b + cfg.b * len_body / avg_body)
                scores[pos] = scores.get(pos, 0.0) + idf * tf * (cfg.k1 + 1.0) / (tf + cfg.k1)
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[: max(0, top_k)]
        return [
            Hit(
                doc_id=self.docs[pos]["doc_id"],
                title=self.docs[pos]["title"],
                snippet=self.snippet(self.docs[pos]["text"], terms),
                score=round(score, 6),
            )
            for pos, score in ranked
        ]

    def snippet(self, text: str, terms: list[str]) -> str:
        """The sentence of ``text`` sharing the most of ``terms``, cut to ``snippet_chars``."""
        wanted = set(terms)
        best, best_overlap = "", -1
        for sentence in split_sentences(text):
            overlap = len(wanted.intersection(tokenize(sentence)))
            if overlap > best_overlap:
                best, best_overlap = sentence, overlap
        limit = self.config.snippet_chars
        if len(best) <= limit:
            return best
        cut = best[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
        return cut + "…"
