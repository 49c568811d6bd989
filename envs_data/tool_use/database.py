"""Copperleaf Home & Outdoor: the customer-service world behind the ``tool_use`` generator.

The world is a JSON-serialisable dict built deterministically from a seed by
:func:`build_world`:

- ``customers``: id, name, email, phone, home address, loyalty tier, store
  credit, payment methods, and the ids of their orders and bookings;
- ``orders``: items (each with its own ``item_id``), status (``pending``,
  ``processing``, ``shipped``, ``delivered``, ``cancelled``), placed / promised /
  shipped / delivered dates, shipping fee, totals, shipping address, payment
  method, refunds;
- ``bookings``: in-store service appointments (store, service, date, time,
  price, status, how many times they were rescheduled);
- ``stores`` and ``services``: static reference data.

The 14 tools (:data:`TOOL_SPECS`, OpenAI function specs with JSON-Schema
parameters) are executed with :func:`execute` against a per-episode copy of the
world: arguments are validated against the schema, schema defaults are filled
in, and the result is a JSON string, or a string starting with ``Error:``.
Replaying the tool calls of a generated episode on a fresh ``build_world(seed)``
reproduces its tool results exactly.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from datetime import date, datetime, timedelta
from typing import Any, Callable

import jsonschema

NOW = datetime(2025, 3, 14, 10, 0)
"""The fixed "current time" of the world (a Friday)."""

SLOTS = ("09:00", "10:30", "12:00", "13:30", "15:00", "16:30")
"""Appointment start times offered by every store (closed on Sundays)."""

LATE_CANCEL_FEE = 25.0
"""Fee for cancelling a booking less than 24 hours before it starts."""

RETURN_WINDOW_DAYS = 30
"""Delivered items may be returned within this many days of delivery."""

STORES: dict[str, dict[str, str]] = {
    "STR-PDX": {"name": "Portland Pearl District", "city": "Portland", "state": "OR"},
    "STR-DEN": {"name": "Denver Highlands", "city": "Denver", "state": "CO"},
    "STR-AUS": {"name": "Austin South Congress", "city": "Austin", "state": "TX"},
    "STR-BOS": {"name": "Boston Back Bay", "city": "Boston", "state": "MA"},
    "STR-CHI": {"name": "Chicago Wicker Park", "city": "Chicago", "state": "IL"},
}

SERVICES: dict[str, dict[str, Any]] = {
    "design_consultation": {"label": "design consultation", "minutes": 60, "price": 0.0},
    "bike_tune_up": {"label": "bike tune-up", "minutes": 90, "price": 49.0},
    "knife_sharpening": {"label": "knife sharpening", "minutes": 30, "price": 15.0},
    "garden_planning": {"label": "garden planning session", "minutes": 60, "price": 35.0},
}

CANCEL_REASONS = ("no_longer_needed", "ordered_by_mistake", "found_better_price", "shipping_too_slow")
ORDER_STATUSES = ("pending", "processing", "shipped", "delivered", "cancelled")

CATALOG: tuple[tuple[str, float], ...] = (
    ("Linen Throw Pillow", 24.99), ("Walnut Desk Lamp", 89.0), ("Cast Iron Skillet 12in", 39.95),
    ("Ceramic Planter Set", 45.5), ("Cedar Raised Garden Bed", 129.0), ("Stainless Steel Trowel", 14.99),
    ("Wool Area Rug 5x8", 249.0), ("Bamboo Bath Towel Set", 59.99), ("Solar Path Lights (6-pack)", 34.99),
    ("Enamel Dutch Oven 5qt", 119.0), ("Chef's Knife 8in", 74.5), ("Bike Helmet", 64.0),
    ("Folding Camp Chair", 42.0), ("Hammock with Stand", 159.0), ("Pour-Over Coffee Kettle", 49.95),
    ("Glass Storage Jars (set of 4)", 28.0), ("Acacia Cutting Board", 32.5), ("Blackout Curtains 84in", 54.99),
    ("Memory Foam Pillow", 44.0), ("Herb Seed Starter Kit", 19.99), ("Rattan Laundry Basket", 38.0),
    ("Copper Watering Can", 36.0), ("LED Camping Lantern", 27.99), ("Pruning Shears", 22.5),
    ("Outdoor String Lights 48ft", 46.99), ("Waffle Knit Throw Blanket", 68.0),
    ("Stoneware Dinner Plates (set of 4)", 52.0), ("U-Lock Bike Lock", 39.0), ("Compost Bin 80gal", 89.99),
    ("Hose Reel Cart", 74.0), ("Teak Serving Tray", 41.0), ("Cotton Percale Sheet Set", 98.0),
)
COLORS = ("Sage", "Charcoal", "Oat", "Terracotta", "Navy", "Ivory", "Moss", "Slate")

FIRST_NAMES = (
    "Maya", "Daniel", "Priya", "Tomás", "Aisha", "Kenji", "Olivia", "Mateo", "Fatima", "Liam", "Sofia", "Noah",
    "Amara", "Ethan", "Yuki", "Lucas", "Zara", "Omar", "Chloe", "Ravi", "Elena", "Jamal", "Hana", "Diego",
    "Grace", "Arjun", "Leila", "Samuel", "Mei", "Isaac", "Nadia", "Felix", "Ines", "Kwame", "Rosa", "Viktor",
    "Ayesha", "Marcus", "Sakura", "Hugo",
)
LAST_NAMES = (
    "Chen", "Okafor", "Patel", "García", "Nguyen", "Kowalski", "Haddad", "Johansson", "Silva", "Kim", "Brennan",
    "Moreau", "Adeyemi", "Rossi", "Tanaka", "Schmidt", "Lopez", "Ibrahim", "Walsh", "Novak", "Mensah", "Park",
    "Costa", "Fischer", "Ahmed", "Lindqvist", "Reyes", "Yamamoto", "Osei", "Bianchi", "Murphy", "Sato",
    "Dubois", "Khan", "Torres", "Petrov",
)
CITIES = (
    ("Portland", "OR", "972"), ("Denver", "CO", "802"), ("Austin", "TX", "787"), ("Boston", "MA", "021"),
    ("Seattle", "WA", "981"), ("Chicago", "IL", "606"), ("Atlanta", "GA", "303"), ("Minneapolis", "MN", "554"),
    ("Phoenix", "AZ", "850"), ("Raleigh", "NC", "276"), ("Madison", "WI", "537"), ("Columbus", "OH", "432"),
    ("Salt Lake City", "UT", "841"), ("San Diego", "CA", "921"), ("Pittsburgh", "PA", "152"),
    ("Nashville", "TN", "372"), ("Albuquerque", "NM", "871"), ("Richmond", "VA", "232"), ("Boise", "ID", "837"),
)
STREETS = (
    "Oak Street", "Maple Avenue", "Alder Lane", "Birch Road", "Cedar Court", "Willow Way", "Juniper Drive",
    "Lakeview Terrace", "Hawthorne Boulevard", "Mill Street", "Orchard Lane", "Sunset Avenue", "Park Place",
    "Riverside Drive", "Elm Street", "Harbor View Road",
)
EMAIL_DOMAINS = ("example.com", "mail.example.org", "inbox.example.net")


# --------------------------------------------------------------------------- world


def _address(rng: random.Random) -> dict[str, str]:
    city, state, prefix = rng.choice(CITIES)
    line2 = rng.choice(["", "", "", f"Apt {rng.randint(1, 40)}", f"Unit {rng.randint(100, 999)}",
                        f"Suite {rng.randint(2, 30)}"])
    return {
        "line1": f"{rng.randint(10, 9899)} {rng.choice(STREETS)}",
        "line2": line2,
        "city": city,
        "state": state,
        "zip": f"{prefix}{rng.randint(1, 99):02d}",
    }


def _ascii(text: str) -> str:
    return text.translate(str.maketrans("áéíóúñç", "aeiounc")).lower().replace(" ", "")


def _unique_ids(rng: random.Random, prefix: str, low: int, high: int, count: int) -> list[str]:
    return [f"{prefix}{n}" for n in rng.sample(range(low, high), count)]


def _money(x: float) -> float:
    return round(x + 1e-9, 2)


def _iso(d: date) -> str:
    return d.isoformat()


def build_world(seed: int = 0, n_customers: int = 80) -> dict[str, Any]:
    """Build the whole database from ``seed`` (same seed, same world, on any machine)."""
    rng = random.Random(f"copperleaf-world-{seed}")
    today = NOW.date()
    customers: dict[str, Any] = {}
    orders: dict[str, Any] = {}
    bookings: dict[str, Any] = {}
    cust_ids = _unique_ids(rng, "CUS-", 10000, 99999, n_customers)
    order_ids = iter(_unique_ids(rng, "CL-", 100000, 999999, n_customers * 6))
    item_ids = iter(_unique_ids(rng, "IT-", 10000, 99999, n_customers * 6 * 4))
    booking_ids = iter(_unique_ids(rng, "BK-", 10000, 99999, n_customers * 3))
    taken_slots: set[tuple[str, str, str]] = set()
    used_names: set[tuple[str, str]] = set()
    for cid in cust_ids:
        while True:
            first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
            if (first, last) not in used_names:
                used_names.add((first, last))
                break
        style = rng.randrange(3)
        a, b = _ascii(first), _ascii(last)
        local = [f"{a}.{b}", f"{a[0]}{b}", f"{a}_{b}"][style]
        email = f"{local}{rng.randint(1, 99)}@{rng.choice(EMAIL_DOMAINS)}"
        home = _address(rng)
        methods = [{"id": f"card_{rng.randint(1000000, 9999999)}", "type": "credit_card",
                    "brand": rng.choice(["visa", "mastercard", "amex"]), "last4": f"{rng.randint(0, 9999):04d}"}]
        if rng.random() < 0.4:
            methods.append({"id": f"paypal_{rng.randint(1000000, 9999999)}", "type": "paypal", "account": email})
        if rng.random() < 0.3:
            methods.append({"id": f"gift_{rng.randint(1000000, 9999999)}", "type": "gift_card",
                            "balance": float(rng.choice([10, 25, 40, 50, 75]))})
        customer = {
            "customer_id": cid,
            "name": {"first": first, "last": last},
            "email": email,
            "phone": f"{rng.randint(201, 989)}-555-{rng.randint(100, 199):04d}",
            "address": home,
            "tier": rng.choices(["basic", "silver", "gold"], weights=[5, 3, 2])[0],
            "store_credit": 0.0,
            "payment_methods": methods,
            "orders": [],
            "bookings": [],
        }
        n_orders = rng.randint(2, 5)
        for _ in range(n_orders):
            oid = next(order_ids)
            status = rng.choices(ORDER_STATUSES, weights=[10, 16, 14, 50, 6])[0]
            orders[oid] = _order(rng, oid, cid, status, today, home, methods, item_ids)
            customer["orders"].append(oid)
        customer["orders"].sort(key=lambda o: (orders[o]["placed"], o), reverse=True)
        for _ in range(rng.choices([0, 1, 2], weights=[3, 5, 2])[0]):
            bid = next(booking_ids)
            bookings[bid] = _booking(rng, bid, cid, today, taken_slots)
            customer["bookings"].append(bid)
        customers[cid] = customer
    return {
        "now": NOW.isoformat(timespec="minutes"),
        "availability_salt": f"{seed}",
        "stores": copy.deepcopy(STORES),
        "services": copy.deepcopy(SERVICES),
        "customers": customers,
        "orders": orders,
        "bookings": bookings,
        "transfers": [],
    }


def _order(rng: random.Random, oid: str, cid: str, status: str, today: date, home: dict[str, str],
           methods: list[dict[str, Any]], item_ids: Any) -> dict[str, Any]:
    age = {"pending": (0, 1), "processing": (1, 3), "shipped": (3, 8), "delivered": (5, 58), "cancelled": (4, 40)}[status]
    placed = today - timedelta(days=rng.randint(*age))
    promised = placed + timedelta(days=rng.randint(5, 8))
    items = []
    for name, price in rng.sample(CATALOG, rng.choices([1, 2, 3, 4], weights=[3, 4, 3, 1])[0]):
        if name in ("Linen Throw Pillow", "Waffle Knit Throw Blanket", "Ceramic Planter Set", "Bike Helmet"):
            name = f"{name} ({rng.choice(COLORS)})"
        qty = rng.choices([1, 2], weights=[5, 1])[0]
        items.append({"item_id": next(item_ids), "name": name, "qty": qty, "unit_price": price, "returned": False})
    subtotal = _money(sum(i["unit_price"] * i["qty"] for i in items))
    fee = 0.0 if subtotal >= 150 else float(rng.choice([6, 8, 12]))
    order: dict[str, Any] = {
        "order_id": oid,
        "customer_id": cid,
        "status": status,
        "placed": _iso(placed),
        "promised": _iso(promised),
        "shipped": None,
        "delivered": None,
        "items": items,
        "subtotal": subtotal,
        "shipping_fee": fee,
        "total": _money(subtotal + fee),
        "shipping_address": dict(home) if rng.random() < 0.85 else _address(rng),
        "payment_method_id": rng.choice([m for m in methods if m["type"] != "gift_card"])["id"],
        "refunds": [],
    }
    if status in ("shipped", "delivered"):
        order["shipped"] = _iso(placed + timedelta(days=rng.randint(1, 2)))
        order["tracking_number"] = f"1Z{rng.randint(10**9, 10**10 - 1)}"
    if status == "delivered":
        late = rng.random() < 0.35
        delivered = promised + timedelta(days=rng.randint(1, 5) if late else rng.randint(-2, 0))
        delivered = max(min(delivered, today), date.fromisoformat(order["shipped"]) + timedelta(days=1))
        order["delivered"] = _iso(min(delivered, today))
        if len(items) > 1 and rng.random() < 0.12:
            items[-1]["returned"] = True
            amount = _money(items[-1]["unit_price"] * items[-1]["qty"])
            order["refunds"].append({"refund_id": f"RF-{oid[3:]}-1", "amount": amount, "reason": "return",
                                     "method": "original_payment"})
    if status == "cancelled":
        order["refunds"].append({"refund_id": f"RF-{oid[3:]}-1", "amount": order["total"], "reason": "cancellation",
                                 "method": "original_payment"})
        order["cancel_reason"] = rng.choice(CANCEL_REASONS)
    return order


def _booking(rng: random.Random, bid: str, cid: str, today: date, taken: set[tuple[str, str, str]]) -> dict[str, Any]:
    status = rng.choices(["confirmed", "completed", "cancelled"], weights=[16, 3, 2])[0]
    store = rng.choice(sorted(STORES))
    service = rng.choice(sorted(SERVICES))
    while True:
        if status == "confirmed":
            if rng.random() < 0.18:  # within the next 24 hours
                tomorrow = today + timedelta(days=1)
                soon = [(today, t) for t in SLOTS if t > "10:00"] + [(tomorrow, t) for t in SLOTS if t < "10:00"]
                day, time = rng.choice(soon)
            else:
                day, time = today + timedelta(days=rng.randint(2, 20)), rng.choice(SLOTS)
        else:
            day, time = today - timedelta(days=rng.randint(1, 30)), rng.choice(SLOTS)
        if day.weekday() != 6 and (store, _iso(day), time) not in taken:
            break
    if status == "confirmed":
        taken.add((store, _iso(day), time))
    return {
        "booking_id": bid,
        "customer_id": cid,
        "store_id": store,
        "service": service,
        "date": _iso(day),
        "time": time,
        "duration_min": SERVICES[service]["minutes"],
        "price": SERVICES[service]["price"],
        "status": status,
        "reschedule_count": rng.choices([0, 1, 2], weights=[6, 3, 2])[0] if status == "confirmed" else 0,
    }


# --------------------------------------------------------------------------- helpers used by tools and generator


def booking_start(booking: dict[str, Any]) -> datetime:
    """The start of a booking as a datetime."""
    return datetime.fromisoformat(f"{booking['date']}T{booking['time']}")


def hours_until(booking: dict[str, Any]) -> float:
    """Hours from :data:`NOW` until the booking starts (negative when in the past)."""
    return (booking_start(booking) - NOW).total_seconds() / 3600


def slot_is_free(db: dict[str, Any], store_id: str, day: str, time: str, ignore: str | None = None) -> bool:
    """Whether ``store_id`` has a free appointment slot at ``day`` ``time`` (future, not Sunday, not booked)."""
    start = datetime.fromisoformat(f"{day}T{time}")
    if start <= NOW or start.weekday() == 6 or time not in SLOTS:
        return False
    digest = hashlib.sha1(f"{db['availability_salt']}|{store_id}|{day}|{time}".encode()).hexdigest()
    if int(digest[:8], 16) % 100 >= 55:
        return False
    for b in db["bookings"].values():
        same_slot = (b["store_id"], b["date"], b["time"]) == (store_id, day, time)
        if same_slot and b["status"] == "confirmed" and b["booking_id"] != ignore:
            return False
    return True


def days_since_delivery(order: dict[str, Any]) -> int | None:
    """Days between the delivery date and :data:`NOW` (None when not delivered)."""
    if not order.get("delivered"):
        return None
    return (NOW.date() - date.fromisoformat(order["delivered"])).days


def refunded_total(order: dict[str, Any]) -> float:
    """Sum of the refunds already made on an order."""
    return _money(sum(r["amount"] for r in order["refunds"]))


# --------------------------------------------------------------------------- tool specs

_ORDER_ID = {"type": "string", "description": "Order id, e.g. 'CL-482913'."}
_BOOKING_ID = {"type": "string", "description": "Booking id, e.g. 'BK-20417'."}
_CUSTOMER_ID = {"type": "string", "description": "Customer id, e.g. 'CUS-31842'."}
_ADDRESS = {
    "type": "object",
    "additionalProperties": False,
    "required": ["line1", "city", "state", "zip"],
    "properties": {
        "line1": {"type": "string"},
        "line2": {"type": "string", "default": ""},
        "city": {"type": "string"},
        "state": {"type": "string", "pattern": "^[A-Z]{2}$", "description": "Two-letter state code."},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
    },
}


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


TOOL_SPECS: tuple[dict[str, Any], ...] = (
    _spec("find_customer_by_email",
          "Authenticate a customer by the email on their account (case-insensitive). Returns the customer id and name.",
          {"email": {"type": "string", "description": "The customer's email address."}}, ["email"]),
    _spec("find_customer_by_name_zip",
          "Authenticate a customer by full name and the ZIP code of their home address. Returns the customer id and name.",
          {"first_name": {"type": "string"}, "last_name": {"type": "string"},
           "zip": {"type": "string", "pattern": "^[0-9]{5}$", "description": "5-digit ZIP code."}},
          ["first_name", "last_name", "zip"]),
    _spec("get_customer_details",
          "Profile of a customer: contact details, address, loyalty tier, store credit, payment methods, order ids and "
          "booking ids.",
          {"customer_id": _CUSTOMER_ID}, ["customer_id"]),
    _spec("list_orders", "Summaries of a customer's orders, newest first.",
          {"customer_id": _CUSTOMER_ID,
           "status": {"type": "string", "enum": ["any", *ORDER_STATUSES], "default": "any",
                      "description": "Only orders with this status."},
           "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 10,
                     "description": "At most this many orders."}},
          ["customer_id"]),
    _spec("get_order", "Full details of one order: status, dates, items, totals, shipping address, payment method, refunds.",
          {"order_id": _ORDER_ID,
           "include_items": {"type": "boolean", "default": True, "description": "Include the item lines."}},
          ["order_id"]),
    _spec("cancel_order", "Cancel a pending or processing order; the full total is refunded to the original payment method.",
          {"order_id": _ORDER_ID, "reason": {"type": "string", "enum": list(CANCEL_REASONS)}}, ["order_id", "reason"]),
    _spec("update_order_address", "Change the shipping address of a pending or processing order.",
          {"order_id": _ORDER_ID,
           "address": _ADDRESS},
          ["order_id", "address"]),
    _spec("return_items",
          "Return delivered items of an order; refunds their price to the original payment method or as store credit.",
          {"order_id": _ORDER_ID,
           "item_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True,
                        "description": "Ids of the item lines to return."},
           "refund_method": {"type": "string", "enum": ["original_payment", "store_credit"], "default": "original_payment"}},
          ["order_id", "item_ids"]),
    _spec("issue_refund", "Refund part of a delivered order without a return (late delivery or a damaged item).",
          {"order_id": _ORDER_ID,
           "amount": {"type": "number", "exclusiveMinimum": 0, "description": "Amount in US dollars."},
           "reason": {"type": "string", "enum": ["late_delivery", "damaged_item"]},
           "item_id": {"type": "string", "description": "The damaged item line (required when reason is damaged_item)."}},
          ["order_id", "amount", "reason"]),
    _spec("get_booking", "Details of one service booking.", {"booking_id": _BOOKING_ID}, ["booking_id"]),
    _spec("check_availability", "Free appointment slots for a service at a store, per day, starting at start_date.",
          {"store_id": {"type": "string", "enum": sorted(STORES)},
           "service": {"type": "string", "enum": sorted(SERVICES)},
           "start_date": {"type": "string", "format": "date", "description": "First day to search, YYYY-MM-DD."},
           "days": {"type": "integer", "minimum": 1, "maximum": 7, "default": 3, "description": "Number of days to search."}},
          ["store_id", "service", "start_date"]),
    _spec("reschedule_booking", "Move a confirmed booking to a free slot at the same store.",
          {"booking_id": _BOOKING_ID,
           "date": {"type": "string", "format": "date", "description": "New day, YYYY-MM-DD."},
           "time": {"type": "string", "enum": list(SLOTS)},
           "send_confirmation": {"type": "boolean", "default": True, "description": "Email the customer a confirmation."}},
          ["booking_id", "date", "time"]),
    _spec("cancel_booking",
          "Cancel a confirmed booking. A late-cancellation fee applies within 24 hours of the start unless waived.",
          {"booking_id": _BOOKING_ID,
           "waive_fee": {"type": "boolean", "default": False,
                         "description": "Waive the late-cancellation fee (gold tier only)."}},
          ["booking_id"]),
    _spec("transfer_to_human", "Hand the conversation over to a human agent.",
          {"summary": {"type": "string", "description": "One-sentence summary of the customer's issue."},
           "priority": {"type": "string", "enum": ["normal", "urgent"], "default": "normal"}},
          ["summary"]),
)

WRITE_TOOLS = ("cancel_order", "update_order_address", "return_items", "issue_refund", "reschedule_booking", "cancel_booking")
"""Tools that change the database (the policy requires an explicit confirmation first)."""

AUTH_TOOLS = ("find_customer_by_email", "find_customer_by_name_zip")
"""Tools that authenticate a customer."""


class ToolError(Exception):
    """A tool refused the call; its message becomes an ``Error: ...`` tool result."""


# --------------------------------------------------------------------------- tool implementations


def _customer(db: dict[str, Any], customer_id: str) -> dict[str, Any]:
    if customer_id not in db["customers"]:
        raise ToolError(f"customer {customer_id} not found")
    return db["customers"][customer_id]


def _order_of(db: dict[str, Any], order_id: str) -> dict[str, Any]:
    if order_id not in db["orders"]:
        hint = f" Order ids look like CL-{order_id}." if order_id.isdigit() else ""
        raise ToolError(f"order {order_id} not found.{hint}")
    return db["orders"][order_id]


def _booking_of(db: dict[str, Any], booking_id: str) -> dict[str, Any]:
    if booking_id not in db["bookings"]:
        raise ToolError(f"booking {booking_id} not found")
    return db["bookings"][booking_id]


def _who(c: dict[str, Any]) -> dict[str, str]:
    return {"customer_id": c["customer_id"], "name": f"{c['name']['first']} {c['name']['last']}"}


def find_customer_by_email(db: dict[str, Any], email: str) -> Any:
    key = email.strip().lower()
    for c in db["customers"].values():
        if c["email"].lower() == key:
            return _who(c)
    raise ToolError(f"no customer found with email {email}")


def find_customer_by_name_zip(db: dict[str, Any], first_name: str, last_name: str, zip: str) -> Any:  # noqa: A002
    for c in db["customers"].values():
        if (c["name"]["first"].lower(), c["name"]["last"].lower(), c["address"]["zip"]) == (
                first_name.strip().lower(), last_name.strip().lower(), zip.strip()):
            return _who(c)
    raise ToolError(f"no customer found with name {first_name} {last_name} and ZIP {zip}")


def get_customer_details(db: dict[str, Any], customer_id: str) -> Any:
    return _customer(db, customer_id)


def list_orders(db: dict[str, Any], customer_id: str, status: str, limit: int) -> Any:
    rows = []
    for oid in _customer(db, customer_id)["orders"]:
        o = db["orders"][oid]
        if status in ("any", o["status"]):
            rows.append({"order_id": oid, "status": o["status"], "placed": o["placed"], "total": o["total"],
                         "items": [i["name"] for i in o["items"]]})
    return rows[:limit]


def get_order(db: dict[str, Any], order_id: str, include_items: bool) -> Any:
    order = dict(_order_of(db, order_id))
    methods = db["customers"][order["customer_id"]]["payment_methods"]
    method_id = order.pop("payment_method_id")
    order["payment_method"] = next(m for m in methods if m["id"] == method_id)
    if not include_items:
        order.pop("items")
    return order


def _open_order(db: dict[str, Any], order_id: str, action: str) -> dict[str, Any]:
    order = _order_of(db, order_id)
    if order["status"] not in ("pending", "processing"):
        raise ToolError(f"cannot {action} order {order_id}: its status is {order['status']}")
    return order


def cancel_order(db: dict[str, Any], order_id: str, reason: str) -> Any:
    order = _open_order(db, order_id, "cancel")
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    refund = {"refund_id": f"RF-{order_id[3:]}-{len(order['refunds']) + 1}", "amount": order["total"],
              "reason": "cancellation", "method": "original_payment"}
    order["refunds"].append(refund)
    return {"order_id": order_id, "status": "cancelled", "reason": reason, "refund": refund}


def update_order_address(db: dict[str, Any], order_id: str, address: dict[str, str]) -> Any:
    order = _open_order(db, order_id, "change the address of")
    order["shipping_address"] = {k: address.get(k, "") for k in ("line1", "line2", "city", "state", "zip")}
    return {"order_id": order_id, "status": order["status"], "shipping_address": order["shipping_address"]}


def return_items(db: dict[str, Any], order_id: str, item_ids: list[str], refund_method: str) -> Any:
    order = _order_of(db, order_id)
    if order["status"] != "delivered":
        raise ToolError(f"cannot return items of order {order_id}: its status is {order['status']}")
    lines = {i["item_id"]: i for i in order["items"]}
    for iid in item_ids:
        if iid not in lines:
            raise ToolError(f"item {iid} is not part of order {order_id}")
        if lines[iid]["returned"]:
            raise ToolError(f"item {iid} was already returned")
    amount = _money(sum(lines[i]["unit_price"] * lines[i]["qty"] for i in item_ids))
    for iid in item_ids:
        lines[iid]["returned"] = True
    refund = {"refund_id": f"RF-{order_id[3:]}-{len(order['refunds']) + 1}", "amount": amount, "reason": "return",
              "method": refund_method}
    order["refunds"].append(refund)
    if refund_method == "store_credit":
        customer = db["customers"][order["customer_id"]]
        customer["store_credit"] = _money(customer["store_credit"] + amount)
    return {"order_id": order_id, "returned_item_ids": sorted(item_ids), "refund": refund,
            "return_label": f"https://returns.copperleaf.example/{order_id}/{len(order['refunds'])}"}


def issue_refund(db: dict[str, Any], order_id: str, amount: float, reason: str, item_id: str | None = None) -> Any:
    order = _order_of(db, order_id)
    if order["status"] != "delivered":
        raise ToolError(f"cannot refund order {order_id}: its status is {order['status']}")
    if reason == "damaged_item":
        if item_id is None:
            raise ToolError("item_id is required when reason is damaged_item")
        if item_id not in {i["item_id"] for i in order["items"]}:
            raise ToolError(f"item {item_id} is not part of order {order_id}")
    remaining = _money(order["total"] - refunded_total(order))
    if amount > remaining + 1e-9:
        raise ToolError(f"amount {amount} exceeds the refundable balance {remaining} of order {order_id}")
    refund = {"refund_id": f"RF-{order_id[3:]}-{len(order['refunds']) + 1}", "amount": _money(amount), "reason": reason,
              "method": "original_payment"}
    if item_id is not None:
        refund["item_id"] = item_id
    order["refunds"].append(refund)
    return {"order_id": order_id, "refund": refund, "total_refunded": refunded_total(order)}


def get_booking(db: dict[str, Any], booking_id: str) -> Any:
    b = dict(_booking_of(db, booking_id))
    b["store_name"] = db["stores"][b["store_id"]]["name"]
    return b


def check_availability(db: dict[str, Any], store_id: str, service: str, start_date: str, days: int) -> Any:
    try:
        first = date.fromisoformat(start_date)
    except ValueError:
        raise ToolError(f"start_date must be YYYY-MM-DD, got {start_date!r}") from None
    slots = {}
    for k in range(days):
        day = _iso(first + timedelta(days=k))
        slots[day] = [t for t in SLOTS if slot_is_free(db, store_id, day, t)]
    return {"store_id": store_id, "service": service, "slots": slots}


def reschedule_booking(db: dict[str, Any], booking_id: str, date: str, time: str,  # noqa: A002 - schema names
                       send_confirmation: bool) -> Any:
    b = _booking_of(db, booking_id)
    if b["status"] != "confirmed":
        raise ToolError(f"booking {booking_id} is {b['status']} and cannot be rescheduled")
    if not slot_is_free(db, b["store_id"], date, time, ignore=booking_id):
        raise ToolError(f"the slot {date} {time} is not available at {b['store_id']}")
    b["date"], b["time"] = date, time
    b["reschedule_count"] += 1
    return {"booking_id": booking_id, "status": "confirmed", "date": date, "time": time,
            "reschedule_count": b["reschedule_count"], "confirmation_sent": send_confirmation}


def cancel_booking(db: dict[str, Any], booking_id: str, waive_fee: bool) -> Any:
    b = _booking_of(db, booking_id)
    if b["status"] != "confirmed":
        raise ToolError(f"booking {booking_id} is {b['status']} and cannot be cancelled")
    fee = LATE_CANCEL_FEE if hours_until(b) < 24 and not waive_fee else 0.0
    b["status"] = "cancelled"
    b["cancellation_fee"] = fee
    return {"booking_id": booking_id, "status": "cancelled", "fee_charged": fee}


def transfer_to_human(db: dict[str, Any], summary: str, priority: str) -> Any:
    db["transfers"].append({"summary": summary, "priority": priority})
    return "Transfer successful. A human agent will take over this conversation."


TOOL_FUNCTIONS: dict[str, Callable[..., Any]] = {
    f.__name__: f for f in (
        find_customer_by_email, find_customer_by_name_zip, get_customer_details, list_orders, get_order,
        cancel_order, update_order_address, return_items, issue_refund, get_booking, check_availability,
        reschedule_booking, cancel_booking, transfer_to_human)
}
"""Tool name -> implementation ``fn(db, **arguments)`` (a registry; read-only)."""


def _validator(parameters: dict[str, Any]) -> Any:
    cls = jsonschema.validators.validator_for(parameters)
    return cls(parameters, format_checker=cls.FORMAT_CHECKER)


_VALIDATORS = {t["function"]["name"]: _validator(t["function"]["parameters"]) for t in TOOL_SPECS}


def tool_spec(name: str) -> dict[str, Any]:
    """The ``function`` part of tool ``name``'s OpenAI spec."""
    for t in TOOL_SPECS:
        if t["function"]["name"] == name:
            return t["function"]
    raise KeyError(f"unknown tool {name!r}")


