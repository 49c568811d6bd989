"""``python -m pivot_envs.cli``: the ``pivot-envs`` command, for launchers that start modules
(``torchrun --nproc_per_node 2 -m pivot_envs.cli train --config rl.yaml``)."""

from pivot_envs.cli import main

if __name__ == "__main__":
    main()
