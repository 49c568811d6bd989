"""Conversational tool use: a customer-service agent for Copperleaf Home & Outdoor.

World (:mod:`.database`): a JSON database built from the seed, with 80
customers, their orders (items, status, dates, shipping address, payment,
refunds) and their in-store service bookings. The system prompt holds a written
policy (authenticate first, confirm every write, order / refund / booking
rules, when to transfer to a human).

Tools (14, JSON-Schema parameters with enums, defaults, integers, numbers,
booleans, arrays and a nested object): ``find_customer_by_email``,
``find_customer_by_name_zip``, ``get_customer_details``, ``list_orders``,
``get_order``, ``cancel_order``, ``update_order_address``, ``return_items``,
``issue_refund``, ``get_booking``, ``check_availability``,
``reschedule_booking``, ``cancel_booking``, ``transfer_to_human``. Every tool
result is computed by executing the tool on a per-episode copy of the
database, so replaying an episode's calls on ``build_world(meta["world_seed"])``
reproduces its tool messages.

Task families (``meta["task"]``): ``order_status`` (sometimes two orders
looked up in one parallel turn), ``cancel_order``, ``update_address``,
``return_items``, ``late_delivery_refund``, ``damaged_item_refund``,
``reschedule_booking``, ``cancel_booking``, ``cancel_shipped_denied``,
``return_expired_transfer``, ``price_match_transfer``,
``auth_failed_transfer``. About 10% of episodes are failures (reward 0.0,
``meta["failure"]`` names the broken rule: no authentication, no confirmation,
wrong order / amount / items / slot / fee, a return past the window...).
``meta["alternatives"]`` lists other correct actions per assistant turn:
arguments in another key order or spacing, defaults spelled out or left out,
``8`` vs ``8.0``, an email in another case, the other authentication tool when
the user gave both, the calls of a parallel turn in the other order, and a
paraphrase for text turns.
"""

from __future__ import annotations

import json
import random
import string
from datetime import date, timedelta
from typing import Any, Callable

from pivot_envs.types import Trajectory

from . import database as world

DOMAIN = "tool_use"

FAILURE_RATE = 0.11
"""Probability that an episode whose family has a failure mode is a failed one."""

POLICY = """# Copperleaf Home & Outdoor - Support Agent Policy

The current time is 2025-03-14 10:00 (Friday). You help customers with their online orders and their in-store service bookings (design consultation, bike tune-up, knife sharpening, garden planning).

## Identity
- Authenticate the customer before reading or changing anything in an account: find_customer_by_email with their email, or find_customer_by_name_zip with their full name and ZIP code. Do this even if they already gave an order or booking id.
- Act only on orders and bookings of the authenticated customer.
- If the customer cannot be authenticated after two tries, transfer them to a human agent.

## Changes
- Before any write (cancel_order, update_order_address, return_items, issue_refund, reschedule_booking, cancel_booking), state exactly what you will do (ids, items, amounts, dates) and wait for an explicit yes.
- Make one write at a time. Independent lookups may be made in the same turn.
- Use only information from the customer and the tools; do not guess ids, prices or dates.

## Orders
- Only "pending" or "processing" orders can be cancelled or get a new shipping address. Cancellation refunds the full total to the original payment method.
- Shipped orders cannot be cancelled; once delivered, their items can be returned.
- Delivered items can be returned within 30 days of the delivery date. The refund is the price of the returned items, to the original payment method, or as store credit if the customer asks.
- Without a return, issue_refund is allowed only for:
  - late_delivery: delivered after the promised date; refund exactly the shipping fee, once per order.
  - damaged_item: an item arrived damaged; refund that item's unit price.
- Price matching, goodwill credits and any other compensation: offer a transfer to a human.
- Refunds to cards and PayPal take 5-7 business days; store credit is available immediately.

## Bookings
- A confirmed booking can be moved to a free slot (check_availability) at the same store, starting at least 24 hours from now. A booking can be rescheduled at most twice; after that, offer to cancel it instead.
- Cancelling more than 24 hours before the start is free. Within 24 hours a $25 late-cancellation fee applies; set waive_fee to true only for gold-tier customers.
- Completed or cancelled bookings cannot be changed.

## Transfers
- Use transfer_to_human when the customer asks for a person, when the request is outside this policy, or when authentication fails; give a one-sentence summary, then tell the customer they are being transferred."""

# --------------------------------------------------------------------------- formatting

_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
YES = ("Yes, please.", "Yes, go ahead.", "Yep, do it.", "Yes, that's right. Please proceed.", "Sounds good, yes.",
       "Yes please!", "Correct, go ahead.", "Sure, yes.")
THANKS = ("That's all, thanks!", "Great, thank you so much.", "Perfect, thanks for your help.", "Awesome, that's everything.",
          "Thanks, bye!")
REASON_TEXT = {
    "no_longer_needed": ("I don't need it anymore.", "turns out I no longer need it."),
    "ordered_by_mistake": ("I ordered it by mistake.", "I clicked buy by accident."),
    "found_better_price": ("I found it cheaper somewhere else.", "I found a better price elsewhere."),
    "shipping_too_slow": ("the delivery estimate is too slow for me.", "it won't arrive in time."),
}
REASON_LABEL = {"no_longer_needed": "no longer needed", "ordered_by_mistake": "ordered by mistake",
                "found_better_price": "found a better price", "shipping_too_slow": "shipping too slow"}


def _money(x: float) -> str:
    return f"${x:,.2f}"


def _day(iso: str) -> str:
    d = date.fromisoformat(iso)
    return f"{_DAYS[d.weekday()]}, {_MONTHS[d.month - 1]} {d.day}"


def _short(iso: str) -> str:
    d = date.fromisoformat(iso)
    return f"{_MONTHS[d.month - 1]} {d.day}"


def _addr(a: dict[str, str]) -> str:
    line2 = f", {a['line2']}" if a.get("line2") else ""
    return f"{a['line1']}{line2}, {a['city']}, {a['state']} {a['zip']}"


def _item(i: dict[str, Any]) -> str:
    if i["qty"] > 1:
        return f"{i['qty']} x {i['name']} ({_money(i['unit_price'])} each)"
    return f"{i['name']} ({_money(i['unit_price'])})"


def _items(items: list[dict[str, Any]]) -> str:
    names = [_item(i) for i in items]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _pm(m: dict[str, Any]) -> str:
    if m["type"] == "credit_card":
        return f"your {m['brand'].title() if m['brand'] != 'amex' else 'Amex'} card ending in {m['last4']}"
    return "your PayPal account" if m["type"] == "paypal" else "your gift card"


def _service(key: str) -> str:
    return world.SERVICES[key]["label"]


def _slot(day: str, time: str) -> str:
    return f"{_day(day)} at {time}"


# --------------------------------------------------------------------------- episode builder


