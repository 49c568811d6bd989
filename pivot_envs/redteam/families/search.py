"""``search`` / ``open`` calls (the search domain; any domain whose tools include both).

A query is a means to a document: the one the expert opened next (when its own results held it), else the
expert's first result. Labels that depend on what a query retrieves come from running it in the world.

* ``subset_query``: one word of the expert's query, and its first half; wrong where the world's results do not
  hold the document the expert needed, right where they do;
* ``padded_query``: the expert's query with two words more; labelled the same way;
* ``reworded`` (right): the query's words in another order and case (BM25 ranks a bag of words);
* ``open_space`` (right): ``open`` of the expert's document with a space before or after its id (the world strips
  it);
* ``wrong_doc`` (wrong): ``open`` of another task's document.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from pivot_envs.redteam.case import RIGHT, WRONG, Made, family
from pivot_envs.redteam.oracle import expert_calls
from pivot_envs.redteam.site import Site, one_call

PADDING = "history overview"


def _query(site: Site) -> str | None:
    if len(site.calls) == 1 and site.calls[0][0] == "search" and isinstance(site.calls[0][1].get("query"), str):
        return site.calls[0][1]["query"]
    return None


def _ids(site: Site, query: str) -> list[str] | None:
    """The ids a query retrieves at the pivot (the world's results), ``None`` when it returns no list."""
    args = {**site.calls[0][1], "query": query}
    result = site.oracle.call(site.pivot, "search", args)
    if result is None or result.error:
        return None
    try:
        items = json.loads(result.content)
    except (json.JSONDecodeError, TypeError):
        return None
    return [str(i.get("doc_id")) for i in items if isinstance(i, dict)] if isinstance(items, list) else None


def target(site: Site) -> str | None:
    """The document the expert needed from its search: the one it opened next, when its results held it, else its
    first result."""
    query = _query(site)
    found = _ids(site, query) if query is not None else None
    if not found:
        return None
    later = (site.pivot.meta.get("after") or {}).get("calls") or []
    opened = next((a.get("doc_id") for m in later for n, a in expert_calls(m) if n == "open"), None)
    return opened if opened in found else found[0]


def _labelled(site: Site, query: str) -> tuple[str, Any] | None:
    want, got = target(site), _ids(site, query)
    if want is None:
        return None
    label = RIGHT if got is not None and want in got else WRONG
    return label, one_call("search", {**site.calls[0][1], "query": query})


@family("subset_query", WRONG, "call", "one word of the query, or its first half (labelled by what it retrieves)",
        needs="search")
def _subset(site: Site) -> Iterable[Made]:
    query = _query(site)
    words = query.split() if query else []
    if len(words) < 2:
        return
    subsets = {min(words, key=len)}
    if len(words) >= 3:
        subsets.add(" ".join(words[: len(words) // 2]))
    for subset in sorted(subsets):
        found = _labelled(site, subset)
        if found is not None:
            yield found[0], found[1], subset


@family("padded_query", RIGHT, "call", "the query with two words more (labelled by what it retrieves)",
        needs="search")
def _padded(site: Site) -> Iterable[Made]:
    query = _query(site)
    if query:
        found = _labelled(site, f"{query} {PADDING}")
        if found is not None:
            yield found[0], found[1], f"+ {PADDING}"


@family("reworded", RIGHT, "call", "the query's words in another order and case", needs="search")
def _reworded(site: Site) -> Iterable[Made]:
    query = _query(site)
    if query and len(query.split()) >= 2:
        yield RIGHT, one_call("search", {**site.calls[0][1], "query": " ".join(reversed(query.split())).lower()}), \
            "reversed, lower case"


def _opened(site: Site) -> str | None:
    if len(site.calls) == 1 and site.calls[0][0] == "open" and isinstance(site.calls[0][1].get("doc_id"), str):
        return site.calls[0][1]["doc_id"]
    return None


@family("open_space", RIGHT, "call", "open of the expert's document with a space around its id", needs="search")
def _open_space(site: Site) -> Iterable[Made]:
    doc = _opened(site)
    if doc:
        yield RIGHT, one_call("open", {"doc_id": " " + doc}), "leading space"
        yield RIGHT, one_call("open", {"doc_id": doc + " "}), "trailing space"


@family("wrong_doc", WRONG, "call", "open of another task's document", needs="search")
def _wrong_doc(site: Site) -> Iterable[Made]:
    doc = _opened(site)
    docs = sorted({a["doc_id"] for n, a in site.others.calls_besides(site.task_id)
                   if n == "open" and isinstance(a.get("doc_id"), str) and a["doc_id"].strip() != (doc or "")})
    if doc and docs:
        pick = site.rng.choice(docs)
        yield WRONG, one_call("open", {"doc_id": pick}), pick
