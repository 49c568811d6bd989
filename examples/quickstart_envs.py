"""Quickstart 2: step a pivot env (one scored action), a group of actions, and a whole episode.

    python examples/quickstart_envs.py

Uses the bundled tool_use data (it ships in the wheel): nothing to download.
"""

import json

import gymnasium

# --- a pivot env: reset() loads a pivot, step(action) scores one action with the domain's verifier
env = gymnasium.make("pivot_envs:pivot/ToolUse-v0")  # pivots=PATH_OR_LIST, verifier=NAME_OR_CONFIG, split="train"|"test"
obs, info = env.reset(seed=0)
messages, tools = json.loads(obs["messages"]), json.loads(obs["tools"])
pivot_id, expert = info["pivot_id"], info["expert"]  # the expert assistant message (a label: not in obs)
print(pivot_id, f"{len(messages)} messages, {len(tools)} tools; expert:", expert)

# an action is model text (OpenAI tool calls, Hermes <tool_call> blocks, bare JSON) or a message dict
obs, reward, terminated, truncated, info = env.step(expert)
print("expert action:", reward, info["strict_reward"], info["reason"], info["error"])
assert reward == 1.0 and terminated

# a group of G actions at one pivot, scored with one verify_many call (what GRPO needs)
env.reset(options={"pivot_id": pivot_id})
group = [expert, '{"name": "get_order", "arguments": {"order_id": "X"}}', "hello"]
scored = env.unwrapped.step_many(group)  # (reward, info) per action, in order
print("group rewards:", [reward for reward, _ in scored], [step_info["reason"] for _, step_info in scored])
assert [reward for reward, _ in scored] == [1.0, 0.0, 0.0]

# --- an episode env: the whole task played to the end in the domain's world, scored by task success
episode = gymnasium.make("pivot_envs:pivot/ToolUse-Episode-v0", split="test", user="scripted")
obs, info = episode.reset(options={"index": 0})
while True:
    action = episode.unwrapped.recorded_action()  # the expert's turn, replayed; a policy's text in training
    obs, reward, terminated, truncated, info = episode.step(action)
    if terminated or truncated:
        break
print("episode:", info["success"], info["turns"], info["tool_calls"], info["error"])
assert info["success"]
