# pivot_kvstore/domain.py
from pivot_envs import Domain

DOMAIN = Domain(
    name="kvstore",
    env_id="pivot/KVStore-v0",  # whole tasks: pivot/KVStore-Episode-v0
    description="a key-value store: put, get, delete and list keys",
    default_verifier="final_turn",  # calls by tool_call, answers by the facts they carry
    world="kvstore",
    world_keys=("store",),
    success_rules=("state", "facts"),
)
