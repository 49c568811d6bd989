"""``pivot-envs serve``: the envs and verifiers over HTTP (NeMo Gym's resources-server protocol,
gymnasium over HTTP, rollouts as a service)."""