class _Episode:
    """Builds one conversation: user turns, expert text and tool-call turns (executed on ``db``), alternatives."""

    def __init__(self, db: dict[str, Any], rng: random.Random) -> None:
        self.db = db
        self.rng = rng
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": POLICY}]
        self.alternatives: dict[str, list[dict[str, Any]]] = {}
        self.failure: str | None = None
        self.customer: dict[str, Any] | None = None
        self.first_name = ""  # the customer's first name once authenticated (used in goodbyes)

    # -- turns
    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def say(self, *variants: str) -> None:
        """An expert text turn: one variant is the expert's, another one its paraphrase alternative."""
        pick = self.rng.randrange(len(variants))
        self.messages.append({"role": "assistant", "content": variants[pick]})
        others = [v for v in variants if v != variants[pick]]
        if others:
            self.alternatives[str(len(self.messages) - 1)] = [{"role": "assistant", "content": self.rng.choice(others)}]

    def call(self, name: str, args: dict[str, Any], *, alts: bool = True,
             synonyms: tuple[tuple[str, dict[str, Any]], ...] = ()) -> Any:
        """An expert tool-call turn with one call; returns the parsed result (None on an ``Error:`` result)."""
        return self.parallel([(name, args)], alts=alts, synonyms=synonyms)[0]

    def parallel(self, calls: list[tuple[str, dict[str, Any]]], *, alts: bool = True,
                 synonyms: tuple[tuple[str, dict[str, Any]], ...] = ()) -> list[Any]:
        """An expert turn with one or more tool calls, each followed by its executed tool result."""
        index = len(self.messages)
        calls = [(name, self._maybe_explicit_default(name, args)) for name, args in calls]
        ids = [self._call_id() for _ in calls]
        self.messages.append(_assistant_calls([(i, n, _dumps(a)) for i, (n, a) in zip(ids, calls)]))
        results = []
        for call_id, (name, args) in zip(ids, calls):
            content = world.execute(self.db, name, args)
            self.messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})
            results.append(None if content.startswith("Error:") else json.loads(content) if content[:1] in "[{" else content)
        if alts:
            options = self._alternatives(ids, calls, synonyms)
            if options:
                self.alternatives[str(index)] = options
        return results

    # -- helpers
    def _call_id(self) -> str:
        return "call_" + "".join(self.rng.choice(string.ascii_letters + string.digits) for _ in range(24))

    def _maybe_explicit_default(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        props = world.tool_spec(name)["parameters"]["properties"]
        omitted = [k for k, p in props.items() if "default" in p and k not in args]
        if omitted and self.rng.random() < 0.12:
            key = self.rng.choice(omitted)
            return {**args, key: props[key]["default"]}
        return args

    def _alternatives(self, ids: list[str], calls: list[tuple[str, dict[str, Any]]],
                      synonyms: tuple[tuple[str, dict[str, Any]], ...]) -> list[dict[str, Any]]:
        expert = [(i, n, _dumps(a)) for i, (n, a) in zip(ids, calls)]
        options: list[list[tuple[str, str, str]]] = []
        if len(calls) > 1:
            options.append(list(reversed(expert)))
        for pos, (name, args) in enumerate(calls):
            variants = _arg_variants(name, args)
            for text in self.rng.sample(variants, min(len(variants), 2 if len(calls) == 1 else 1)):
                options.append(expert[:pos] + [(ids[pos], name, text)] + expert[pos + 1:])
        for name, args in synonyms:
            options.append([(ids[0], name, _dumps(args))])
        return [_assistant_calls(o) for o in options]

    def trajectory(self, seed: int, index: int, task: str) -> Trajectory:
        meta: dict[str, Any] = {"source": f"pivot-envs/{DOMAIN}", "id": f"{DOMAIN}-{seed}-{index}", "task": task,
                                "world_seed": seed}
        if self.customer is not None:
            meta["customer_id"] = self.customer["customer_id"]
        if self.failure:
            meta["failure"] = self.failure
        meta["alternatives"] = self.alternatives
        return Trajectory(messages=self.messages, tools=[json.loads(json.dumps(t)) for t in world.TOOL_SPECS],
                          reward=0.0 if self.failure else 1.0, meta=meta)


def _dumps(args: dict[str, Any], spaced: bool = False) -> str:
    return json.dumps(args, ensure_ascii=False, separators=(", ", ": ") if spaced else (",", ":"))


def _assistant_calls(calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]}


def _arg_variants(name: str, args: dict[str, Any]) -> list[str]:
    """Argument strings that are functionally equal to ``args`` for tool ``name``."""
    props = world.tool_spec(name)["parameters"]["properties"]
    out: list[dict[str, Any]] = []
    if len(args) >= 2:
        out.append(dict(reversed(list(args.items()))))
    omitted = {k: p["default"] for k, p in props.items() if "default" in p and k not in args}
    if omitted:
        out.append({**args, **omitted})
    explicit = [k for k, v in args.items() if "default" in props[k] and v == props[k]["default"]]
    if explicit:
        out.append({k: v for k, v in args.items() if k not in explicit})
    for key, value in args.items():
        if props[key].get("type") == "number" and isinstance(value, float) and value.is_integer():
            out.append({**args, key: int(value)})
        elif props[key].get("type") == "number" and isinstance(value, int):
            out.append({**args, key: float(value)})
        elif key == "email":
            local, _, domain = value.partition("@")
            out.append({**args, key: value.lower() if value != value.lower() else f"{local.capitalize()}@{domain.upper()}"})
        elif key == "address":
            address = dict(value)
            if address.get("line2", None) == "":
                address.pop("line2")
            elif "line2" not in address:
                address = {"line1": address["line1"], "line2": "", **address}
            out.append({**args, key: address})
            out.append({**args, key: dict(reversed(list(value.items())))})
        elif key == "item_ids" and len(value) > 1:
            out.append({**args, key: list(reversed(value))})
        elif key in ("first_name", "last_name"):
            out.append({**args, key: value.lower()})
    texts = [_dumps(a) for a in out] + [_dumps(args, spaced=True)]
    expert = _dumps(args)
    seen: list[str] = []
    for text in texts:
        if text != expert and text not in seen:
            seen.append(text)
    return seen


# --------------------------------------------------------------------------- shared dialogue pieces

ASK_IDENTITY = (
    "I can help with that. First I need to verify your identity: could you give me the email address on your account, "
    "or your full name and ZIP code?",
    "Happy to help! Before I look into your account, please share the email you used with us (or your full name plus "
    "ZIP code) so I can verify who you are.",
    "Sure thing. To get started, what's the email address on your Copperleaf account? Your full name and ZIP code work too.",
)


def _identity_text(ep: _Episode, c: dict[str, Any], mode: str) -> tuple[str, str]:
    """What the user says to identify themselves, and the email as they typed it."""
    email = c["email"]
    if ep.rng.random() < 0.15:
        local, _, domain = email.partition("@")
        email = f"{local.capitalize()}@{domain}"
    first, last, zip_code = c["name"]["first"], c["name"]["last"], c["address"]["zip"]
    texts = {
        "email": (f"My email is {email}.", f"It's {email}", f"Sure, {email}.", f"The account email is {email}."),
        "namezip": (f"I'm {first} {last}, ZIP code {zip_code}.", f"{first} {last}, zip {zip_code}.",
                    f"Name's {first} {last} and my ZIP is {zip_code}."),
        "both": (f"{first} {last}, email {email}, ZIP {zip_code}.", f"I'm {first} {last} ({email}), zip code {zip_code}."),
    }[mode]
    return ep.rng.choice(texts), email


