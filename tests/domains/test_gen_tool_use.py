"""The conversational tool-use generator: determinism, format, tools really executed, policy kept."""

from __future__ import annotations

import gzip
import json
import re
from datetime import datetime
from typing import Any

import jsonschema
import pytest

from pivot_envs.envs_data.tool_use import generator as tool_use
from pivot_envs.envs_data.tool_use import database as world
from pivot_envs.types import Trajectory

N = 300


@pytest.fixture(scope="module")
def episodes() -> list[Trajectory]:
    return tool_use.generate(N, seed=0)


def _dump(trajs: list[Trajectory]) -> str:
    return "\n".join(json.dumps(t.to_dict(), ensure_ascii=False) for t in trajs)


def _args(call: dict[str, Any]) -> dict[str, Any]:
    return json.loads(call["function"]["arguments"])


# --------------------------------------------------------------------------- contract


def test_deterministic_and_seed_dependent(episodes: list[Trajectory]) -> None:
    again = tool_use.generate(40, seed=0)
    assert _dump(again) == _dump(episodes[:40])  # same (n, seed) -> same bytes; episode i depends on (seed, i) only
    other = tool_use.generate(40, seed=1)
    assert _dump(other) != _dump(again)
    assert tool_use.DOMAIN == "tool_use"


def test_counts_size_and_mix(episodes: list[Trajectory]) -> None:
    first = episodes[:250]
    assistant_turns = sum(m["role"] == "assistant" for t in first for m in t.messages)
    assert assistant_turns >= 1000
    blob = gzip.compress(_dump(episodes).encode("utf-8"))
    assert len(blob) < 1_000_000
    failed = sum(t.reward == 0.0 for t in episodes) / N
    assert 0.05 <= failed <= 0.16
    parallel = sum(any(len(m.get("tool_calls") or []) > 1 for m in t.messages) for t in episodes) / N
    assert 0.05 <= parallel <= 0.2
    calls = [c for t in episodes for m in t.messages for c in m.get("tool_calls") or []]
    errors = [m for t in episodes for m in t.messages if m["role"] == "tool" and m["content"].startswith("Error:")]
    assert 0.01 <= len(errors) / len(calls) <= 0.08
    assert {t.meta["task"] for t in episodes} == {f[0] for f in tool_use.FAMILIES}
    chat_only = sum(1 for t in episodes for m in t.messages if m["role"] == "assistant" and not m.get("tool_calls"))
    assert chat_only > 0.3 * sum(m["role"] == "assistant" for t in episodes for m in t.messages)


def test_meta_and_roles(episodes: list[Trajectory]) -> None:
    for i, t in enumerate(episodes):
        assert t.meta["source"] == "pivot-envs/tool_use"
        assert t.meta["id"] == f"tool_use-0-{i}"
        assert t.reward in (0.0, 1.0)
        assert (t.reward == 0.0) == bool(t.meta.get("failure"))
        assert t.messages[0] == {"role": "system", "content": tool_use.POLICY}
        assert t.messages[1]["role"] == "user"
        assert t.messages[-1]["role"] == "assistant" and t.messages[-1]["content"]
        assert Trajectory.from_dict(json.loads(json.dumps(t.to_dict()))).to_dict() == t.to_dict()
    assert len(tool_use.POLICY.splitlines()) <= 45
    assert 8 <= len(world.TOOL_SPECS) <= 14


