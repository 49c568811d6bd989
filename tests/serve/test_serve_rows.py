"""The fast path of ``pivot-envs serve``'s NeMo Gym faces (:class:`pivot_envs.serve.nemo_gym.RowReader`):
the same decoded rows, pivots, errors and answers as the plain path (``json.loads`` +
``plain_pivot_from_row``), whatever the caches hold, with NeMo Gym's own example rows."""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path

import pytest

from pivot_envs.formats.nemo_gym import plain_pivot_from_row
from pivot_envs.formats.validate import RowError
from pivot_envs.serve import nemo_gym
from pivot_envs.serve.nemo_gym import BodyError, RowReader, decode_with_spans
from pivot_envs.types import stable_hash
from pivot_envs.verifiers.batch import VerifierResolver

DATA = Path(__file__).resolve().parents[1] / "data" / "nemo_gym"
FIELDS = ("reward", "passed", "reason", "error", "verifier", "field")


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def _response(calls: list[dict] | None = None, text: str | None = None, tools: list | None = None) -> dict:
    output: list[dict] = []
    if text is not None:
        output.append({"id": "msg_1", "type": "message", "role": "assistant",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
    for k, c in enumerate(calls or []):
        output.append({"id": f"fc_{k}", "type": "function_call", "call_id": f"call_{k}", "name": c["name"],
                       "arguments": c["arguments"]})
    return {"id": "resp_1", "object": "response", "output": output, "tools": tools if tools is not None else []}


def _calls(expected: dict) -> list[dict]:
    return expected["calls"] if expected["type"] == "function_call_batch" else [expected]


@pytest.fixture(scope="module")
def bodies() -> list[dict]:
    """Verify bodies: NeMo Gym's example rollouts as they are (response.tools included), and the
    parallel examples with an expert response, a changed one and a text reply."""
    out = [{k: row[k] for k in ("responses_create_params", "response", "expected_action")}
           for row in _rows("example_rollouts.jsonl")]
    for row in _rows("parallel_example.jsonl"):
        base = {"responses_create_params": row["responses_create_params"], "expected_action": row["expected_action"]}
        if row["expected_action"]["type"] != "message":
            calls = copy.deepcopy(_calls(row["expected_action"]))
            out.append({**base, "response": _response(calls, tools=row["responses_create_params"].get("tools"))})
            args = json.loads(calls[0]["arguments"] or "{}")
            if args:
                args[next(iter(args))] = "zz-changed"
                calls[0]["arguments"] = json.dumps(args)
            out.append({**base, "response": _response(calls)})
        out.append({**base, "response": _response(text="let me check")})
    assert len(out) > 10 and any(len(json.dumps(b["responses_create_params"].get("tools"))) > 256 for b in out)
    return out


def _texts(items: list) -> list[str]:
    return [json.dumps(items), json.dumps(items, indent=2), json.dumps(items, separators=(",", ":")),
            " \n" + json.dumps(items, ensure_ascii=False) + "\n "]


# ------------------------------------------------------------------ decoding
def test_decode_rows_is_json_loads_with_spans_cold_and_warm(bodies):
    reader = RowReader()
    for text in _texts(bodies):
        for _ in range(2):  # the second pass reads the tools lists from the cache
            items, spans, infos = reader.decode_rows(text)
            assert items == json.loads(text)
            assert spans == decode_with_spans(text)[1]
            assert infos is not None and all(info is not None for info in infos)
    assert len(reader.tools) >= 1
    items, _, infos = reader.decode_rows(json.dumps(bodies))
    cached = [i for i, b in zip(infos, bodies) if len(json.dumps(b["responses_create_params"].get("tools"))) > 256]
    assert cached and all(info.tools is not None and info.input_text is not None for info in cached)
    body, info = reader.decode_body(json.dumps(bodies[0]))
    assert body == bodies[0] and info is not None and info.tools is not None


def test_decode_tricky_texts_fall_back_exactly(bodies):
    """Markers never change what a body decodes to: tools lists elsewhere, duplicate keys, odd keys,
    escaped look-alikes, strings for input, whitespace, non-ASCII; bad JSON is refused as json.loads refuses it."""
    reader = RowReader()
    good = bodies[0]
    tools = good["responses_create_params"]["tools"]
    tools_text = json.dumps(tools)
    params = json.dumps(good["responses_create_params"])
    rest = json.dumps({k: v for k, v in good.items() if k != "responses_create_params"})[1:]
    texts = [
        json.dumps({**good, "metadata": {"tools": tools, "input": [1, 2]}}),  # the same list at an unknown place
        json.dumps({"meta": {"tools": tools}, **good}),  # ... before the real one
        '{"responses_create_params": ' + params[:-1] + ', "tools": [{"type": "function", "name": "x"}]}, ' + rest,  # dup
        '{"responses_create_params": ' + params[:-1] + ', "\\"tools": ' + tools_text + '}, ' + rest,  # key "\"tools"
        json.dumps({**good, "note": 'say "tools": [1] and "input": [2]'}),  # escaped look-alikes in a string
        json.dumps({**good, "responses_create_params": {**good["responses_create_params"], "input": "just text"}}),
        json.dumps(good).replace('"tools": ', '"tools" :\n\t ').replace('"input": ', '"input"\r\n:  '),
        json.dumps({**good, "comment": "héllo ✓ \u2028"}, ensure_ascii=False),
        json.dumps({"responses_create_params": {"input": [], "tools": []}, "tools": tools, "input": [[tools]]}),
    ]
    for text in texts:
        for _ in range(2):
            body, _ = reader.decode_body(text)
            assert body == json.loads(text), text[:200]
            items, spans, _ = reader.decode_rows("[" + text + ", " + text + "]")
            assert items == [json.loads(text)] * 2 and spans == [text, text]
    bad = [json.dumps(good)[:-1], json.dumps(good) + "x", "[" + json.dumps(good) + ",]", "[" + json.dumps(good),
           '{"responses_create_params": {"tools": ' + tools_text + ' x}}', "\x0c" + json.dumps(good),
           '{"responses_create_params": {' + '"tools": ' + tools_text + ': 1}}']
    for text in bad:
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)
        with pytest.raises(json.JSONDecodeError):
            reader.decode_body(text)
        with pytest.raises(json.JSONDecodeError):
            reader.decode_rows("[" + text + "]")


def test_tools_cache_is_bounded_and_never_confuses_lists(bodies):
    reader = RowReader(max_tools=3)
    base = bodies[0]
    variants = []
    for k in range(8):  # the same first kilobytes, a different last tool
        tools = copy.deepcopy(base["responses_create_params"]["tools"])
        tools[-1] = {**tools[-1], "description": f"variant {k}"}
        variants.append({**base, "responses_create_params": {**base["responses_create_params"], "tools": tools}})
    for _ in range(3):
        for body in variants:
            text = json.dumps(body)
            assert reader.decode_body(text)[0] == body
            assert reader.decode_rows(json.dumps([body, variants[0]]))[0] == [body, variants[0]]
            assert len(reader.tools) <= 3
    small = RowReader()
    small.tools.max_total_chars = 2 * len(json.dumps(variants[0]["responses_create_params"]["tools"]))
    for body in variants:
        assert small.decode_body(json.dumps(body))[0] == body
    assert len(small.tools) <= 2


# ------------------------------------------------------------------ pivots
def test_pivots_are_plain_pivot_from_row(bodies):
    reader = RowReader()
    for _ in range(2):
        items, _, infos = reader.decode_rows(json.dumps(bodies))
        for body, info in zip(items, infos):
            for pivot in (reader.pivot(body, "tool_use", info), reader.pivot(copy.deepcopy(body))):
                plain = plain_pivot_from_row({**body, "id": "x"})
                assert (pivot.context, pivot.tools, pivot.expert, pivot.meta, pivot.domain) == \
                    (plain.context, plain.tools, plain.expert, plain.meta, "tool_use")


def test_pivot_ids(bodies):
    reader = RowReader()
    a, b = bodies[0], bodies[1]
    assert reader.pivot(a).id == reader.pivot(copy.deepcopy(a)).id  # same content, same id
    text = json.dumps({**a, "response": {"output": []}})
    ids_from_text = {reader.pivot(*reader.decode_body(t)).id for t in (text, json.dumps(a), text)}
    assert len(ids_from_text) == 1  # from the text: keyed by the input's own text (the response does not count)
    other_input = copy.deepcopy(a)
    other_input["responses_create_params"]["input"][-1]["content"] = "something else"
    other_expected = {**a, "expected_action": {"type": "message", "content": "hi"}}
    other_tools = copy.deepcopy(a)
    other_tools["responses_create_params"]["tools"] = other_tools["responses_create_params"]["tools"][:1]
    ids = {reader.pivot(x).id for x in (a, other_input, other_expected, other_tools, b)}
    assert len(ids) == 5 and all(i.startswith("verify-") for i in ids)
    assert reader.pivot({**a, "id": 7}).id == "7" and reader.pivot({**a, "uuid": "u"}).id == "u"
    assert reader.pivot({**a, "id": None}).id == stable_hash({**a, "id": None})
    assert reader.pivot({**a, "id": ""}).id == ""


def _plain_error(body) -> tuple[str, str]:
    try:
        plain_pivot_from_row({**body, "id": "x"} if isinstance(body, dict) else body)
    except RowError as exc:
        return exc.field, exc.problem + (f" (fix: {exc.fix})" if exc.fix else "")
    raise AssertionError("plain_pivot_from_row accepted it")


def test_bad_rows_name_the_same_field_as_the_plain_reader(bodies):
    reader = RowReader()
    good = bodies[-2]
    params = good["responses_create_params"]
    reader.pivot(good)  # its tools list and expected action are cached now
    tool = params["tools"][0]
    cases = [
        {k: v for k, v in good.items() if k != "responses_create_params"},
        {**good, "responses_create_params": [1]},
        {**good, "responses_create_params": {"tools": params["tools"]}},
        {**good, "responses_create_params": {**params, "input": 5}},
        {**good, "responses_create_params": {**params, "input": [{"role": "robot", "content": "x"}]}},
        {**good, "responses_create_params": {**params, "input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}},
        {**good, "responses_create_params": {**params, "tools": {"a": 1}}},
        {**good, "responses_create_params": {**params, "tools": params["tools"] + [{"type": "function"}]}},
        {**good, "responses_create_params": {**params, "tools": [{**tool, "parameters": "nope"}]}},
        {**good, "responses_create_params": {**params, "tools": [5]}},
        {k: v for k, v in good.items() if k != "expected_action"},
        {**good, "expected_action": {"type": "shout"}},
        {**good, "expected_action": {"type": "function_call", "name": "f", "arguments": "{not json"}},
        {**good, "expected_action": {"type": "function_call", "name": "f", "arguments": 5}},
        {**good, "expected_action": {"type": "function_call_batch", "calls": []}},
        {**good, "expected_action": {"type": "function_call_batch", "calls": [{"name": "f", "arguments": "[1]"}]}},
        {**good, "expected_action": {"type": "message", "content": 5}},
    ]
    for body in cases:
        for _ in range(2):
            with pytest.raises(BodyError) as err:
                reader.pivot(body)
            assert (err.value.field, err.value.problem) == _plain_error(body)
    with pytest.raises(BodyError) as err:
        reader.parse({k: v for k, v in good.items() if k != "response"})
    assert err.value.field == "response"
    with pytest.raises(BodyError) as err:
        reader.parse({**good, "response": {"output": [{"type": "function_call"}]}})
    assert err.value.field == "response.output[0].name"


# ------------------------------------------------------------------ answers
def _check_answers(answers: list[dict], rows: list) -> None:
    for out, row in zip(answers, rows):
        if isinstance(row, dict):
            # the row comes back unchanged, plus the result fields (which replace a row's own of that name)
            assert {k: v for k, v in out.items() if k not in FIELDS} == {k: v for k, v in row.items() if k not in FIELDS}
        assert isinstance(out["reward"], float) and isinstance(out["passed"], bool)


def test_verify_rows_text_is_verify_rows_on_the_decoded_rows(bodies):
    resolver = VerifierResolver("tool_call")
    rows = [*bodies, {"nope": 1}, "text", {**bodies[0], "reward": 0.5, "comment": "é ✓"}, {**bodies[1], "note": "ü"}]
    expected = nemo_gym.verify_rows(copy.deepcopy(rows), resolver, "tool_use", reader=RowReader())
    assert [e["reward"] for e in expected[:len(bodies)]].count(1.0) >= 3
    reader = RowReader()
    for text in [json.dumps(rows), json.dumps(rows, ensure_ascii=False), json.dumps(rows, indent=1)]:
        for data in (text, text.encode()):
            for _ in range(2):
                answers, content = nemo_gym.verify_rows_text(data, resolver, "tool_use", reader=reader)
                assert isinstance(content, bytes)
                decoded = json.loads(content)
                assert decoded == answers == expected
                _check_answers(decoded, rows)
    assert expected[len(bodies)]["field"] == f"[{len(bodies)}].responses_create_params"
    assert expected[len(bodies) + 1]["field"] == f"[{len(bodies) + 1}]"
    wrapped, content = nemo_gym.verify_rows_text(json.dumps({"rows": rows}), resolver, "tool_use", reader=reader)
    assert json.loads(content) == wrapped == expected
    for bad, field in ((b"{not json", "<body>"), (b"\xff[]", "<body>"), (b'{"a": 1}', "<body>"), (b"5", "<body>")):
        with pytest.raises(BodyError) as err:
            nemo_gym.verify_rows_text(bad, resolver, "tool_use", reader=reader)
        assert err.value.field == field


def test_verify_body_text(bodies):
    resolver = VerifierResolver("tool_call")
    reader = RowReader()
    for body in bodies[:6] + [{**bodies[0], "reward": 1}, {**bodies[0], "x": "ö"}]:
        expected = nemo_gym.verify_rows([copy.deepcopy(body)], resolver, "tool_use", reader=RowReader())[0]
        for text in (json.dumps(body), "\n " + json.dumps(body, ensure_ascii=False, indent=2) + " \t"):
            for data in (text, text.encode()):
                out, content = nemo_gym.verify_body_text(data, resolver, "tool_use", reader=reader)
                assert json.loads(content) == out == expected
    for bad, field in ((b"[]", "<body>"), (b"{", "<body>"), (b"\xfe", "<body>"), (b'{"a": 1}', "responses_create_params")):
        with pytest.raises(BodyError) as err:
            nemo_gym.verify_body_text(bad, resolver, "tool_use", reader=reader)
        assert err.value.field == field


def test_threads_share_one_reader(bodies):
    resolver = VerifierResolver("tool_call")
    reader = RowReader(max_tools=2, max_experts=4)  # small caches: entries come and go under the threads
    payloads = [json.dumps(bodies[i:i + 5]).encode() for i in range(0, len(bodies), 5)]
    expected = [nemo_gym.verify_rows_text(p, resolver, "tool_use", reader=RowReader())[1] for p in payloads]
    failures: list[str] = []

    def work(k: int) -> None:
        for n in range(20):
            i = (k + n) % len(payloads)
            if nemo_gym.verify_rows_text(payloads[i], resolver, "tool_use", reader=reader)[1] != expected[i]:
                failures.append(f"thread {k} payload {i}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures
    assert len(reader.tools) <= 2 and len(reader._experts) <= 4
