"""Send this server's data rows to a running ``pivot_envs`` resources server over HTTP, as NeMo Gym's agent does.

For each row: the expert's action (``expected_action`` as the policy's Responses output) and a wrong one (another
call's arguments for a call, a tool call for a reply), each wrapped as NeMo Gym's ``tool_simulation_agent`` wraps a
rollout (its verify request model, dumped); plus one body NeMo Gym accepts and pivot-envs cannot score. Every 200
answer is validated against NeMo Gym's ``BaseVerifyResponse``, the agent's ``ToolSimulationAgentVerifyResponse`` and
this server's ``PivotEnvsVerifyResponse``. Prints one JSON line per request: ``{"id", "case", "status", ...}``.

Usage (in NeMo Gym's venv): python verify_over_http.py URL ROWS.jsonl
"""

import copy
import importlib.util
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

from nemo_gym.base_resources_server import BaseVerifyResponse
from responses_api_agents.tool_simulation_agent.app import (
    ToolSimulationAgentVerifyRequest,
    ToolSimulationAgentVerifyResponse,
)

from policy_actions import expert_items, response_of, wrong_items  # this folder (the script's own)


def _server_models():
    spec = importlib.util.spec_from_file_location("pivot_envs_app", Path(__file__).resolve().parents[1] / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PivotEnvsVerifyResponse


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url + "/verify", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def main(url: str, rows_path: str) -> None:
    server_response = _server_models()
    rows = [json.loads(line) for line in Path(rows_path).read_text().splitlines() if line.strip()]
    cases = []
    for row in rows:
        cases.append((row, "expert", {**row, "response": response_of(expert_items(row["expected_action"]))}))
        cases.append((row, "wrong", {**row, "response": response_of(wrong_items(row))}))
    bad = copy.deepcopy(rows[0])
    bad["expected_action"] = {"type": "handoff"}
    cases.append((bad, "unscorable", {**bad, "response": response_of(expert_items(rows[0]["expected_action"]))}))
    for row, case, raw in cases:
        body = ToolSimulationAgentVerifyRequest.model_validate(raw).model_dump()  # what the agent POSTs
        status, answer = post(url, body)
        out = {"id": row["id"], "case": case, "status": status}
        if status == 200:
            for model in (BaseVerifyResponse, ToolSimulationAgentVerifyResponse, server_response):
                model.model_validate(answer)  # raises (the script fails) on an answer NeMo Gym would reject
            out.update({k: answer.get(k) for k in ("reward", "passed", "error", "verifier")},
                       validated=True, row_kept=answer.get("expected_action") == row["expected_action"])
        else:
            out["detail"] = answer.get("detail")
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
