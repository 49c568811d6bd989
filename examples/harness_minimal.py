"""The smallest harness: a model loop over the rollout's base_url, tools over its mcp_url (docs/harness.md)."""
import asyncio, json, os, sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from openai import OpenAI

KEY = os.environ.get("PIVOT_ENVS_API_KEY", "none")  # the server's key, when it has one (pivot-envs serve --api-key)


async def main(task_file: str, max_turns: int = 30) -> None:
    task = json.load(open(task_file))
    llm = OpenAI(base_url=task["base_url"], api_key=KEY)
    messages = list(task["messages"])
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
    async with streamable_http_client(task["mcp_url"], http_client=http) as (read, write, *_), ClientSession(read, write) as mcp:
        await mcp.initialize()
        for _ in range(max_turns):
            reply = llm.chat.completions.create(model="policy", messages=messages, tools=task["tools"]).choices[0].message
            messages.append(reply.model_dump(exclude_none=True))
            if not reply.tool_calls:
                break  # a text answer ends the episode
            for call in reply.tool_calls:  # the world's tools, and send_message_to_user for a task with a user
                result = await mcp.call_tool(call.function.name, json.loads(call.function.arguments or "{}"))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result.content[0].text})


asyncio.run(main(*sys.argv[1:2], *map(int, sys.argv[2:3])))