def _expect_error(result: Any) -> None:
    """Generator invariant: the call just made was meant to fail (and did)."""
    if result is not None:
        raise RuntimeError(f"a tool call meant to fail succeeded: {result!r}")


def _typo(email: str, rng: random.Random) -> str:
    local, _, domain = email.partition("@")
    spots = [i for i in range(len(local) - 1) if local[i] != local[i + 1]]
    i = rng.choice(spots)
    return f"{local[:i]}{local[i + 1]}{local[i]}{local[i + 2:]}@{domain}"


def _opening_identity(ep: _Episode, c: dict[str, Any]) -> tuple[str, str | None, str]:
    """Optionally an identity sentence for the opening message: (text, mode, email as typed)."""
    if ep.rng.random() >= 0.3:
        return "", None, c["email"]
    mode = ep.rng.choices(["email", "namezip", "both"], weights=[6, 3, 1])[0]
    _, email = _identity_text(ep, c, mode)
    first, last, zip_code = c["name"]["first"], c["name"]["last"], c["address"]["zip"]
    text = ep.rng.choice({
        "email": (f" My email is {email}.", f" My account email is {email}.", f" (account: {email})"),
        "namezip": (f" I'm {first} {last}, ZIP {zip_code}.", f" This is {first} {last}, zip code {zip_code}."),
        "both": (f" I'm {first} {last}, {email}, ZIP {zip_code}.", f" {first} {last} here ({email}, {zip_code})."),
    }[mode])
    return text, mode, email


def _authenticate(ep: _Episode, c: dict[str, Any], mode: str | None, email: str) -> str:
    """Ask for identity if needed, then authenticate with a tool call; returns the customer id."""
    ep.customer = c
    if mode is None:
        ep.say(*ASK_IDENTITY)
        mode = ep.rng.choices(["email", "namezip", "both"], weights=[6, 3, 1])[0]
        if mode == "email" and ep.rng.random() < 0.08:
            wrong = _typo(c["email"], ep.rng)
            ep.user(ep.rng.choice((f"It's {wrong}", f"My email is {wrong}.")))
            _expect_error(ep.call("find_customer_by_email", {"email": wrong}, alts=False))
            ep.say(f"I couldn't find an account with {wrong}. Could you double-check the spelling, or give me your "
                   f"full name and ZIP code instead?",
                   f"Hmm, no account matches {wrong}. Could you check that address again? Your full name and ZIP code "
                   f"would also work.")
            email = c["email"]
            ep.user(ep.rng.choice((f"Oops, sorry, it's {email}.", f"My bad, typo. It's {email}", f"Sorry! {email}")))
        else:
            text, email = _identity_text(ep, c, mode)
            ep.user(text)
    by_email = ("find_customer_by_email", {"email": email})
    by_name = ("find_customer_by_name_zip", {"first_name": c["name"]["first"], "last_name": c["name"]["last"],
                                             "zip": c["address"]["zip"]})
    if mode == "both":
        first, other = (by_email, by_name) if ep.rng.random() < 0.5 else (by_name, by_email)
        result = ep.call(*first, synonyms=(other,))
    else:
        result = ep.call(*(by_email if mode == "email" else by_name))
    assert result["customer_id"] == c["customer_id"]
    ep.first_name = c["name"]["first"]
    return c["customer_id"]


def _order_ref(ep: _Episode, order_id: str, allow_bare: bool = True) -> tuple[str, bool]:
    """How the user names an order, and whether they left off the ``CL-`` prefix."""
    if allow_bare and ep.rng.random() < 0.1:
        return f"order {order_id[3:]}", True
    return ep.rng.choice((f"order {order_id}", f"order #{order_id}", order_id, f"my order {order_id}")), False


def _get_order(ep: _Episode, order_id: str, bare: bool) -> dict[str, Any]:
    """Look an order up; a user-given bare number sometimes first produces a failed lookup."""
    if bare and ep.rng.random() < 0.5:
        _expect_error(ep.call("get_order", {"order_id": order_id[3:]}, alts=False))
    return ep.call("get_order", {"order_id": order_id})


def _goodbye(ep: _Episode, p: float = 0.5) -> None:
    if ep.rng.random() < p:
        name = f", {ep.first_name}" if ep.first_name else ""
        ep.user(ep.rng.choice(THANKS))
        ep.say(f"You're welcome{name}! Have a great day.", f"Glad I could help{name}. Take care!",
               f"Anytime{name}. Enjoy the rest of your day!")


def _confirm(ep: _Episode, *variants: str, extra: str = "") -> None:
    ep.say(*variants)
    ep.user(ep.rng.choice(YES) + extra)


def _refund_eta(ep: _Episode, method_text: str, store_credit: bool = False) -> None:
    if ep.rng.random() < 0.25:
        ep.user(ep.rng.choice(("When will I see the money?", "How long does the refund take?",
                               "When does the refund arrive?")))
        if store_credit:
            ep.say("Store credit is available on your account right away.",
                   "The store credit is already usable: it shows up immediately.")
        else:
            ep.say(f"Refunds to {method_text} usually take 5-7 business days to appear.",
                   f"It typically takes 5-7 business days for the refund to show up on {method_text}.")


def _customers(ep: _Episode) -> list[dict[str, Any]]:
    return list(ep.db["customers"].values())


def _orders_of(ep: _Episode, c: dict[str, Any]) -> list[dict[str, Any]]:
    return [ep.db["orders"][o] for o in c["orders"]]


def _unique_item(ep: _Episode, c: dict[str, Any], order: dict[str, Any]) -> str | None:
    """A name of an item of ``order`` that no other order of the customer contains."""
    others = {i["name"] for o in _orders_of(ep, c) if o is not order for i in o["items"]}
    names = [i["name"] for i in order["items"] if i["name"] not in others]
    return ep.rng.choice(names) if names else None


def _find_order(ep: _Episode, cid: str, order: dict[str, Any], status: str = "any") -> None:
    """Locate an order the user described by an item: list the customer's orders, then open it."""
    args: dict[str, Any] = {"customer_id": cid}
    if status != "any":
        args["status"] = status
    rows = ep.call("list_orders", args)
    assert any(r["order_id"] == order["order_id"] for r in rows)


def _returnable(o: dict[str, Any]) -> bool:
    """A delivered order with at least one item not returned yet."""
    return o["status"] == "delivered" and any(not i["returned"] for i in o["items"])


def _confirmed_bookings(ep: _Episode) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(c, ep.db["bookings"][b]) for c in _customers(ep) for b in c["bookings"]
            if ep.db["bookings"][b]["status"] == "confirmed"]


def _transfer(ep: _Episode, summaries: tuple[str, str]) -> None:
    """Transfer to a human with one of two equivalent summaries (the other one is the alternative)."""
    pick = ep.rng.randrange(2)
    ep.call("transfer_to_human", {"summary": summaries[pick]},
            synonyms=(("transfer_to_human", {"summary": summaries[1 - pick]}),))


def _fail(ep: _Episode, modes: list[str]) -> str | None:
    if modes and ep.rng.random() < FAILURE_RATE:
        ep.failure = ep.rng.choice(modes)
    return ep.failure


# --------------------------------------------------------------------------- task families


