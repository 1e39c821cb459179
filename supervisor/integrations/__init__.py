"""Supervision for programs written against other projects' APIs, unmodified (verl's).

Owns: verl's groups and pools swapped for supervised ones, the import hook that swaps them, and the
host that supervises them inside the program's process.

May import: ``supervision``, ``state``, ``daemon``, ``run``, ``core``, ``placement``,
``observability``, ``fencing``, ``retrying``, ``errors`` (checked against the import graph by ``tests/test_layers.py``).
"""
