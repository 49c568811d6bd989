"""A harness on the OpenAI Agents SDK (PyPI openai-agents), unpatched: its model on the rollout's base_url, its
MCP client on the rollout's mcp_url (the task's world, and the task's user as one more tool). Run per rollout by the
trainer or by hand ($PIVOT_ENVS_API_KEY: the server's key, when it has one):

    python examples/harness_openai_agents.py TASK_FILE [--max-turns 30]
"""
import argparse
import asyncio
import json
import os

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner
from agents.exceptions import MaxTurnsExceeded
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI


KEY = os.environ.get("PIVOT_ENVS_API_KEY", "none")


async def main(task_file: str, max_turns: int) -> None:
    task = json.load(open(task_file))
    model = OpenAIChatCompletionsModel(model=task["model"], openai_client=AsyncOpenAI(base_url=task["base_url"],
                                                                                      api_key=KEY))
    world_params = {"url": task["mcp_url"], "timeout": 120, "headers": {"Authorization": f"Bearer {KEY}"}}
    async with MCPServerStreamableHttp(world_params, client_session_timeout_seconds=120,
                                       cache_tools_list=True) as world:
        agent = Agent(name="assistant", instructions=task["system"] or None, model=model, mcp_servers=[world])
        config = RunConfig(tracing_disabled=True, tool_not_found_behavior="return_error_to_model")
        opening = [m for m in task["messages"] if m["role"] != "system"]
        try:
            await Runner.run(agent, input=opening, max_turns=max_turns, run_config=config)
        except MaxTurnsExceeded:
            pass  # the turn budget ran out: the world scores what was done


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task_file")
    parser.add_argument("--max-turns", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(main(args.task_file, args.max_turns))
