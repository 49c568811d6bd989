"""Tests of the search-domain generator, its fictional corpus and its BM25 index."""

from __future__ import annotations

import gzip
import json
import time
from collections import Counter

import jsonschema
import pytest

from pivot_envs.envs_data.search import generator as search
from pivot_envs.envs_data.search.corpus import (
    build_corpus,
    build_world,
    load_bundled_corpus,
    read_corpus,
    write_corpus,
)
from pivot_envs.envs_data.search.index import SearchIndex, split_sentences, tokenize
from pivot_envs.types import Trajectory


@pytest.fixture(scope="module")
def trajectories() -> list[Trajectory]:
    return search.generate(250, seed=0)


@pytest.fixture(scope="module")
def index() -> SearchIndex:
    return SearchIndex.build(build_corpus(0))


def _dump(trajs: list[Trajectory]) -> str:
    return "\n".join(json.dumps(t.to_dict(), ensure_ascii=False) for t in trajs)


def _calls(traj: Trajectory):
    """(message index, tool call, tool result message) for every call of a trajectory."""
    results = {m["tool_call_id"]: m for m in traj.messages if m["role"] == "tool"}
    for i, m in enumerate(traj.messages):
        for call in m.get("tool_calls") or []:
            yield i, call, results.get(call["id"])


# ---------------------------------------------------------------- generator contract


def test_deterministic_and_seed_dependent():
    a, b = search.generate(30, seed=7), search.generate(30, seed=7)
    assert _dump(a) == _dump(b)
    assert _dump(search.generate(30, seed=8)) != _dump(a)
    assert _dump(search.generate(10, seed=7)) == _dump(a[:10])  # episode i depends on (seed, i) only


def test_counts_and_turns(trajectories):
    turns = [sum(m["role"] == "assistant" for m in t.messages) for t in trajectories]
    assert sum(turns) >= 1000
    assert min(turns) >= 4 and max(turns) <= search.MAX_ASSISTANT_TURNS
    assert search.DOMAIN == "search"
    for i, t in enumerate(trajectories):
        assert t.meta["source"] == "pivot-envs/search" and t.meta["id"] == f"search-0-{i}"
        assert t.messages[0]["role"] == "system" and t.messages[1]["role"] == "user"
        assert t.messages[-1]["role"] == "assistant" and "tool_calls" not in t.messages[-1]
        assert isinstance(t.messages[-1]["content"], str) and t.messages[-1]["content"]


def test_tool_calls_validate_and_ids_match(trajectories):
    for t in trajectories:
        specs = {tool["function"]["name"]: tool["function"]["parameters"] for tool in t.tools}
        assert set(specs) == {"search", "open"}
        pending: list[str] = []
        for m in t.messages:
            if m["role"] == "assistant":
                assert not pending, f"{t.id}: tool calls without results before the next turn"
                for call in m.get("tool_calls") or []:
                    assert call["type"] == "function" and call["id"].startswith("call_")
                    fn = call["function"]
                    assert fn["name"] in specs
                    jsonschema.validate(json.loads(fn["arguments"]), specs[fn["name"]])
                    pending.append(call["id"])
            elif m["role"] == "tool":
                assert pending and m["tool_call_id"] == pending.pop(0)
        assert not pending


def test_tool_results_are_real(trajectories, index):
    """Every tool result equals what the tools return when run again against the bundled corpus."""
    for t in trajectories:
        for _, call, result in _calls(t):
            args = json.loads(call["function"]["arguments"])
            assert result["name"] == call["function"]["name"]
            assert result["content"] == search.run_tool(index, call["function"]["name"], args)


def test_alternatives_well_formed(trajectories, index):
    n_search_alts = 0
    for t in trajectories:
        alts = t.meta["alternatives"]
        for key, options in alts.items():
            turn = int(key)
            expert = t.messages[turn]
            assert expert["role"] == "assistant" and options
            for alt in options:
                assert alt["role"] == "assistant" and alt != expert
                if "tool_calls" in expert:
                    (call,) = alt["tool_calls"]
                    (expert_call,) = expert["tool_calls"]
                    assert call["function"]["name"] == expert_call["function"]["name"] == "search"
                    args = json.loads(call["function"]["arguments"])
                    jsonschema.validate(args, t.tools[0]["function"]["parameters"])
                    expert_args = json.loads(expert_call["function"]["arguments"])
                    top = index.search(args["query"], args.get("top_k", 5))[0].doc_id
                    assert top == index.search(expert_args["query"], expert_args.get("top_k", 5))[0].doc_id
                    n_search_alts += 1
                else:
                    assert t.meta["answer"] in alt["content"]
    assert n_search_alts > 500


def test_chains_are_followed(trajectories, index):
    """Successful experts open every gold document in order and state the answer that the last one holds."""
    for t in trajectories:
        opened = [json.loads(c["function"]["arguments"])["doc_id"] for _, c, r in _calls(t)
                  if c["function"]["name"] == "open" and not r["content"].startswith("Error:")]
        gold = t.meta["gold_docs"]
        final = t.messages[-1]["content"]
        if t.reward == 1.0:
            assert opened == gold
            assert t.meta["answer"] in final
            if not t.meta["task"].startswith("compare_"):
                assert t.meta["answer"] in index.get(gold[-1])["text"]
        else:
            assert t.meta["outcome"] in {"early_stop", "misread"}
            assert not any(alias in final for alias in t.meta["answer_aliases"])
            if t.meta["outcome"] == "early_stop":
                assert opened == gold[:-1]
        for i, doc_id in enumerate(gold[:-1]):
            if not t.meta["task"].startswith("compare_"):  # the bridge entity is named in the previous document
                assert index.get(gold[i + 1])["title"] in index.get(doc_id)["text"]


