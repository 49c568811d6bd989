"""The PivotRL data pipeline: trajectories -> candidates (extract) -> profiled candidates (profile,
optionally on Ray) -> training pivots (filter), with the profile report."""