def _order_status(ep: _Episode) -> None:
    rng = ep.rng
    fail = _fail(ep, ["skip_verify"])
    c = rng.choice([c for c in _customers(ep) if len(c["orders"]) >= 2])
    orders = [o for o in _orders_of(ep, c) if o["status"] != "cancelled"]
    kind = "one" if fail else rng.choices(["one", "two", "list"], weights=[2, 6, 2])[0]
    if len(orders) < 2 and kind == "two":
        kind = "one"
    picked = rng.sample(orders, 2) if kind == "two" else [rng.choice(orders or _orders_of(ep, c))]
    ident, mode, email = _opening_identity(ep, c) if not fail else ("", None, c["email"])
    if kind == "list":
        ep.user(rng.choice(("Hi! Can you tell me what's going on with my orders?",
                            "Hello, I'd like an update on my recent orders.",
                            "hey, where are my orders at?")) + ident)
    elif kind == "two":
        a, b = picked[0]["order_id"], picked[1]["order_id"]
        ep.user(rng.choice((f"Hi, could you check on orders {a} and {b}?",
                            f"Can you tell me the status of {a} and {b}, please?",
                            f"I'm waiting on two orders, {a} and {b}. Any news?")) + ident)
    else:
        ref, bare = _order_ref(ep, picked[0]["order_id"], allow_bare=not fail)
        ep.user(rng.choice((f"Where is {ref}?", f"Hi, can you check the status of {ref}?",
                            f"I'm wondering when {ref} will arrive.",
                            f"hello, any update on {ref}?")) + ident)
    if not fail:
        cid = _authenticate(ep, c, mode, email)
    else:
        ep.customer = c
    if kind == "list":
        rows = ep.call("list_orders", {"customer_id": cid})
        lines = "\n".join(f"- {r['order_id']} (placed {_short(r['placed'])}): {r['status']}, {_money(r['total'])}"
                          for r in rows)
        ep.say(f"Here are your orders:\n{lines}\nWould you like details on any of them?",
               f"I found {len(rows)} orders on your account:\n{lines}\nLet me know if you want more detail on one.")
        focus = next((r for r in rows if r["status"] in ("shipped", "processing", "pending")), rows[0])
        ep.user(rng.choice((f"What about {focus['order_id']}? When will it get here?",
                            f"Can you tell me more about {focus['order_id']}?")))
        picked = [ep.call("get_order", {"order_id": focus["order_id"]})]
    elif kind == "two":
        picked = ep.parallel([("get_order", {"order_id": o["order_id"]}) for o in picked])
    else:
        picked = [_get_order(ep, picked[0]["order_id"], bare)]
    ep.say(*_status_texts(picked))
    _goodbye(ep)


def _status_line(o: dict[str, Any]) -> str:
    oid, s = o["order_id"], o["status"]
    if s == "shipped":
        if o["promised"] >= world.NOW.date().isoformat():
            due = f"is due by {_day(o['promised'])}"
        else:
            due = f"was due {_day(o['promised'])}, so it is running late"
        return f"Order {oid} shipped on {_short(o['shipped'])} (tracking number {o['tracking_number']}) and {due}."
    if s == "delivered":
        return f"Order {oid} was delivered on {_day(o['delivered'])}."
    if s == "cancelled":
        return f"Order {oid} was cancelled and refunded ({_money(o['total'])})."
    return f"Order {oid} is {s} and hasn't shipped yet; it's expected by {_day(o['promised'])}."


def _status_texts(orders: list[dict[str, Any]]) -> tuple[str, str]:
    lines = [_status_line(o) for o in orders]
    return ("Here's what I see. " + " ".join(lines) + " Anything else I can help with?",
            "\n".join(f"- {l}" for l in lines) + "\nIs there anything else you need?")


def _cancel_order(ep: _Episode) -> None:
    rng = ep.rng
    cands = [(c, o) for c in _customers(ep) for o in _orders_of(ep, c) if o["status"] in ("pending", "processing")]
    c, order = rng.choice(cands)
    oid = order["order_id"]
    others = [o for o in _orders_of(ep, c) if o["status"] in ("pending", "processing") and o is not order]
    fail = _fail(ep, ["skip_verify", "skip_confirm", "wrong_order"])
    if fail == "wrong_order" and not others:
        fail = ep.failure = "skip_confirm"
    reason = rng.choice(world.CANCEL_REASONS)
    item = _unique_item(ep, c, order)
    give_id = fail == "skip_verify" or item is None or rng.random() < 0.6
    bare = False
    if give_id:
        ref, bare = _order_ref(ep, oid, allow_bare=fail != "skip_verify")
    else:
        ref = rng.choice((f"my order with the {item}", f"the order with the {item} in it"))
    give_reason = fail == "skip_confirm" or rng.random() < 0.5
    why = (" " + rng.choice(REASON_TEXT[reason]).capitalize()) if give_reason else ""
    ident, mode, email = _opening_identity(ep, c) if fail != "skip_verify" else ("", None, c["email"])
    ep.user(rng.choice((f"Hi, I need to cancel {ref}.", f"Hello! Could you cancel {ref} for me?",
                        f"I placed {ref} recently and I'd like to cancel it.",
                        f"hey, can i still cancel {ref}?")) + why + ident)
    if fail == "skip_verify":
        ep.customer = c
    else:
        cid = _authenticate(ep, c, mode, email)
        if not give_id:
            _find_order(ep, cid, order)
    o = _get_order(ep, oid, bare)
    pm = _pm(o["payment_method"])
    if fail not in ("skip_confirm",):
        head = f"Order {oid} ({_items(o['items'])}) is {o['status']}, total {_money(o['total'])}, paid with {pm}."
        if give_reason:
            _confirm(ep, f"{head} I can cancel it with the reason \"{REASON_LABEL[reason]}\"; the full "
                         f"{_money(o['total'])} would be refunded to {pm}. Shall I go ahead?",
                     f"I found it: {head[6:]} To confirm, you'd like me to cancel order {oid} (reason: "
                     f"{REASON_LABEL[reason]}) and refund {_money(o['total'])} to {pm}? Please reply yes to proceed.")
        else:
            _confirm(ep, f"{head} It can still be cancelled, with a full refund to {pm}. Could you confirm you want "
                         f"to cancel it, and tell me the reason: no longer needed, ordered by mistake, found a better "
                         f"price, or shipping too slow?",
                     f"I see order {oid}: {_items(o['items'])}, {_money(o['total'])}, status {o['status']}. "
                     f"Cancelling refunds the whole amount to {pm}. Do you want me to proceed? If so, which reason "
                     f"applies: no longer needed, ordered by mistake, found a better price, or shipping too slow?",
                     extra="" if give_reason else " " + rng.choice(REASON_TEXT[reason]).capitalize())
    target = rng.choice(others)["order_id"] if fail == "wrong_order" else oid
    res = ep.call("cancel_order", {"order_id": target, "reason": reason})
    ep.say(f"Done: order {target} is cancelled and {_money(res['refund']['amount'])} is being refunded to {pm}.",
           f"Order {target} has been cancelled. A refund of {_money(res['refund']['amount'])} is on its way to {pm}.")
    _refund_eta(ep, pm)
    _goodbye(ep)