def test_search_targets_found(trajectories):
    for t in trajectories:
        for key, target in t.meta["search_targets"].items():
            hits = json.loads(t.messages[int(key) + 1]["content"])
            assert target in [h["doc_id"] for h in hits]
            assert t.messages[int(key) + 2]["tool_calls"][0]["function"]["name"] == "open"


def test_mix_of_tasks_failures_errors_refinements(trajectories):
    tasks = Counter(t.meta["task"] for t in trajectories)
    assert len(tasks) >= 15
    assert {t.meta["hops"] for t in trajectories} == {2, 3}
    failed = sum(t.reward == 0.0 for t in trajectories)
    assert 0.05 <= failed / len(trajectories) <= 0.15
    results = [r for t in trajectories for _, _, r in _calls(t)]
    errors = sum(r["content"].startswith("Error:") for r in results)
    assert 0.01 <= errors / len(results) <= 0.06
    refined = sum(1 for t in trajectories for i, c, _ in _calls(t)
                  if c["function"]["name"] == "search" and str(i) not in t.meta["search_targets"])
    assert refined >= 10
    assert len({t.messages[1]["content"] for t in trajectories}) > 200


def test_size_and_speed():
    start = time.process_time()  # CPU seconds: a loaded machine stretches wall time, not the work done
    trajs = search.generate(300, seed=1)
    cpu = time.process_time() - start
    assert cpu < 20, f"generate(300) used {cpu:.1f} s of CPU"
    blob = gzip.compress((_dump(trajs) + "\n").encode("utf-8"))
    corpus = gzip.compress("".join(json.dumps(d) + "\n" for d in build_corpus(0)).encode("utf-8"))
    assert len(blob) + len(corpus) < 500_000


# ---------------------------------------------------------------- corpus


def test_corpus_shape_and_determinism():
    docs = build_corpus(0)
    assert 300 <= len(docs) <= 600
    assert len({d["doc_id"] for d in docs}) == len(docs) == len({d["title"].casefold() for d in docs})
    for d in docs:
        assert set(d) == {"doc_id", "title", "text"}
        assert 3 <= len(split_sentences(d["text"])) <= 8, d
    assert build_corpus(0) == docs and build_corpus(1) != docs
    kinds = Counter(e.kind for e in build_world(0).entities)
    assert set(kinds) == {"country", "city", "river", "person", "company", "book", "invention", "club"}


def test_write_corpus_roundtrip(tmp_path):
    a, b = write_corpus(tmp_path / "a" / "corpus.jsonl.gz"), search.write_corpus(tmp_path / "b.jsonl.gz")
    assert a.read_bytes() == b.read_bytes()  # reproducible gzip (no timestamp)
    assert len(a.read_bytes()) < 100_000
    assert read_corpus(a) == build_corpus(0)
    plain = write_corpus(tmp_path / "corpus.jsonl")
    assert read_corpus(plain) == build_corpus(0)


def test_bundled_corpus_is_current():
    """The bundled file (when the packaging step has written it) is exactly the corpus the generator uses."""
    assert load_bundled_corpus() == build_corpus(0)


def test_generate_with_other_corpus_seed():
    trajs = search.generate(5, seed=0, corpus_seed=3)
    other = SearchIndex.build(build_corpus(3))
    assert all(t.meta["corpus_seed"] == 3 for t in trajs)
    for t in trajs:
        for _, call, result in _calls(t):
            args = json.loads(call["function"]["arguments"])
            assert result["content"] == search.run_tool(other, call["function"]["name"], args)


# ---------------------------------------------------------------- index and tools


def test_index_ranks_titles_first(index):
    docs = build_corpus(0)
    top1 = sum(index.search(d["title"], 5)[0].doc_id == d["doc_id"] for d in docs)
    assert top1 / len(docs) >= 0.97
    assert all(d["doc_id"] in [h.doc_id for h in index.search(d["title"], 5)] for d in docs)


def test_index_tie_break_and_limits():
    docs = [{"doc_id": f"d{i}", "title": "Same", "text": "Alpha beta. Gamma delta."} for i in (3, 1, 2)]
    docs.append({"doc_id": "x", "title": "Other", "text": "Unrelated words here. More of them."})
    idx = SearchIndex.build(docs)
    assert [h.doc_id for h in idx.search("alpha", 10)] == ["d3", "d1", "d2"]  # corpus order on ties
    assert len(idx.search("alpha", 2)) == 2 and idx.search("zzz") == []
    assert idx.search("gamma")[0].snippet == "Gamma delta."
    with pytest.raises(ValueError, match="duplicate doc_id"):
        SearchIndex.build(docs + [docs[0]])
    with pytest.raises(ValueError, match="field 'text'"):
        SearchIndex.build([{"doc_id": "a", "title": "t", "text": ""}])


def test_tokenizer():
    assert sorted(tokenize("Who founded the Velrin Tools?")) == sorted(tokenize("velrin tools founders"))
    assert "found" in tokenize("founded founder founding")


def test_tool_errors(index):
    assert search.run_search(index, {"query": "  "}).startswith("Error:")
    assert search.run_search(index, {"query": "river", "top_k": 11}).startswith("Error:")
    assert len(json.loads(search.run_search(index, {"query": "river", "top_k": 10}))) == 10
    doc = build_corpus(0)[5]
    assert search.run_open(index, {"doc_id": doc["title"]}) == (
        f"Error: no document with doc_id '{doc['title']}'. Did you mean '{doc['doc_id']}'?")
    assert search.run_open(index, {"doc_id": "nope-1"}).startswith("Error: no document")
    assert search.run_open(index, {"doc_id": doc["doc_id"]}) == f"{doc['title']}\n\n{doc['text']}"
    assert search.run_tool(index, "browse", {}).startswith("Error: unknown tool")
