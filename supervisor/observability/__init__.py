"""Observability: metrics (every one defined once), lifecycle hooks, structured logging, the HTTPS exporter.

Owns: how the rest of the package reports: metric definitions, the hooks that logic calls on
lifecycle events, the log pipeline, the exporter. Most layers import it.

May import: ``placement``, ``version`` (checked against the import graph by ``tests/test_layers.py``), and against the grain, ``daemon``
(:mod:`.metrics` checks the exporter's host with ``daemon.loopback``) and ``supervision``
(:mod:`.hooks` annotates with ``supervision.init_policy``).
"""
