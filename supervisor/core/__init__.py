"""The single-controller core: workers, method registration, dispatch modes, binding, groups, colocation, the environment contract, the rendezvous, DataProto.

Owns: everything one driver needs to run a worker group with no supervisor, in three subpackages by
concern: the batch protocol (:mod:`.protocol`: DataProto, its futures, serialization, TensorDict
batches), what runs inside a rank (:mod:`.worker`: the worker base class and its environment contract,
``@register`` and the dispatch modes, heartbeats, zygotes, state endpoints), and the driver's side
(:mod:`.group`: creating, binding, dispatching to, calling and replacing ranks, colocation). Beside
them, :mod:`.state_tree`: operations on a state dict, used inside ranks, by the keepers and by user
code (``examples/rlhf``), so its path stays.

Within core, ``protocol`` imports neither ``worker`` nor ``group``; ``worker`` imports no ``group``
and no ``protocol``; ``group`` imports both (each subpackage's docstring states its imports, checked
by ``tests/test_layers.py``).

May import: ``placement``, ``observability``, ``fencing``, ``failure``, ``retrying``, ``errors`` (checked against the import graph by ``tests/test_layers.py``). Never
``supervision``, not even for annotations: a supervisor takes over a group's blocking calls through
the seam core defines (:mod:`.group.call_runner`), which supervision fills.
"""
