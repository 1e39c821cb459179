"""Placement: resource pools, rank layout, resources and their diagnosis, the lenient wait, budgets, drift, where replacements and standbys go."""
