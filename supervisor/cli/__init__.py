"""The command line: the click commands, `supervisor status` and `supervisor doctor`.

Owns: the ``supervisor`` command, a thin layer over the Python API and the records.

May import: ``daemon``, ``run``, ``supervision``, ``core``, ``placement``, ``observability``,
``errors``, ``version`` (checked against the import graph by ``tests/test_layers.py``); nothing imports it.
"""