def test_tool_calls_are_declared_valid_and_answered(episodes: list[Trajectory]) -> None:
    for t in episodes:
        specs = {tool["function"]["name"]: tool["function"]["parameters"] for tool in t.tools}
        msgs = t.messages
        for i, m in enumerate(msgs):
            if m["role"] != "assistant" or not m.get("tool_calls"):
                continue
            assert m["content"] is None
            for k, call in enumerate(m["tool_calls"]):
                assert call["type"] == "function" and call["id"].startswith("call_")
                name = call["function"]["name"]
                assert name in specs, name
                jsonschema.validate(_args(call), specs[name], format_checker=jsonschema.FormatChecker())
                answer = msgs[i + 1 + k]
                assert answer["role"] == "tool" and answer["tool_call_id"] == call["id"] and answer["name"] == name
            follower = msgs[i + 1 + len(m["tool_calls"])] if i + 1 + len(m["tool_calls"]) < len(msgs) else None
            assert follower is None or follower["role"] != "tool"
        ids = [c["id"] for m in msgs for c in m.get("tool_calls") or []]
        assert len(ids) == len(set(ids))


def test_tool_errors_are_followed_by_a_recovery(episodes: list[Trajectory]) -> None:
    seen = 0
    for t in episodes:
        for i, m in enumerate(t.messages):
            if m["role"] == "tool" and m["content"].startswith("Error:"):
                seen += 1
                later = [x for x in t.messages[i + 1:] if x["role"] == "assistant" and x.get("tool_calls")]
                assert later, f"{t.id}: an error is the last call"
    assert seen > 0


def test_alternatives_are_well_formed(episodes: list[Trajectory]) -> None:
    kinds = {"reorder": 0, "default": 0, "number": 0, "email_case": 0, "synonym": 0, "parallel_order": 0, "text": 0}
    for t in episodes:
        specs = {tool["function"]["name"]: tool["function"]["parameters"] for tool in t.tools}
        for key, alts in t.meta["alternatives"].items():
            expert = t.messages[int(key)]
            assert expert["role"] == "assistant" and alts
            for alt in alts:
                assert alt["role"] == "assistant" and alt != expert
                if not expert.get("tool_calls"):
                    assert isinstance(alt["content"], str) and alt["content"] and not alt.get("tool_calls")
                    kinds["text"] += 1
                    continue
                calls, ref = alt["tool_calls"], expert["tool_calls"]
                assert sorted(c["id"] for c in calls) == sorted(c["id"] for c in ref)
                for call in calls:
                    schema = specs[call["function"]["name"]]
                    jsonschema.validate(_args(call), schema, format_checker=jsonschema.FormatChecker())
                if len(ref) > 1 and [c["id"] for c in calls] != [c["id"] for c in ref]:
                    kinds["parallel_order"] += 1
                for a, e in zip(sorted(calls, key=lambda c: c["id"]), sorted(ref, key=lambda c: c["id"])):
                    if a == e:
                        continue
                    if a["function"]["name"] != e["function"]["name"]:
                        kinds["synonym"] += 1
                        continue
                    aa, ea = _args(a), _args(e)
                    name = a["function"]["name"]
                    if aa == ea and list(aa) != list(ea):
                        kinds["reorder"] += 1
                    if world.with_defaults(name, aa) == world.with_defaults(name, ea) and aa != ea:
                        kinds["default"] += 1
                    if "amount" in aa and aa["amount"] == ea["amount"] and type(aa["amount"]) is not type(ea["amount"]):
                        kinds["number"] += 1
                    if "email" in aa and aa["email"] != ea["email"] and aa["email"].lower() == ea["email"].lower():
                        kinds["email_case"] += 1
    assert all(v > 0 for v in kinds.values()), kinds


# --------------------------------------------------------------------------- tool results are really executed


def _run_calls(db: dict[str, Any], message: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: world.execute(db, c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]}


def _same(a: str, b: str) -> bool:
    return a == b or (a.startswith("Error:") and b.startswith("Error:"))