def _new_address(ep: _Episode, old: dict[str, str]) -> dict[str, str]:
    while True:
        a = world._address(ep.rng)
        if a["zip"] != old["zip"]:
            return a


def _update_address(ep: _Episode) -> None:
    rng = ep.rng
    c, order = rng.choice([(c, o) for c in _customers(ep) for o in _orders_of(ep, c) if o["status"] in ("pending",
                                                                                          "processing")])
    oid = order["order_id"]
    fail = _fail(ep, ["skip_confirm", "wrong_address"])
    new = _new_address(ep, order["shipping_address"])
    ref, bare = _order_ref(ep, oid)
    in_opening = rng.random() < 0.4
    ident, mode, email = _opening_identity(ep, c)
    addr_text = _addr(new)
    ep.user(rng.choice((f"I just moved. Can you update the shipping address on {ref}?",
                        f"I need {ref} shipped to a different address.",
                        f"Can I change where {ref} is being delivered?"))
            + (f" The new address is {addr_text}." if in_opening else "") + ident)
    _authenticate(ep, c, mode, email)
    o = _get_order(ep, oid, bare)
    if not in_opening:
        ep.say(f"Order {oid} is {o['status']}, so the address can still be changed. It's currently going to "
               f"{_addr(o['shipping_address'])}. What's the new address?",
               f"Good news: order {oid} hasn't shipped yet ({o['status']}), so I can update it. Where would you like "
               f"it delivered instead? (Currently: {_addr(o['shipping_address'])}.)")
        ep.user(rng.choice((f"It's {addr_text}.", f"{addr_text}", f"Please send it to {addr_text}.")))
    address = {"line1": new["line1"], **({"line2": new["line2"]} if new["line2"] else {}), "city": new["city"],
               "state": new["state"], "zip": new["zip"]}
    if fail == "wrong_address":
        address["zip"] = c["address"]["zip"] if c["address"]["zip"] != new["zip"] else o["shipping_address"]["zip"]
    if fail != "skip_confirm":
        _confirm(ep, f"To confirm: I'll change the shipping address of order {oid} from "
                     f"{_addr(o['shipping_address'])} to {addr_text}. Shall I proceed?",
                 f"I'm about to update order {oid} so it ships to {addr_text} instead of "
                 f"{_addr(o['shipping_address'])}. Is that correct?")
    res = ep.call("update_order_address", {"order_id": oid, "address": address})
    ep.say(f"All set: order {oid} will now ship to {_addr(res['shipping_address'])}.",
           f"The shipping address for order {oid} is updated to {_addr(res['shipping_address'])}.")
    _goodbye(ep)


def _return_flow_open(ep: _Episode, c: dict[str, Any], order: dict[str, Any], items: list[dict[str, Any]],
                      templates: tuple[str, ...]) -> tuple[dict[str, Any], bool]:
    """Opening about returning ``items``, authentication and the order lookup; returns (order, store credit wanted)."""
    rng = ep.rng
    oid = order["order_id"]
    names = " and the ".join(i["name"] for i in items)
    elsewhere = {i["name"] for o in _orders_of(ep, c) if o is not order for i in o["items"]}
    unique = not any(i["name"] in elsewhere for i in items)
    give_id = not unique or rng.random() < 0.6
    ref, bare = _order_ref(ep, oid) if give_id else ("", False)
    credit = rng.random() < 0.25
    ident, mode, email = _opening_identity(ep, c)
    opening = rng.choice(templates).format(names=names, ref=f" from {ref}" if give_id else "")
    ep.user(opening + (" I'd prefer store credit." if credit else "") + ident)
    cid = _authenticate(ep, c, mode, email)
    if not give_id:
        _find_order(ep, cid, order, status="delivered")
    return _get_order(ep, oid, bare), credit


RETURN_OPENINGS = ("I'd like to return the {names}{ref}.", "Hi, I want to send back the {names} I bought{ref}.",
                   "Can I return the {names}{ref}? It doesn't work for my space.", "hello, how do I return the {names}{ref}?")


def _do_return(ep: _Episode, o: dict[str, Any], items: list[dict[str, Any]], credit: bool, confirm: bool = True) -> None:
    oid = o["order_id"]
    pm = _pm(o["payment_method"])
    amount = round(sum(i["unit_price"] * i["qty"] for i in items), 2)
    dest = "as store credit" if credit else f"to {pm}"
    if confirm:
        _confirm(ep, f"Order {oid} was delivered on {_day(o['delivered'])}, so it's within the 30-day return window. "
                     f"I can return {_items(items)} for a refund of {_money(amount)} {dest}. Shall I proceed?",
                 f"That order arrived on {_short(o['delivered'])}, which is within our 30-day window. Here's the "
                 f"plan: return {_items(items)} from order {oid}, refund {_money(amount)} {dest}. Would you like me "
                 f"to go ahead?")
    args: dict[str, Any] = {"order_id": oid, "item_ids": [i["item_id"] for i in items]}
    if credit:
        args["refund_method"] = "store_credit"
    res = ep.call("return_items", args)
    ep.say(f"The return is set up. {_money(res['refund']['amount'])} will be refunded {dest}. Print your prepaid "
           f"label here: {res['return_label']}",
           f"Done! Your return for order {oid} is registered and {_money(res['refund']['amount'])} is refunded "
           f"{dest}. Here's your return label: {res['return_label']}")
    _refund_eta(ep, pm, store_credit=credit)


def _return_items(ep: _Episode) -> None:
    rng = ep.rng
    cands = [(c, o) for c in _customers(ep) for o in _orders_of(ep, c)
             if _returnable(o) and world.days_since_delivery(o) <= world.RETURN_WINDOW_DAYS]
    c, order = rng.choice(cands)
    open_items = [i for i in order["items"] if not i["returned"]]
    items = rng.sample(open_items, 2 if len(open_items) >= 3 and rng.random() < 0.3 else 1)
    fail = _fail(ep, ["skip_confirm", "wrong_items"] if len(open_items) > len(items) else ["skip_confirm"])
    o, credit = _return_flow_open(ep, c, order, items, RETURN_OPENINGS)
    if fail == "wrong_items":
        pm = _pm(o["payment_method"])
        amount = round(sum(i["unit_price"] * i["qty"] for i in items), 2)
        _confirm(ep, f"I can return {_items(items)} from order {o['order_id']} for a refund of {_money(amount)} "
                     f"{'as store credit' if credit else 'to ' + pm}. Shall I proceed?",
                 f"Return {_items(items)} from order {o['order_id']} and refund {_money(amount)}: is that right?")
        items = open_items
    _do_return(ep, o, items, credit, confirm=fail is None)
    _goodbye(ep)


