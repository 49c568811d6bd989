"""The harness endpoint: train an agent harness that owns its loop (``pivot_envs.harness``).

A harness (the OpenAI Agents SDK, mini-swe-agent, your own loop) gets, per rollout, an OpenAI-compatible
``base_url`` answered by the policy being trained, with every call captured (token ids, log-probs), and the task's
world over MCP (``mcp_url``); the world judges the episode it played. The package sits below both the trainers
(whose E2E RL plays its groups through a harness) and the service (``pivot-envs serve --policy``): both import it,
it imports neither. One concept per module:

* :mod:`.capture` what is recorded of every model call; retokenization;
* :mod:`.policy` who answers the calls (an in-process agent, batched; or an upstream server);
* :mod:`.requests` a chat request: what is applied, refused and only recorded; :mod:`.stops` its ``stop``;
* :mod:`.state` one rollout's record and the refused-request error; :mod:`.envs` the rollouts' episode envs;
* :mod:`.user` the task's user, reached through one more tool;
* :mod:`.rollouts` the registry: open, answer calls, run tool calls, finish, abandon;
* :mod:`.transcript` the episode a rollout played; :mod:`.judge` its verdict and per-turn rewards;
* :mod:`.http` the routes and a server of their own; :mod:`.mcp` the world over MCP;
* :mod:`.export` finished rollouts as trajectory rows and ATIF; :mod:`.replay` the replay check;
* :mod:`.command` a harness command and one run of it; :mod:`.source` G runs per task against a server;
* :mod:`.shell` mini-swe-agent's extension point: an environment whose shell is the world.

Nothing is imported here: the modules need the ``serve`` and ``mcp`` extras (FastAPI, uvicorn, the MCP SDK),
and :mod:`.shell` mini-swe-agent. Guide: docs/harness.md.
"""
