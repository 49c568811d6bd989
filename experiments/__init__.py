"""The paper-reproduction experiments behind ``pivot-envs demo``: the base model, the arms, the
report and the verifier summary."""
