"""The single-controller core: workers, method registration, dispatch modes, binding, groups, colocation, the environment contract, the rendezvous, DataProto.

Owns: everything one driver needs to run a worker group with no supervisor: the worker base class
and its environment contract, ``@register`` and the dispatch modes, the group (creating, binding,
calling, replacing ranks), and the batch protocol (:mod:`.protocol`).

May import: ``placement``, ``observability``, ``fencing``, ``retrying``, ``errors`` (checked against the import graph by ``tests/test_layers.py``). Never
``supervision``, not even for annotations: a supervisor takes over a group's blocking calls through
the seam core defines (:mod:`.call_runner`), which supervision fills.
"""
