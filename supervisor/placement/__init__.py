"""Placement: resource pools, rank layout, resources and their diagnosis, the lenient wait, budgets, drift, where replacements and standbys go.

Owns: placement groups and the bundles ranks go into, and the pure answers about them (layout,
drift, free bundles, what resources are missing).

May import: ``observability``, ``fencing``, ``errors`` (checked against the import graph by ``tests/test_layers.py``).
"""