def with_defaults(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with the schema defaults of the omitted top-level parameters filled in."""
    out = dict(args)
    for key, prop in tool_spec(name)["parameters"]["properties"].items():
        if key not in out and "default" in prop:
            out[key] = copy.deepcopy(prop["default"])
    return out


def execute(db: dict[str, Any], name: str, arguments: str | dict[str, Any]) -> str:
    """Run tool ``name`` on ``db`` (mutated in place by writes) and return the tool message content."""
    if name not in TOOL_FUNCTIONS:
        return f"Error: unknown tool {name}"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return f"Error: arguments are not valid JSON ({exc.msg})"
    if not isinstance(arguments, dict):
        return "Error: arguments must be a JSON object"
    errors = sorted(_VALIDATORS[name].iter_errors(arguments), key=lambda e: list(e.path))
    if errors:
        where = "/".join(str(p) for p in errors[0].path) or "arguments"
        return f"Error: invalid {where}: {errors[0].message}"
    try:
        result = TOOL_FUNCTIONS[name](db, **with_defaults(name, arguments))
    except ToolError as exc:
        return f"Error: {exc}"
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def clone(db: dict[str, Any]) -> dict[str, Any]:
    """A private deep copy of a world (JSON round trip: faster than ``copy.deepcopy``)."""
    return json.loads(json.dumps(db, ensure_ascii=False))
