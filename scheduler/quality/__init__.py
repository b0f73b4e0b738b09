"""Placement quality: GPU fragmentation, scoring policies, FGD-protocol trace replays and Dask sweeps."""
