# pivot_kvstore/world.py
import hashlib
import json

from pivot_envs.worlds import ToolResult, World, WorldTask


def _tool(name, description, required=(), **properties):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": list(required)}}}


KEY, VALUE = {"type": "string"}, {"type": "string"}
TOOLS = [_tool("put", "Store a value under a key.", ("key", "value"), key=KEY, value=VALUE),
         _tool("get", "The value stored under a key.", ("key",), key=KEY),
         _tool("delete", "Remove a key.", ("key",), key=KEY),
         _tool("list_keys", "The keys that start with a prefix, sorted.", (), prefix=KEY)]


class KVStoreWorld(World):
    """A key-value store: put, get, delete and list_keys."""

    name = "kvstore"

    def __init__(self):
        self.store = {}

    def tools(self):
        return TOOLS

    def start(self, task: WorldTask):
        self.store = dict(task.config.get("store") or {})

    def call(self, name, arguments):
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        except (ValueError, TypeError) as exc:
            return ToolResult(f"Error: bad arguments: {exc}", error=True)
        key = str(args.get("key", ""))
        if name == "put":
            if "value" not in args:
                return ToolResult("Error: put needs a value", error=True)
            self.store[key] = str(args["value"])
            return ToolResult(json.dumps({"ok": True, "key": key}))
        if name == "get":
            if key in self.store:
                return ToolResult(json.dumps({"key": key, "value": self.store[key], "found": True}))
            return ToolResult(json.dumps({"key": key, "found": False}))
        if name == "delete":
            found = self.store.pop(key, None) is not None
            return ToolResult(json.dumps({"ok": found, "key": key}))
        if name == "list_keys":
            prefix = str(args.get("prefix", ""))
            return ToolResult(json.dumps({"keys": sorted(k for k in self.store if k.startswith(prefix))}))
        return ToolResult(f"Error: unknown tool {name}", error=True)

    def digest(self):
        return hashlib.sha256(json.dumps(self.store, sort_keys=True).encode()).hexdigest()
