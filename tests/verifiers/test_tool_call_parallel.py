"""``tool_call``'s parallel-call reward modes (NeMo Gym's ``binary_strict | fractional | f1``), the NeMo Gym
face that honours them, and ``tool_call``'s safe defaults where execution disagrees (issue 20, parts 4 and 6).

The rows below are short rewrites in the shape of NeMo Gym's own parallel example rows
(``resources_servers/single_step_tool_use_with_argument_comparison/data/parallel_example.jsonl``: weather for
three cities, the weather and a stock price, one single call), each with a model response. The rewards
asserted are the ones NeMo Gym's comparator gives them (``common/verification_utils.py``,
``ActionComparator.compare_tool_calls`` at commit 07d6b0d07b22fcf530b4c211dae2ee23100428e4, from PR #2463),
worked out from its formulas and matching its README's table (its arguments are one-word strings, which it
compares exactly, as ``tool_call`` does).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pivot_envs.formats.nemo_gym import pivot_from_row, row_from_pivot, tool_call_params
from pivot_envs.formats.patch import same
from pivot_envs.jsonl import BadRowError
from pivot_envs.serve.nemo_gym import BodyError, verify_body_text, verify_rows, verify_rows_text
from pivot_envs.types import Pivot
from pivot_envs.verifiers.base import build_verifier
from pivot_envs.verifiers.batch import VerifierResolver
from pivot_envs.verifiers.defaults import EXACT_NORMALIZED, default_verifier_spec
from pivot_envs.verifiers.tool_call import maximum_matching, parallel_reward, perfect_matching


def _tool(name: str, arg: str) -> dict[str, Any]:
    return {"type": "function", "name": name, "description": f"{name} for one {arg}.", "strict": True,
            "parameters": {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg],
                           "additionalProperties": False}}


WEATHER, STOCK = _tool("get_weather", "city"), _tool("get_stock_price", "ticker")


def weather(city: str) -> dict[str, Any]:
    return {"type": "function_call", "name": "get_weather", "arguments": json.dumps({"city": city})}


def stock(ticker: str) -> dict[str, Any]:
    return {"type": "function_call", "name": "get_stock_price", "arguments": json.dumps({"ticker": ticker})}


def gym_row(question: str, expected: list[dict], got: list[dict], config: dict | None = None) -> dict[str, Any]:
    """A NeMo Gym verify body: parallel_example.jsonl's shape plus the model's response (and a comparator config)."""
    row: dict[str, Any] = {
        "responses_create_params": {
            "input": [{"role": "system", "content": "One tool call per item, all in the same turn."},
                      {"role": "user", "content": question}],
            "tools": [WEATHER, STOCK], "parallel_tool_calls": True, "temperature": 0.0},
        "expected_action": expected[0] if len(expected) == 1 else {"type": "function_call_batch", "calls": expected},
        "response": {"output": [{**c, "call_id": f"call_{k}", "status": "completed"} for k, c in enumerate(got)]},
    }
    if config is not None:
        row["tool_call_comparator_config"] = config
    return row


CITIES = [weather("Paris"), weather("Tokyo"), weather("Cairo")]
MIXED = [weather("Berlin"), stock("AMD")]

# NeMo Gym's tool_call_comparator_config objects (its server config; here also a row field)
SHIPPED = {"word_count_similarity_threshold": 0.1}  # parallel_tool_call_rewarding off: surplus calls free
STRICT = {"parallel_tool_call_rewarding": True}  # binary_strict, exact call count
FRACTIONAL = {"parallel_tool_call_rewarding": True, "parallel_tool_call_reward_mode": "fractional"}
F1 = {"parallel_tool_call_rewarding": True, "parallel_tool_call_reward_mode": "f1"}
OPEN = {"allow_subset": True, "allow_superset": True}
F1_OPEN = {**F1, **OPEN}  # configs/parallel_tool_calls_...yaml: the one NeMo Gym recommends for RL
FRACTIONAL_OPEN = {**FRACTIONAL, **OPEN}
STRICT_OPEN = {**STRICT, **OPEN}
CONFIGS = {"shipped": SHIPPED, "strict": STRICT, "fractional": FRACTIONAL, "f1": F1, "f1_open": F1_OPEN,
           "fractional_open": FRACTIONAL_OPEN, "strict_open": STRICT_OPEN}

# (name, expected calls, response calls, {config: NeMo Gym's reward})
CASES = [
    ("three cities, shuffled", CITIES, [weather("Cairo"), weather("Paris"), weather("Tokyo")],
     dict.fromkeys(CONFIGS, 1.0)),
    ("three cities, one wrong", CITIES, [weather("Paris"), weather("Kairo"), weather("Tokyo")],
     {"shipped": 0.0, "strict": 0.0, "fractional": 2 / 3, "f1": 2 / 3, "f1_open": 2 / 3, "fractional_open": 2 / 3,
      "strict_open": 0.0}),
    ("three cities, one missing", CITIES, [weather("Tokyo"), weather("Paris")],
     {"shipped": 0.0, "strict": 0.0, "fractional": 0.0, "f1": 0.0, "f1_open": 0.8, "fractional_open": 1.0,
      "strict_open": 1.0}),
    ("three cities and two junk calls", CITIES, [*CITIES, weather("Lima"), stock("NVDA")],
     {"shipped": 1.0, "strict": 0.0, "fractional": 0.0, "f1": 0.0, "f1_open": 0.75, "fractional_open": 1.0,
      "strict_open": 1.0}),
    # README table, "expecting the 2 calls {alpha, beta}": one wrong 0/0.5/0.5; only 1 of 2 1/1/0.667;
    # both + 3 junk 1/1/0.571
    ("weather and stock, wrong ticker", MIXED, [stock("AMDX"), weather("Berlin")],
     {"shipped": 0.0, "strict": 0.0, "fractional": 0.5, "f1": 0.5, "f1_open": 0.5, "fractional_open": 0.5,
      "strict_open": 0.0}),
    ("weather and stock, only the weather", MIXED, [weather("Berlin")],
     {"shipped": 0.0, "strict": 0.0, "fractional": 0.0, "f1": 0.0, "f1_open": 2 / 3, "fractional_open": 1.0,
      "strict_open": 1.0}),
    ("weather and stock plus three junk calls", MIXED, [*MIXED, stock("X"), stock("Y"), weather("Z")],
     {"shipped": 1.0, "strict": 0.0, "fractional": 0.0, "f1": 0.0, "f1_open": 4 / 7, "fractional_open": 1.0,
      "strict_open": 1.0}),
    # a single expected call (NeMo Gym's test_f1_charges_for_surplus_when_rewarding_is_on: 2 * 1 / (1 + 3))
    ("one city plus two junk calls", [weather("Paris")], [weather("Paris"), weather("Rome"), weather("Oslo")],
     {"shipped": 1.0, "strict": 0.0, "fractional": 0.0, "f1": 0.0, "f1_open": 0.5, "fractional_open": 1.0,
      "strict_open": 1.0}),
    ("one city, right", [weather("Paris")], [weather("Paris")], dict.fromkeys(CONFIGS, 1.0)),
]
GRID = [(name, expected, got, config, reward) for name, expected, got, rewards in CASES
        for config, reward in rewards.items()]


def _ids(case: tuple) -> str:
    return f"{case[0]}-{case[3]}"


# ------------------------------------------------------------------ the NeMo Gym face, row by row
@pytest.mark.parametrize("case", GRID, ids=[_ids(c) for c in GRID])
def test_rows_carrying_nemo_gym_config_score_as_nemo_gym(case: tuple) -> None:
    name, expected, got, config, reward = case
    (out,) = verify_rows([gym_row(name, expected, got, CONFIGS[config])], VerifierResolver())
    assert out["error"] is None, out
    assert out["reward"] == pytest.approx(reward), out["reason"]
    assert out["passed"] == (reward == 1.0)
    assert out["tool_call_comparator_config"] == CONFIGS[config]  # the row comes back unchanged


@pytest.mark.parametrize("config", list(CONFIGS))
def test_server_level_tool_call_config_scores_the_same(config: str) -> None:
    """NeMo Gym's place for the mode is its server config: the same rewards from ``serve --config``'s verifier."""
    spec = {"name": "tool_call", **tool_call_params(CONFIGS[config])}
    rows = [gym_row(name, expected, got) for name, expected, got, _ in CASES]
    answers, text = verify_rows_text(json.dumps(rows).encode(), VerifierResolver(spec))
    assert [a["reward"] for a in answers] == pytest.approx([rewards[config] for *_, rewards in CASES])
    assert [a["reward"] for a in json.loads(text)] == [a["reward"] for a in answers]


@pytest.mark.parametrize("server", [
    {"name": "tool_call", "parallel": "f1", "allow_fewer_calls": True},  # the row's config wins
    {"name": "cascade", "stages": [{"role": "accept", "verifier": "strict"}, "tool_call"]},
    {"name": "final_turn", "calls": {"name": "tool_call", "normalizers": ["strip"]}},
])
def test_a_rows_config_applies_to_the_tool_call_inside_the_servers_verifier(server: dict) -> None:
    rows = [gym_row(name, expected, got, FRACTIONAL_OPEN) for name, expected, got, _ in CASES]
    answers = verify_rows(rows, VerifierResolver(server))
    assert [a["error"] for a in answers] == [None] * len(CASES)
    assert [a["reward"] for a in answers] == pytest.approx([rewards["fractional_open"] for *_, rewards in CASES])


def test_rows_without_a_config_keep_the_servers_rule() -> None:
    row = gym_row("three cities, one wrong", CITIES, [weather("Paris"), weather("Kairo"), weather("Tokyo")])
    (out,) = verify_rows([row], VerifierResolver())
    # the domain's final_turn judges the turn whole: the call that matches no expert call is named, with why
    assert out["reward"] == 0.0 and "its call 2 matches no call of the expert's turn" in out["reason"] \
        and '"Kairo" != "Tokyo"' in out["reason"]
    (out,) = verify_rows([gym_row("x", CITIES, [*CITIES, weather("Lima")])], VerifierResolver())
    assert out["reward"] == 0.0 and "it makes 4 calls where the expert's turn made 3" in out["reason"]


def test_verify_body_honours_the_rows_config_and_names_a_bad_one() -> None:
    row = gym_row("weather and stock", MIXED, [weather("Berlin")], F1_OPEN)
    out, _ = verify_body_text(json.dumps(row), VerifierResolver())
    assert out["reward"] == pytest.approx(2 / 3) and not out["passed"]
    bad = {**row, "tool_call_comparator_config": {**F1_OPEN, "parallel_tool_call_reward_mode": "recall"}}
    with pytest.raises(BodyError) as err:
        verify_body_text(json.dumps(bad), VerifierResolver())
    assert err.value.field == "tool_call_comparator_config.parallel_tool_call_reward_mode"
    answers, _ = verify_rows_text(json.dumps([row, bad, row]), VerifierResolver())
    assert [a["error"] is None for a in answers] == [True, False, True]
    assert answers[1]["field"] == "[1].tool_call_comparator_config.parallel_tool_call_reward_mode"
    # the mode is tool_call's: a server scoring rows with another verifier says so
    answers, _ = verify_rows_text(json.dumps([row]), VerifierResolver("tool_name"))
    assert answers[0]["field"] == "[0].tool_call_comparator_config" and "tool_name" in answers[0]["error"]


def test_tool_call_params_maps_nemo_gym_settings() -> None:
    assert tool_call_params({}) == {"parallel": "all", "allow_fewer_calls": False, "allow_more_calls": True}
    assert tool_call_params({**F1, "allow_subset": True}) == {"parallel": "f1", "allow_fewer_calls": True,
                                                              "allow_more_calls": False}
    assert tool_call_params(STRICT)["parallel"] == "all"
    for bad, field in [({"allow_superset": "yes"}, "allow_superset"), ({"allow_supreset": True}, "allow_supreset")]:
        with pytest.raises(BadRowError) as err:
            tool_call_params(bad)
        assert err.value.field == f"tool_call_comparator_config.{field}"


def test_row_conversion_keeps_and_checks_the_config() -> None:
    row = gym_row("weather and stock", MIXED, MIXED, F1_OPEN)
    del row["response"]
    pivot = pivot_from_row(row)
    assert len(pivot.expert["tool_calls"]) == 2
    assert same(row_from_pivot(pivot), row)  # the config travels with the row's other fields
    with pytest.raises(BadRowError) as err:
        pivot_from_row({**row, "tool_call_comparator_config": {"parallel_tool_call_rewarding": 1}})
    assert err.value.field == "tool_call_comparator_config.parallel_tool_call_rewarding"


# ------------------------------------------------------------------ the verifier itself
def _pivot(expected: list[dict]) -> Pivot:
    return pivot_from_row(gym_row("q", expected, []))


def _action(got: list[dict]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{k}", "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for k, c in enumerate(got)]}


def test_reasons_say_which_calls_matched() -> None:
    v = build_verifier({"name": "tool_call", "parallel": "f1", "allow_fewer_calls": True, "allow_more_calls": True})
    r = v.safe_verify(_action([weather("Tokyo"), weather("Kairo"), stock("NVDA"), weather("Paris")]), _pivot(CITIES))
    assert r.reward == pytest.approx(2 * 2 / 7) and not r.passed and r.error is None
    assert r.reason == (
        "f1 0.5714: 2/3 expert calls matched by 4 action calls: expert #1 get_weather = action #4; "
        "expert #2 get_weather = action #1; expert #3 get_weather unmatched (call 'get_weather': argument 'city': "
        "\"Tokyo\" != \"Cairo\"); action #2 get_weather extra; action #3 get_stock_price extra")
    r = v.safe_verify(_action(list(reversed(CITIES))), _pivot(CITIES))
    assert r.passed and r.reward == 1.0 and r.reason.startswith("f1 1: 3/3 expert calls matched by 3 action calls")
    r = build_verifier({"name": "tool_call", "parallel": "fractional"}).safe_verify(_action(CITIES[:2]), _pivot(CITIES))
    assert r.reward == 0.0 and r.reason == ("2 tool call(s), expected 3: expected [get_weather, get_weather, "
                                            "get_weather], got [get_weather, get_weather]")


def test_partial_modes_find_a_maximum_matching() -> None:
    # with a fuzzy threshold the relation is not transitive: a first-fit pairing would match only one call
    spec = {"name": "tool_call", "parallel": "fractional", "fuzzy_arguments": {"city": 75}}
    expert = [weather("abcdef"), weather("abcdxx")]
    assert build_verifier(spec).safe_verify(_action([weather("abcdex"), weather("abcdef")]), _pivot(expert)).passed
    assert maximum_matching([[0, 1], [0]], 2) == [1, 0]
    assert maximum_matching([[], []], 2) == [-1, -1]
    assert sorted(maximum_matching([[0], [0]], 1)) == [-1, 0]
    assert perfect_matching([[0], [0]], 1) is None


def test_parallel_reward_formulas() -> None:
    assert parallel_reward("all", 2, 2, 3) == 1.0 and parallel_reward("all", 1, 2, 2) == 0.0
    assert parallel_reward("all", 1, 2, 1, allow_fewer=True) == 1.0
    assert parallel_reward("fractional", 2, 3, 3) == pytest.approx(2 / 3)
    assert parallel_reward("fractional", 2, 3, 2, allow_fewer=True) == 1.0
    assert parallel_reward("f1", 2, 2, 22) == pytest.approx(1 / 6)  # NeMo Gym's twenty junk calls


def test_text_turns_and_content_are_unchanged_by_the_mode() -> None:
    spec = {"name": "tool_call", "parallel": "f1", "allow_more_calls": True, "content": "fuzzy"}
    v = build_verifier(spec)
    p = _pivot(MIXED)
    p.expert["content"] = "Checking both."
    ok = _action(MIXED) | {"content": "checking both"}
    assert v.safe_verify(ok, p).passed
    r = v.safe_verify(_action(MIXED) | {"content": "Deleting your account."}, p)
    assert not r.passed and r.reason.startswith("tool calls equivalent; content:")
    assert not v.safe_verify("Let me check.", p).passed
    with pytest.raises(ValueError, match="parallel must be one of all, fractional, f1"):
        build_verifier({"name": "tool_call", "parallel": "binary_strict"})


# ------------------------------------------------------------------ defaults where execution disagrees (part 6)
def _lookup_pivot(expert_args: dict[str, Any]) -> Pivot:
    tools = [{"type": "function", "function": {"name": "tail", "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "lines": {"type": "integer"}, "email": {"type": "string"}}}}}]
    expert = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "tail", "arguments": json.dumps(expert_args)}}]}
    return Pivot(id="p", domain="tool_use", context=[{"role": "user", "content": "hi"}], expert=expert, tools=tools)


def _tail(**args: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "tail", "arguments": json.dumps(args)}}]}


def test_padded_ids_are_not_the_id_by_default() -> None:
    p = _lookup_pivot({"path": "ABC123"})
    r = build_verifier("tool_call").safe_verify(_tail(path=" ABC123 "), p)
    assert not r.passed and r.reason == "call 'tail': argument 'path': \" ABC123 \" != \"ABC123\""
    assert build_verifier({"name": "tool_call", "normalizers": ["strip"]}).safe_verify(_tail(path=" ABC123 "), p).passed


def test_floats_are_not_integers_by_default() -> None:
    p = _lookup_pivot({"path": "log", "lines": 1})
    r = build_verifier("tool_call").safe_verify(_tail(path="log", lines=1.0), p)
    assert not r.passed and r.reason == ("call 'tail': argument 'lines': 1.0 is not an integer "
                                         "(the schema declares integer)")
    assert not build_verifier("tool_call").safe_verify(_tail(path="log", lines="1.0"), p).passed
    lenient = build_verifier({"name": "tool_call", "coerce": "lenient"})
    assert lenient.safe_verify(_tail(path="log", lines=1.0), p).passed
    assert lenient.safe_verify(_tail(path="log", lines="1.0"), p).passed
    strict = build_verifier({"name": "tool_call", "coerce": "strict"})
    assert strict.safe_verify(_tail(path="log", lines="1"), p).passed  # integer text, when opted in
    assert not strict.safe_verify(_tail(path="log", lines=1.0), p).passed  # a float still is no integer
    # the expert's own float form is as before
    assert build_verifier("tool_call").safe_verify(_tail(path="log", lines=1.0), _lookup_pivot(
        {"path": "log", "lines": 1.0})).passed
    off = build_verifier({"name": "tool_call", "coerce": "off"})
    assert not off.safe_verify(_tail(path="log", lines=1.0), p).passed  # "off" (the default) converts nothing
    assert off.config()["coerce"] == build_verifier("tool_call").config()["coerce"] == "off"
    with pytest.raises(ValueError, match="coerce must be one of strict, lenient, off"):
        build_verifier({"name": "tool_call", "coerce": "loose"})


def test_integer_text_is_no_integer_by_default() -> None:
    # tau2 airline: update_reservation_baggages(total_baggages="1") stores the text "1" and charges 50 * "1"
    p = _lookup_pivot({"path": "log", "lines": 1})
    r = build_verifier("tool_call").safe_verify(_tail(path="log", lines="1"), p)
    assert not r.passed and r.reason == "call 'tail': argument 'lines': \"1\" != 1"


def test_numbers_and_json_text_are_not_strings_or_arrays_by_default() -> None:
    # tau2 retail: find_user_id_by_name_zip(zip=19122) finds no user where zip="19122" finds one;
    # an array of item ids sent as its JSON text is iterated character by character.
    p = _lookup_pivot({"path": "19122"})
    r = build_verifier("tool_call").safe_verify(_tail(path=19122), p)
    assert not r.passed and r.reason == "call 'tail': argument 'path': 19122 != \"19122\""
    assert build_verifier({"name": "tool_call", "coerce": "strict"}).safe_verify(_tail(path=19122), p).passed
    tools = [{"type": "function", "function": {"name": "ret", "parameters": {"type": "object", "properties": {
        "item_ids": {"type": "array", "items": {"type": "string"}}}}}}]
    expert = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "ret", "arguments": '{"item_ids": ["1", "2"]}'}}]}
    q = Pivot(id="q", domain="tool_use", context=[{"role": "user", "content": "hi"}], expert=expert, tools=tools)
    as_text = {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function", "function": {
        "name": "ret", "arguments": json.dumps({"item_ids": '["1", "2"]'})}}]}
    assert not build_verifier("tool_call").safe_verify(as_text, q).passed
    assert build_verifier({"name": "tool_call", "coerce": "strict"}).safe_verify(as_text, q).passed


def test_padded_names_are_not_the_name_by_default() -> None:
    # a trailing space in a name argument (tau2 retail compares first_name.lower(): "Yusuf " finds no user)
    p = _lookup_pivot({"path": "Yusuf"})
    assert not build_verifier("tool_call").safe_verify(_tail(path="Yusuf "), p).passed
    assert build_verifier({"name": "tool_call", "normalizers": ["strip"]}).safe_verify(_tail(path="Yusuf "), p).passed
    # and in the tool's own name: "tail " is no tool
    padded = _tail(path="Yusuf")
    padded["tool_calls"][0]["function"]["name"] = "tail "
    r = build_verifier("tool_call").safe_verify(padded, p)
    assert not r.passed and "tool calls differ" in r.reason


def test_defaults_fill_nested_objects_without_converting_types() -> None:
    tools = [{"type": "function", "function": {"name": "book", "parameters": {"type": "object", "properties": {
        "leg": {"type": "object", "properties": {"flight": {"type": "string"},
                                                 "cabin": {"type": "string", "default": "economy"}}}}}}}]
    expert = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "book", "arguments": '{"leg": {"flight": "HAT001"}}'}}]}
    q = Pivot(id="q", domain="tool_use", context=[{"role": "user", "content": "hi"}], expert=expert, tools=tools)

    def book(leg: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "book", "arguments": json.dumps({"leg": leg})}}]}

    assert build_verifier("tool_call").safe_verify(book({"flight": "HAT001", "cabin": "economy"}), q).passed
    assert not build_verifier("tool_call").safe_verify(book({"flight": "HAT001", "cabin": "business"}), q).passed


def test_domain_defaults_keep_their_chosen_leniency() -> None:
    tool_use = build_verifier(default_verifier_spec("tool_use"))
    p = _lookup_pivot({"path": "ABC123", "email": "mia@x.com"})
    assert tool_use.safe_verify(_tail(path="ABC123", email=" Mia@X.com "), p).passed  # emails: strip + lower
    assert not tool_use.safe_verify(_tail(path=" ABC123", email="mia@x.com"), p).passed  # other ids: exact
    terminal = build_verifier(EXACT_NORMALIZED)
    assert terminal.safe_verify(_tail(path="  ABC123\n", email="mia@x.com"), p).passed  # commands: whitespace free


def test_defaults_refuse_every_respelling_that_tau2_executes_differently() -> None:
    # pivot_envs.perturb.spelling_variants: each kind is another call to tau2's servers (the benchmark executes
    # them: benchmarks/rewards/world_exec_tau2.py); the defaults refuse all, the old lenient settings took some
    import random

    from pivot_envs.perturb import SPELLING_VARIANT_KINDS, spelling_variants

    props = {"order_id": {"type": "string"}, "reason": {"type": "string"}, "zip": {"type": "string"},
             "item_ids": {"type": "array", "items": {"type": "string"}}, "bags": {"type": "integer"}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": props}}}]
    args = {"order_id": "#W2378156", "reason": "no longer needed", "zip": "19122", "item_ids": ["1151293680"],
            "bags": 2}
    expert = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "f", "arguments": json.dumps(args)}}]}
    p = Pivot(id="p", domain="", context=[{"role": "user", "content": "hi"}], expert=expert, tools=tools)
    variants = spelling_variants("f", args, random.Random(0))
    assert [k for k, _, _ in variants] == list(SPELLING_VARIANT_KINDS)
    default = build_verifier("tool_call")
    old = build_verifier({"name": "tool_call", "normalizers": ["strip"], "coerce": "lenient"})
    accepted_before = []
    for kind, name, variant in variants:
        action = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": name, "arguments": json.dumps(variant)}}]}
        assert not default.safe_verify(action, p).passed, kind
        if old.safe_verify(action, p).passed:
            accepted_before.append(kind)
    assert accepted_before == list(SPELLING_VARIANT_KINDS)
