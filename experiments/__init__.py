"""The paper-reproduction experiments behind ``pivot-envs demo``: one pipeline for every model (the tiny model
trained from scratch, or a pretrained one with its warm-up), the arms, the report and the verifier summary."""
