"""Adapters to the trainers people use: TRL (``pivot_envs.integrations.trl``) and veRL
(``pivot_envs.integrations.verl``)."""