def _late_delivery_refund(ep: _Episode) -> None:
    rng = ep.rng
    cands = [(c, o) for c in _customers(ep) for o in _orders_of(ep, c)
             if o["status"] == "delivered" and o["delivered"] > o["promised"] and o["shipping_fee"] > 0
             and not any(r["reason"] == "late_delivery" for r in o["refunds"])]
    c, order = rng.choice(cands)
    oid = order["order_id"]
    remaining = round(order["total"] - world.refunded_total(order), 2)
    fail = _fail(ep, ["skip_confirm", "wrong_amount"] if remaining > order["shipping_fee"] else ["skip_confirm"])
    ref, bare = _order_ref(ep, oid)
    ident, mode, email = _opening_identity(ep, c)
    ep.user(rng.choice((f"My {ref} showed up late. It was supposed to arrive by {_short(order['promised'])}.",
                        f"{ref[0].upper() + ref[1:]} arrived days after the promised date. Can I get something back "
                        f"for that?",
                        f"The delivery of {ref} was late and I'd like the shipping refunded.")) + ident)
    _authenticate(ep, c, mode, email)
    o = _get_order(ep, oid, bare)
    pm = _pm(o["payment_method"])
    fee = o["shipping_fee"]
    if fail != "skip_confirm":
        _confirm(ep, f"I'm sorry about the delay. Order {oid} was promised for {_day(o['promised'])} and delivered on "
                     f"{_day(o['delivered'])}, so it was late. I can refund the shipping fee of {_money(fee)} to "
                     f"{pm}. Would you like me to go ahead?",
                 f"You're right: order {oid} was due {_short(o['promised'])} but arrived {_short(o['delivered'])}. "
                 f"Per our policy I can refund your {_money(fee)} shipping fee to {pm}. Shall I proceed?")
    amount = remaining if fail == "wrong_amount" else fee
    res = ep.call("issue_refund", {"order_id": oid, "amount": float(amount), "reason": "late_delivery"})
    ep.say(f"Done: {_money(res['refund']['amount'])} has been refunded to {pm} for the late delivery of order {oid}.",
           f"I've issued a {_money(res['refund']['amount'])} refund to {pm} (refund {res['refund']['refund_id']}).")
    _refund_eta(ep, pm)
    _goodbye(ep)


def _damaged_item_refund(ep: _Episode) -> None:
    rng = ep.rng
    cands = [(c, o, i) for c in _customers(ep) for o in _orders_of(ep, c)
             if o["status"] == "delivered" and world.days_since_delivery(o) <= 30 for i in o["items"] if not i["returned"]]
    c, order, item = rng.choice(cands)
    oid = order["order_id"]
    remaining = round(order["total"] - world.refunded_total(order), 2)
    fail = _fail(ep, ["skip_confirm", "wrong_amount"] if remaining > item["unit_price"] else ["skip_confirm"])
    ref, bare = _order_ref(ep, oid)
    damage = rng.choice(("arrived damaged", "came broken", "was cracked when I opened the box", "showed up dented"))
    ident, mode, email = _opening_identity(ep, c)
    ep.user(rng.choice((f"The {item['name']} from {ref} {damage}.", f"Hi, my {item['name']} {damage}. It's from {ref}.",
                        f"Ugh, the {item['name']} in {ref} {damage}. What can you do?")) + ident)
    _authenticate(ep, c, mode, email)
    o = _get_order(ep, oid, bare)
    pm = _pm(o["payment_method"])
    price = item["unit_price"]
    if fail != "skip_confirm":
        _confirm(ep, f"I'm sorry it {damage}. I can refund the {item['name']} ({_money(price)}) to {pm}, and you "
                     f"don't need to send it back. Shall I go ahead?",
                 f"Sorry to hear that! For a damaged item I can refund its price, {_money(price)} for the "
                 f"{item['name']}, to {pm} without a return. Would you like me to do that?")
    amount = remaining if fail == "wrong_amount" else price
    res = ep.call("issue_refund", {"order_id": oid, "amount": float(amount), "reason": "damaged_item",
                  "item_id": item["item_id"]})
    ep.say(f"I've refunded {_money(res['refund']['amount'])} to {pm} for the damaged {item['name']}.",
           f"Done: refund {res['refund']['refund_id']} of {_money(res['refund']['amount'])} is on its way to {pm}.")
    _refund_eta(ep, pm)
    _goodbye(ep)


