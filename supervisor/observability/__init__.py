"""Observability: metrics (every one defined once), lifecycle hooks, structured logging, the HTTPS exporter.

Owns: how the rest of the package reports: metric definitions, the hooks that logic calls on
lifecycle events, the log pipeline, the exporter. Most layers import it.

May import: ``version`` and ``failure``, the labels' vocabulary (checked against the import graph by ``tests/test_layers.py``): every
other layer reports through it, so the hooks read their facts (a resource diagnosis, an init attempt)
through protocols of their own rather than the classes that carry them.
"""
