"""``pivot-envs serve``: the envs and verifiers over HTTP (FastAPI + uvicorn).

NeMo Gym's resources-server protocol (``/seed_session``, ``/verify``, ``/verify_batch``), gymnasium
over HTTP (``/reset``, ``/step``, ``/step_many``, ``DELETE /sessions/{id}``), every env as an OpenEnv
environment (``/openenv/NAME``: ``/reset``, ``/step``, ``/state``, ``WS /ws``...), ``/health`` and
``/metrics`` (Prometheus text; ``?format=json``); with ``--policy AGENT_SPEC`` the harness endpoint
(``/harness/rollouts``: a per-rollout OpenAI-compatible ``base_url`` and the task's world over MCP). With
``--api-key`` (or ``$PIVOT_ENVS_API_KEY``) every route requires the key; a ``--host`` beyond loopback without one
is refused (``--insecure-no-key`` overrides). See :mod:`pivot_envs.serve.app`, :mod:`pivot_envs.serve.harness` and
:mod:`pivot_envs.serve.auth`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, List, Optional

import typer

from pivot_envs.agents.spec import parse_agent_spec
from pivot_envs.cli.common import WORLD_HELP, err_console, fail
from pivot_envs.cli.verify_cmd import verifier_spec, world_exec_spec
from pivot_envs.domains import domain_names
from pivot_envs.serve.auth import check_binding
from pivot_envs.users import parse_user_spec


def serve_command(
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind (0.0.0.0 exposes the server to the network)."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    workers: int = typer.Option(1, "--workers", min=1, help="uvicorn worker processes: they scale /verify; gym "
                                "sessions, rollout jobs and backends live in one process (use 1 for those faces)."),
    domain: Optional[List[str]] = typer.Option(None, "--domain", help="Serve this domain's envs (repeatable; default: all)."),
    verifier: Optional[str] = typer.Option(None, "--verifier", "-v", help="Verifier name for /verify and pivot envs (default: each pivot's domain default)."),
    config: Optional[Path] = typer.Option(None, "--config", help="Verifier config file (YAML, TOML or JSON: {name: ..., params...})."),
    world: Optional[str] = typer.Option(None, "--world", help="With --verifier world_exec: the world that executes the calls of /verify and the pivot envs. " + WORLD_HELP),
    session_ttl: float = typer.Option(600.0, "--session-ttl", min=1.0, help="Seconds after which an idle gym session is closed."),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level."),
    policy: Optional[str] = typer.Option(None, "--policy", help="Serve the harness endpoint (POST /harness/rollouts: "
                                         "a per-rollout OpenAI-compatible base_url and the task's world over MCP) with "
                                         "this agent answering: hf:MODEL_DIR, vllm:MODEL, replay, or openai:MODEL@URL "
                                         "to forward to a server. Needs --workers 1."),
    harness_idle_timeout: float = typer.Option(600.0, "--harness-idle-timeout", min=1.0, help="Seconds after which "
                                               "an idle harness rollout is abandoned (its world freed)."),
    harness_max_turns: int = typer.Option(30, "--harness-max-turns", min=1, help="Model calls a harness rollout may "
                                          "make."),
    harness_user: str = typer.Option("scripted", "--harness-user", help="The user of harness rollouts, reached "
                                     "through the send_message_to_user tool of tasks with a user: scripted (the "
                                     "recorded user turns), none, or openai:MODEL@URL (an LLM user)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="PIVOT_ENVS_API_KEY", show_envvar=True,
                                          help="Require this key on every route (Authorization: Bearer KEY, as OpenAI "
                                               "and MCP clients send it). Needed for a --host beyond loopback."),
    insecure_no_key: bool = typer.Option(False, "--insecure-no-key", help="Serve a --host beyond loopback without a "
                                         "key (anyone who reaches the port can open rollouts and run commands)."),
) -> None:
    """Serve the envs and verifiers over HTTP (NeMo Gym resources server, gymnasium over HTTP, OpenEnv)."""
    try:
        import uvicorn
        import fastapi  # noqa: F401
    except ImportError:
        fail("pivot-envs serve needs FastAPI and uvicorn: pip install 'pivot-envs[serve]'")

    if world is not None:
        if verifier != "world_exec" or config is not None:
            fail(f"--world {world}: only with --verifier world_exec (or put 'world' in a --config file)")
        spec = world_exec_spec(world)  # checked by building it; fails with the flag named
    else:
        spec = verifier_spec(verifier, config)  # checked by building it; fails with the flag named
    problem = check_binding(host, api_key, insecure_no_key)
    if problem is not None:
        fail(problem)
    known = domain_names()
    for d in domain or []:
        if d not in known:
            fail(f"--domain {d}: unknown domain; known: {', '.join(known)}")
    if policy is not None:
        if workers > 1:
            fail(f"--policy with --workers {workers}: harness rollouts live in one process; use --workers 1")
        try:
            parse_agent_spec(policy)
        except ValueError as exc:
            fail(f"--policy {policy}: {exc}")
        try:
            parse_user_spec(harness_user)
        except ValueError as exc:
            fail(f"--harness-user: {exc}")
    settings: dict[str, Any] = {"domains": list(domain) if domain else None, "verifier": spec,
                                "session_ttl_s": session_ttl, "api_key": api_key}
    if policy is not None:
        settings.update(policy=policy, harness_idle_timeout_s=harness_idle_timeout, harness_max_turns=harness_max_turns,
                        harness_user=harness_user)
    from pivot_envs.serve.app import CONFIG_ENV, create_app  # the serve extra: imports FastAPI at its top

    if workers > 1:
        err_console.print(f"note: {workers} worker processes scale /verify; gym sessions, rollout jobs and the "
                          "backend pool live in the process that made them (a request reaching another worker gets "
                          "a 421 saying so): serve those faces with --workers 1", highlight=False)

        os.environ[CONFIG_ENV] = json.dumps(settings)
        uvicorn.run("pivot_envs.serve.app:app_from_env", factory=True, host=host, port=port, workers=workers,
                    log_level=log_level)
    else:
        uvicorn.run(create_app(**settings), host=host, port=port, log_level=log_level)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_command)
