"""Adapters to the trainers people use: TRL (``pivot_envs.integrations.trl``) and veRL
(``pivot_envs.integrations.verl``; its agent loop for whole tasks, which imports veRL:
``pivot_envs.integrations.verl_agent_loop``)."""
