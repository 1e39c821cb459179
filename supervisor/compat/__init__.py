"""Compatibility layers that mirror other projects' import paths.

Owns: verl's module paths (``supervisor.compat.verl.protocol``, ``...single_controller...``), which
re-export the library's objects under verl's names.

May import: ``core`` and ``placement`` only (checked against the import graph by ``tests/test_layers.py``).
"""
