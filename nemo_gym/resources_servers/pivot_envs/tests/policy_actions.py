"""The policy's turn at a row, as a Responses API response: the expert's action or a wrong one (plain JSON, no imports
from NeMo Gym: used in NeMo Gym's venv by verify_over_http.py and, as a stub policy's answers, by the project's tests)."""

import json


def response_of(items: list) -> dict:
    """A Responses API response (NeMo Gym's ``NeMoGymResponse``) whose output is ``items``."""
    return {"id": "resp_0", "created_at": 0, "model": "policy", "object": "response", "output": items,
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": []}


def call_item(name: str, arguments: str, j: int = 0) -> dict:
    return {"type": "function_call", "id": f"fc_{j}", "call_id": f"call_{j}", "name": name, "arguments": arguments,
            "status": "completed"}


def text_item(text: str) -> dict:
    return {"type": "message", "id": "msg_0", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def expert_items(action: dict) -> list:
    if action["type"] == "message":
        return [text_item(action["content"])]
    calls = action["calls"] if action["type"] == "function_call_batch" else [action]
    return [call_item(c["name"], c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"]), j)
            for j, c in enumerate(calls)]


def wrong_items(row: dict) -> list:
    action = row["expected_action"]
    if action["type"] == "message":  # a tool call where the expert replied
        tool = row["responses_create_params"]["tools"][0]
        return [call_item(tool["name"], "{}")]
    call = action["calls"][0] if action["type"] == "function_call_batch" else action
    args = json.loads(call["arguments"]) if isinstance(call["arguments"], str) else dict(call["arguments"])
    wrong = {k: (f"{v}-not-it" if isinstance(v, str) else v) for k, v in args.items()} or {"unexpected": 1}
    return [call_item(call["name"], json.dumps(wrong))]
