# pivot_kvstore/tasks.py
"""Expert trajectories in the key-value store: questions answered from the store, and writes.

``make_tasks(n, seed)`` gives ``n`` trajectory dicts (``messages``, ``tools``, ``reward``, ``meta`` with the
task ``id`` and the start ``store``), cycling through five kinds:

* ``lookup``: "What is stored under KEY?" -> get -> "KEY is VALUE." (VALUE is a fact: only the store knew it)
* ``list``: "Which keys start with PREFIX?" -> list_keys -> the keys (facts) and how many
* ``copy``: "Copy A to B." -> get A, put B -> "Copied VALUE from A to B." (VALUE is a fact)
* ``update``: "Set KEY to VALUE." -> put -> "Done: KEY is now VALUE." (a bare confirmation: the user gave VALUE)
* ``delete``: "Delete KEY." -> delete -> "Deleted KEY." (a bare confirmation)

Values are of the kinds a store holds: e-mails, lower-case words, paths, numbers, host names.
"""

import json
import random

from pivot_kvstore.world import TOOLS

VALUES = ["seven@example.com", "nina@corp.example", "blue", "green", "dev", "staging", "nightly",
          "/srv/app/config.yaml", "/var/log/app.log", "8080", "42", "db-primary.internal", "enabled", "weekly",
          "amber", "eu-west", "oscar@mail.test", "/opt/tools/bin", "3.5", "quiet"]
KEYS = ["user:ana:email", "user:bo:email", "ui:theme", "deploy:env", "backup:schedule", "app:config", "log:path",
        "http:port", "cache:ttl", "db:host", "feature:search", "report:cadence", "ui:accent", "region", "ops:email",
        "path:tools", "ratio", "mode"]
ANSWERS = {
    "lookup": ["{key} is {value}.", "The value stored under {key} is {value}.", "{key} holds {value}."],
    "list": ["There are {count} keys under {prefix}: {keys}.", "{count} keys start with {prefix}: {keys}."],
    "copy": ["Copied {value} from {src} to {dst}.", "{dst} now holds {value}, copied from {src}."],
    "update": ["Done: {key} is now {value}.", "Saved. {key} is set to {value}."],
    "delete": ["Deleted {key}.", "{key} has been removed."],
}
KINDS = list(ANSWERS)


def _call(name, call_id="call_1", **arguments):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _result(call, content):
    return {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"],
            "name": call["tool_calls"][0]["function"]["name"], "content": json.dumps(content)}


def _store(rng):
    keys = rng.sample(KEYS, 8)
    return {k: rng.choice(VALUES) for k in keys}


def make_task(i, seed=0):
    """Task ``i``: kind ``KINDS[i % 5]`` over a start store of its own."""
    rng = random.Random(f"kvstore:{seed}:{i}")
    kind, store = KINDS[i % len(KINDS)], _store(rng)
    key = rng.choice(sorted(store))
    template = rng.choice(ANSWERS[kind])
    turns = []
    if kind == "lookup":
        ask = rng.choice(["What is stored under {key}?", "Can you look up {key} for me?"]).format(key=key)
        call = _call("get", key=key)
        turns += [call, _result(call, {"key": key, "value": store[key], "found": True})]
        answer = template.format(key=key, value=store[key])
    elif kind == "list":
        prefix = key.split(":")[0] + (":" if ":" in key else "")
        keys = sorted(k for k in store if k.startswith(prefix))
        ask = f"Which keys start with {prefix}?"
        call = _call("list_keys", prefix=prefix)
        turns += [call, _result(call, {"keys": keys})]
        answer = template.format(count=len(keys), prefix=prefix, keys=", ".join(keys))
    elif kind == "copy":
        dst = rng.choice([k for k in KEYS if k not in store])
        ask = f"Copy the value of {key} to {dst}."
        get, put = _call("get", key=key), _call("put", "call_2", key=dst, value=store[key])
        turns += [get, _result(get, {"key": key, "value": store[key], "found": True}), put,
                  _result(put, {"ok": True, "key": dst})]
        answer = template.format(value=store[key], src=key, dst=dst)
    elif kind == "update":
        value = rng.choice([v for v in VALUES if v != store[key]])
        ask = f"Set {key} to {value}."
        call = _call("put", key=key, value=value)
        turns += [call, _result(call, {"ok": True, "key": key})]
        answer = template.format(key=key, value=value)
    else:
        ask = f"Please delete {key}."
        call = _call("delete", key=key)
        turns += [call, _result(call, {"ok": True, "key": key})]
        answer = template.format(key=key)
    messages = [{"role": "system", "content": "You look after the team's key-value store."},
                {"role": "user", "content": ask}, *turns, {"role": "assistant", "content": answer}]
    return {"messages": messages, "tools": TOOLS, "reward": 1,
            "meta": {"id": f"kv-{seed}-{i}", "kind": kind, "store": store}}


def make_tasks(n, seed=0):
    """``n`` tasks (see the module docstring)."""
    return [make_task(i, seed) for i in range(n)]