def test_replay_reproduces_tool_results_and_alternatives_are_equivalent(episodes: list[Trajectory]) -> None:
    base = world.build_world(0)
    mutating = set(world.WRITE_TOOLS) | {"transfer_to_human"}
    checked = 0
    for t in episodes[:150]:
        db = world.clone(base)
        for i, m in enumerate(t.messages):
            if m["role"] != "assistant" or not m.get("tool_calls"):
                continue
            recorded = {c["id"]: t.messages[i + 1 + k]["content"] for k, c in enumerate(m["tool_calls"])}
            for alt in t.meta["alternatives"].get(str(i), []):
                writes = any(c["function"]["name"] in mutating for c in alt["tool_calls"])
                alt_results = _run_calls(world.clone(db) if writes else db, alt)
                assert all(_same(alt_results[k], recorded[k]) for k in recorded), (t.id, i)
                checked += 1
            results = _run_calls(db, m)
            for k, call in enumerate(m["tool_calls"]):
                assert t.messages[i + 1 + k]["content"] == results[call["id"]], (t.id, i, call)
    assert checked > 300


# --------------------------------------------------------------------------- the policy


_YES = re.compile(r"^(yes|yep|sure|sounds good|correct)\b", re.IGNORECASE)
_ACCOUNT_TOOLS = {"get_customer_details", "list_orders", "get_order", "get_booking", "check_availability",
                  *world.WRITE_TOOLS}


def policy_violations(t: Trajectory, base: dict[str, Any] | None = None) -> list[str]:
    """Rules of the written policy that the expert broke in ``t`` (replayed on a fresh copy of its world)."""
    db = world.clone(base if base is not None else world.build_world(t.meta["world_seed"]))
    out: list[str] = []
    authenticated = False
    msgs = t.messages
    for i, m in enumerate(msgs):
        if m["role"] != "assistant" or not m.get("tool_calls"):
            continue
        writes = [c for c in m["tool_calls"] if c["function"]["name"] in world.WRITE_TOOLS]
        if len(writes) > 1:
            out.append("several writes in one turn")
        for call in m["tool_calls"]:
            name, args = call["function"]["name"], _args(call)
            if name in _ACCOUNT_TOOLS and not authenticated:
                out.append(f"{name} before authentication")
            if name in world.WRITE_TOOLS:
                user = msgs[i - 1]
                confirm = msgs[i - 2] if i >= 2 else {}
                said_yes = user["role"] == "user" and _YES.match(user["content"])
                if not said_yes or confirm.get("role") != "assistant" or confirm.get("tool_calls"):
                    out.append(f"{name} without explicit confirmation")
                else:
                    out += _mismatch(db, name, args, confirm["content"])
                out += _rule_breaks(db, name, args)
        results = _run_calls(db, m)
        for call in m["tool_calls"]:
            if call["function"]["name"] in world.AUTH_TOOLS and not results[call["id"]].startswith("Error:"):
                authenticated = True
    return out


def _mismatch(db: dict[str, Any], name: str, args: dict[str, Any], text: str) -> list[str]:
    """The write does something other than what the confirmation message announced."""
    if name == "cancel_order" and args["order_id"] not in text:
        return ["cancelled another order than the one confirmed"]
    address = args.get("address", {})
    written = ", ".join(x for x in (address.get("line1"), address.get("line2"), address.get("city")) if x)
    if name == "update_order_address" and f"{written}, {address['state']} {address['zip']}" not in text:
        return ["wrote another address than the one confirmed"]
    if name == "return_items":
        items = {i["item_id"]: i["name"] for i in db["orders"][args["order_id"]]["items"]}
        if any(items[i] not in text for i in args["item_ids"]):
            return ["returned items that were not confirmed"]
    if name == "issue_refund" and f"${args['amount']:,.2f}" not in text:
        return ["refunded another amount than the one confirmed"]
    if name == "reschedule_booking" and args["time"] not in text:
        return ["booked another slot than the one confirmed"]
    return []