def _booking_lookup(ep: _Episode, c: dict[str, Any], booking: dict[str, Any], opening: str,
                    fail: str | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Opening naming a booking (by id or by service), authentication, then the booking lookup.

    Returns the booking and the customer's details when they were looked up on the way.
    """
    rng = ep.rng
    bid = booking["booking_id"]
    confirmed = [ep.db["bookings"][b] for b in c["bookings"] if ep.db["bookings"][b]["status"] == "confirmed"]
    wanted = [b for b in confirmed if b["service"] == booking["service"]]
    give_id = fail == "skip_verify" or len(wanted) > 1 or rng.random() < 0.5
    what = f"booking {bid}" if give_id else f"my {_service(booking['service'])} appointment"
    ident, mode, email = _opening_identity(ep, c)
    ep.user(opening.format(what=what, day=_short(booking["date"])) + ident)
    cid = _authenticate(ep, c, mode, email)
    if give_id:
        return ep.call("get_booking", {"booking_id": bid}), None
    details = ep.call("get_customer_details", {"customer_id": cid})
    assert bid in details["bookings"]
    if len(confirmed) > 1:
        results = ep.parallel([("get_booking", {"booking_id": b["booking_id"]}) for b in confirmed])
        return next(r for r in results if r["booking_id"] == bid), details
    return ep.call("get_booking", {"booking_id": bid}), details


def _reschedule_booking(ep: _Episode) -> None:
    rng = ep.rng
    cands = _confirmed_bookings(ep)
    c, booking = rng.choice(cands)
    at_limit = booking["reschedule_count"] >= 2
    fail = _fail(ep, (["over_limit"] if at_limit else ["skip_confirm", "wrong_slot"]))
    bid, store = booking["booking_id"], booking["store_id"]
    b, _ = _booking_lookup(ep, c, booking, rng.choice(("I need to move {what}.", "Can I reschedule {what}?",
                                                    "Something came up and I can't make {what} on {day}. Can we find "
                                                    "another time?")), fail)
    when = f"{_service(b['service'])} at {b['store_name']} on {_slot(b['date'], b['time'])}"
    if at_limit and fail is None:
        fee = "free of charge"
        if world.hours_until(b) < 24:
            fee = f"with the {_money(world.LATE_CANCEL_FEE)} late-cancellation fee"
        ep.say(f"Your {when} has already been rescheduled twice, which is the maximum, so I can't move it again. I "
               f"can cancel it ({fee}) if you like. What would you prefer?",
               f"I'm sorry, booking {bid} ({when}) was already rescheduled two times and can't be moved again. If it "
               f"no longer works, I could cancel it {fee}. Would you like that?")
        ep.user(rng.choice(("No, I'll keep it then.", "Never mind, I'll make it work.", "OK, leave it as it is.")))
        ep.say(f"No problem, your booking stays on {_slot(b['date'], b['time'])}.",
               f"Understood. Booking {bid} remains as scheduled.")
        _goodbye(ep)
        return
    ep.say(f"I found your {when}. What day would work better for you?",
           f"Booking {bid} is your {when}. Which day would you like instead?")
    while True:
        start = (world.NOW.date() + timedelta(days=rng.randint(2, 12))).isoformat()
        free = world.check_availability(ep.db, store, b["service"], start, 3)["slots"]
        sunday = date.fromisoformat(start).weekday() == 6
        if start != b["date"] and not sunday and free[start] and sum(map(len, free.values())) >= 2:
            break
    ep.user(rng.choice((f"Would {_day(start)} work?", f"How about {_short(start)} or the days after?",
                        f"Something around {_day(start)}, please.")))
    args: dict[str, Any] = {"store_id": store, "service": b["service"], "start_date": start}
    slots = ep.call("check_availability", args)["slots"]
    listing = "; ".join(f"{_day(d)}: {', '.join(t) if t else 'none'}" for d, t in slots.items())
    ep.say(f"Here are the open slots at {b['store_name']}: {listing}. Which one would you like?",
           f"These times are free at {b['store_name']}: {listing}. Let me know which works for you.")
    options = [(d, t) for d, ts in slots.items() for t in ts]
    day, time = options[0] if rng.random() < 0.4 else rng.choice(options)
    no_email = rng.random() < 0.12
    ep.user(rng.choice((f"Let's do {time} on {_short(day)}.", f"{_day(day)} at {time}, please.",
                        f"I'll take {_short(day)} at {time}."))
            + (" No need to email me a confirmation." if no_email else ""))
    if fail == "wrong_slot":
        day, time = next(o for o in options if o != (day, time)) if len(options) > 1 else (day, time)
    if fail not in ("skip_confirm", "wrong_slot"):
        _confirm(ep, f"To confirm: I'll move booking {bid} from {_slot(b['date'], b['time'])} to {_slot(day, time)} "
                     f"at {b['store_name']}. OK?",
                 f"Just to be sure: reschedule your {_service(b['service'])} ({bid}) to {_slot(day, time)}, same "
                 f"store. Shall I go ahead?")
    args = {"booking_id": bid, "date": day, "time": time}
    if no_email:
        args["send_confirmation"] = False
    res = ep.call("reschedule_booking", args)
    tail = "" if no_email else " A confirmation email is on its way."
    ep.say(f"Done! Your {_service(b['service'])} is now on {_slot(res['date'], res['time'])}.{tail}",
           f"Booking {bid} has been moved to {_slot(res['date'], res['time'])} at {b['store_name']}.{tail}")
    _goodbye(ep)


def _cancel_booking(ep: _Episode) -> None:
    rng = ep.rng
    cands = _confirmed_bookings(ep)
    late = [x for x in cands if world.hours_until(x[1]) < 24]
    c, booking = rng.choice(late if late and rng.random() < 0.4 else cands)
    within = world.hours_until(booking) < 24
    fail = _fail(ep, ["skip_confirm"] + (["waive_fee_wrongly"] if within and c["tier"] != "gold" else []))
    bid = booking["booking_id"]
    b, details = _booking_lookup(ep, c, booking, rng.choice(("Please cancel {what}.",
                                                             "I won't be able to make {what}, can you cancel it?",
                                                    "hi, I need to cancel {what} on {day}.")), fail)
    when = f"{_service(b['service'])} at {b['store_name']} on {_slot(b['date'], b['time'])}"
    waive = False
    if within:
        if details is None:
            details = ep.call("get_customer_details", {"customer_id": c["customer_id"]})
        gold = details["tier"] == "gold"
        waive = gold or fail == "waive_fee_wrongly"
        if gold:
            text = (f"Your {when} starts in less than 24 hours, which normally means a "
                    f"{_money(world.LATE_CANCEL_FEE)} late-cancellation fee, but as a gold member you're exempt. "
                    f"Shall I cancel booking {bid} at no charge?",
                    f"Booking {bid} ({when}) is less than 24 hours away. The usual {_money(world.LATE_CANCEL_FEE)} "
                    f"fee is waived for gold members like you. Do you want me to cancel it?")
        else:
            text = (f"Your {when} starts in less than 24 hours, so cancelling now carries a "
                    f"{_money(world.LATE_CANCEL_FEE)} late-cancellation fee. Do you still want me to cancel booking {bid}?",
                    f"Since booking {bid} ({when}) is within 24 hours, there's a {_money(world.LATE_CANCEL_FEE)} fee "
                    f"to cancel. Would you like to go ahead anyway?")
    else:
        text = (f"I found your {when}. It's more than 24 hours away, so cancelling is free. Shall I cancel booking {bid}?",
                f"Booking {bid} is your {when}. You can cancel it free of charge since it's over 24 hours out. Do you "
                f"want me to go ahead?")
    if fail != "skip_confirm":
        _confirm(ep, *text)
    args: dict[str, Any] = {"booking_id": bid}
    if waive:
        args["waive_fee"] = True
    res = ep.call("cancel_booking", args)
    fee = res["fee_charged"]
    ep.say(f"Booking {bid} is cancelled." + (f" A {_money(fee)} late-cancellation fee was "
                                             f"charged." if fee else " No fee was charged."),
           f"Your {_service(b['service'])} on {_short(b['date'])} has been "
           f"cancelled" + (f", with a {_money(fee)} fee." if fee else " at no cost."))
    _goodbye(ep)


def _cancel_shipped_denied(ep: _Episode) -> None:
    rng = ep.rng
    c, order = rng.choice([(c, o) for c in _customers(ep) for o in _orders_of(ep, c) if o["status"] == "shipped"])
    fail = _fail(ep, ["skip_verify"])
    oid = order["order_id"]
    ref, bare = _order_ref(ep, oid, allow_bare=not fail)
    ident, mode, email = _opening_identity(ep, c) if not fail else ("", None, c["email"])
    ep.user(rng.choice((f"Hi, I need to cancel {ref}.", f"Please cancel {ref}, I don't need it anymore.",
                        f"Can you stop {ref}? I changed my mind.")) + ident)
    if fail:
        ep.customer = c
    else:
        _authenticate(ep, c, mode, email)
    o = _get_order(ep, oid, bare)
    ep.say(f"Order {oid} already shipped on {_day(o['shipped'])} (tracking {o['tracking_number']}), so it can no "
           f"longer be cancelled. Once it's delivered, you can return the items within 30 days for a refund.",
           f"Unfortunately order {oid} has already shipped ({_short(o['shipped'])}, tracking number "
           f"{o['tracking_number']}) and shipped orders can't be cancelled. After it arrives you'll have 30 days to "
           f"return it for a refund.")
    ep.user(rng.choice(("Ah, OK. I'll return it when it arrives then.", "Fine, I'll send it back once it's here.",
                        "Got it, thanks for checking.")))
    ep.say("Sounds good. When it arrives, just contact us and we'll set up the return. Anything else I can help with?",
           "Great. Reach out once it's delivered and we'll take care of the return. Is there anything else?")
    _goodbye(ep, p=0.6)


def _return_expired_transfer(ep: _Episode) -> None:
    rng = ep.rng
    cands = [(c, o) for c in _customers(ep) for o in _orders_of(ep, c)
             if _returnable(o) and world.days_since_delivery(o) > world.RETURN_WINDOW_DAYS]
    c, order = rng.choice(cands)
    items = [rng.choice([i for i in order["items"] if not i["returned"]])]
    fail = _fail(ep, ["expired_return"])
    o, credit = _return_flow_open(ep, c, order, items, RETURN_OPENINGS)
    if fail:
        _do_return(ep, o, items, credit)
        _goodbye(ep)
        return
    days = world.days_since_delivery(o)
    ep.say(f"Order {o['order_id']} was delivered on {_day(o['delivered'])}, {days} days ago. Our return window is 30 "
           f"days from delivery, so I'm not able to process a return for the {items[0]['name']}.",
           f"I'm sorry, the {items[0]['name']} (order {o['order_id']}) was delivered {days} days ago, on "
           f"{_short(o['delivered'])}, which is past our 30-day return window. I can't set up a return for it.")
    ep.user(rng.choice(("That's not acceptable. I want to talk to a manager.", "Can I speak to a real person about this?",
                        "Seriously? Please transfer me to someone who can help.")))
    summaries = (f"Customer wants to return the {items[0]['name']} from order {o['order_id']}, delivered {days} days "
                 f"ago (outside the 30-day window), and asked for a human agent.",
                 f"Return request for order {o['order_id']} ({items[0]['name']}) is past the 30-day window ({days} "
                 f"days); customer requests a person.")
    _transfer(ep, summaries)
    ep.say("I've transferred you to a human agent, who will be with you shortly.",
           "You're being transferred to one of my human colleagues now; they'll pick up from here.")


def _price_match_transfer(ep: _Episode) -> None:
    rng = ep.rng
    cands = [(c, o, i) for c in _customers(ep) for o in _orders_of(ep, c)
             if _returnable(o) and world.days_since_delivery(o) <= world.RETURN_WINDOW_DAYS
             for i in o["items"] if not i["returned"] and i["unit_price"] >= 20]
    c, order, item = rng.choice(cands)
    oid = order["order_id"]
    fail = _fail(ep, ["goodwill_refund"])
    lower = int(item["unit_price"] * rng.choice((0.7, 0.75, 0.8, 0.85))) - 0.01
    ref, bare = _order_ref(ep, oid)
    ident, mode, email = _opening_identity(ep, c)
    ep.user(rng.choice((f"I just saw the {item['name']} from {ref} for {_money(lower)} at another store. Can you "
                        f"refund me the difference?",
                        f"Hi, do you price match? The {item['name']} I got in {ref} is {_money(lower)} elsewhere.")) + ident)
    _authenticate(ep, c, mode, email)
    o = _get_order(ep, oid, bare)
    diff = round(item["unit_price"] - lower, 2)
    if fail:
        pm = _pm(o["payment_method"])
        _confirm(ep, f"I can refund the {_money(diff)} difference on the {item['name']} to {pm}. Shall I go ahead?",
                 f"I'll refund {_money(diff)} (the price difference) to {pm}. OK?")
        res = ep.call("issue_refund", {"order_id": oid, "amount": diff, "reason": "damaged_item", "item_id": item["item_id"]})
        ep.say(f"Done, {_money(res['refund']['amount'])} has been refunded to {pm}.",
               f"I've refunded {_money(res['refund']['amount'])} to {pm}.")
        _goodbye(ep)
        return
    ep.say(f"You paid {_money(item['unit_price'])} for the {item['name']} in order {oid}. I'm not able to make price "
           f"adjustments myself; those are handled by our customer care team. Would you like me to transfer you to a "
           f"human agent?",
           f"I see the {item['name']} at {_money(item['unit_price'])} on order {oid}. Price matching is outside what "
           f"I can do, but a human colleague can review it. Shall I transfer you?")
    ep.user(rng.choice(("Yes, please transfer me.", "Yes please.", "Sure, do that.")))
    summaries = (f"Customer requests a price match on the {item['name']} (order {oid}, paid "
                 f"{_money(item['unit_price'])}, seen for {_money(lower)} elsewhere).",
                 f"Price-match request: {item['name']} from order {oid} bought at {_money(item['unit_price'])}, "
                 f"competitor price {_money(lower)}.")
    _transfer(ep, summaries)
    ep.say("I've passed your request to a human agent; they'll be with you shortly.",
           "Transfer done: a member of our customer care team will take it from here.")


def _auth_failed_transfer(ep: _Episode) -> None:
    rng = ep.rng
    known = {(c["name"]["first"], c["name"]["last"]) for c in _customers(ep)}
    while True:
        first, last = rng.choice(world.FIRST_NAMES), rng.choice(world.LAST_NAMES)
        if (first, last) not in known:
            break
    zip_code = world._address(rng)["zip"]
    email = f"{world._ascii(first)}{rng.randint(100, 999)}@{rng.choice(world.EMAIL_DOMAINS)}"
    ep.user(rng.choice(("Hi, I want to check on my order.", "I need help with a booking I made.",
                        "Hello, I'd like to return something.")))
    ep.say(*ASK_IDENTITY)
    ep.user(rng.choice((f"It's {email}", f"My email is {email}.")))
    _expect_error(ep.call("find_customer_by_email", {"email": email}, alts=False))
    ep.say(f"I couldn't find an account with {email}. Could you give me your full name and ZIP code instead?",
           f"No account matches {email}. Let's try your full name and the ZIP code of your address.")
    ep.user(rng.choice((f"{first} {last}, {zip_code}.", f"I'm {first} {last}, ZIP {zip_code}.")))
    _expect_error(ep.call("find_customer_by_name_zip", {"first_name": first, "last_name": last, "zip": zip_code}))
    summaries = (f"Could not authenticate the customer ({first} {last}, {email}, ZIP {zip_code}) after two attempts.",
                 f"Authentication failed twice for {first} {last} (email {email}, ZIP {zip_code}); needs manual "
                 f"verification.")
    _transfer(ep, summaries)
    ep.say("I wasn't able to verify your account, so I've transferred you to a human agent who can help further.",
           "Since I couldn't find your account after two tries, I've handed you over to a human colleague; they'll be "
           "with you shortly.")


FAMILIES: tuple[tuple[str, float, Callable[[_Episode], None]], ...] = (
    ("order_status", 15, _order_status),
    ("cancel_order", 12, _cancel_order),
    ("update_address", 9, _update_address),
    ("return_items", 11, _return_items),
    ("late_delivery_refund", 7, _late_delivery_refund),
    ("damaged_item_refund", 7, _damaged_item_refund),
    ("reschedule_booking", 12, _reschedule_booking),
    ("cancel_booking", 9, _cancel_booking),
    ("cancel_shipped_denied", 5, _cancel_shipped_denied),
    ("return_expired_transfer", 5, _return_expired_transfer),
    ("price_match_transfer", 4, _price_match_transfer),
    ("auth_failed_transfer", 3, _auth_failed_transfer),
)
"""Task families: (name, sampling weight, dialogue builder)."""


def generate(n: int, seed: int = 0) -> list[Trajectory]:
    """``n`` expert episodes of the Copperleaf support agent, deterministic in ``(n, seed)``.

    Episode ``i`` depends only on ``(seed, i)``, so ``generate(m, s)`` is a prefix of ``generate(n, s)``.
    """
    base = world.build_world(seed)
    names = [f[0] for f in FAMILIES]
    weights = [f[1] for f in FAMILIES]
    builders = {f[0]: f[2] for f in FAMILIES}
    out = []
    for index in range(n):
        rng = random.Random(f"{DOMAIN}-{seed}-{index}")
        task = rng.choices(names, weights=weights)[0]
        ep = _Episode(world.clone(base), rng)
        builders[task](ep)
        out.append(ep.trajectory(seed, index, task))
    return out
