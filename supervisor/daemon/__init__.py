"""The daemon: the spec, the record, ownership, the driver, the embedded Ray, the cluster connection and its authentication, the KV store.

Owns: the long-lived process of one supervisor: it applies the spec, drives its groups' supervision,
persists and fences the state record, and tears everything down on a clean exit.

May import: ``supervision``, ``state``, ``core``, ``placement``, ``observability``, ``fencing``,
``failure``, ``retrying``, ``errors`` (checked against the import graph by ``tests/test_layers.py``); not ``cli``, ``run`` or ``integrations``, which build on it.
"""