def _rule_breaks(db: dict[str, Any], name: str, args: dict[str, Any]) -> list[str]:
    """Order, refund and booking rules of the policy, checked against the world before the write."""
    if name in ("return_items", "issue_refund"):
        order = db["orders"][args["order_id"]]
        if name == "return_items" and world.days_since_delivery(order) > world.RETURN_WINDOW_DAYS:
            return ["return after the 30-day window"]
        if name == "issue_refund" and args["reason"] == "late_delivery":
            if not order["delivered"] > order["promised"] or args["amount"] != order["shipping_fee"]:
                return ["late-delivery refund other than the shipping fee of a late order"]
        if name == "issue_refund" and args["reason"] == "damaged_item":
            item = next(i for i in order["items"] if i["item_id"] == args["item_id"])
            if args["amount"] != item["unit_price"]:
                return ["damaged-item refund other than the item's unit price"]
    if name == "reschedule_booking":
        booking = db["bookings"][args["booking_id"]]
        start = datetime.fromisoformat(f"{args['date']}T{args['time']}")
        if booking["reschedule_count"] >= 2:
            return ["rescheduled a booking a third time"]
        if (start - world.NOW).total_seconds() < 24 * 3600:
            return ["new slot less than 24 hours ahead"]
    if name == "cancel_booking" and world.with_defaults(name, args)["waive_fee"]:
        booking = db["bookings"][args["booking_id"]]
        if db["customers"][booking["customer_id"]]["tier"] != "gold":
            return ["waived the late-cancellation fee for a non-gold customer"]
    return []


def test_successful_experts_keep_the_policy_and_failed_ones_break_it(episodes: list[Trajectory]) -> None:
    modes = set()
    base = world.build_world(0)
    for t in episodes:
        broken = policy_violations(t, base)
        if t.reward == 1.0:
            assert broken == [], (t.id, broken)
        else:
            assert broken, (t.id, t.meta["failure"])
            modes.add(t.meta["failure"])
    assert len(modes) >= 5


def test_policy_checker_catches_a_tampered_episode(episodes: list[Trajectory]) -> None:
    t = next(t for t in episodes if t.reward == 1.0 and t.meta["task"] == "late_delivery_refund")
    bad = json.loads(json.dumps(t.to_dict()))
    call = next(c for m in bad["messages"] for c in m.get("tool_calls") or [] if c["function"]["name"] == "issue_refund")
    args = _args(call)
    args["amount"] = args["amount"] + 5
    call["function"]["arguments"] = json.dumps(args)
    assert policy_violations(Trajectory.from_dict(bad))


# --------------------------------------------------------------------------- the world's tools


def test_tools_enforce_hard_rules_and_change_state() -> None:
    db = world.build_world(3)
    customer = next(iter(db["customers"].values()))
    found = json.loads(world.execute(db, "find_customer_by_email", {"email": customer["email"].upper()}))
    assert found["customer_id"] == customer["customer_id"]
    assert world.execute(db, "get_order", {"order_id": "CL-000000"}).startswith("Error: order CL-000000 not found")
    too_few = world.execute(db, "list_orders", {"customer_id": customer["customer_id"], "limit": 0})
    assert too_few.startswith("Error: invalid limit")
    assert world.execute(db, "check_availability", {"store_id": "STR-PDX", "service": "bike_tune_up",
                                                    "start_date": "March 18"}).startswith("Error: invalid start_date")
    open_order = next(o for o in db["orders"].values() if o["status"] == "processing")
    shipped = next(o for o in db["orders"].values() if o["status"] == "shipped")
    assert world.execute(db, "cancel_order", {"order_id": shipped["order_id"], "reason": "no_longer_needed"}).startswith("Error:")
    cancel = {"order_id": open_order["order_id"], "reason": "ordered_by_mistake"}
    result = json.loads(world.execute(db, "cancel_order", cancel))
    assert result["refund"]["amount"] == open_order["total"]
    after = json.loads(world.execute(db, "get_order", {"order_id": open_order["order_id"], "include_items": False}))
    assert after["status"] == "cancelled" and "items" not in after
    assert world.execute(db, "cancel_order", cancel).startswith("Error:")  # already cancelled


def test_world_is_deterministic() -> None:
    assert json.dumps(world.build_world(5)) == json.dumps(world.build_world(5))
    assert json.dumps(world.build_world(5)) != json.dumps(world.build_world(6))
