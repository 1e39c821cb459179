"""The driver's side of a worker group: creating it, binding its worker class's methods, dispatch and collect, calling, replacing ranks, colocation, the rendezvous.

Owns: :mod:`.group`'s ``WorkerGroup`` and its rank replacement (:mod:`.group_replacement`), the binding
of registered methods (:mod:`.binding`), the dispatch functions (:mod:`.dispatch`) and the DataProto
families they split and concatenate (:mod:`.protocol_family`, light: it loads the protocol on first
use), putting many objects into the object store (:mod:`.object_store`), the seam a
supervisor fills (:mod:`.call_runner`), worker classes with their arguments (:mod:`.actor_class`),
colocated roles (:mod:`.colocate`), the choice of the rendezvous (:mod:`.rendezvous`), and what this
process knows of GCS outages (:mod:`.gcs_outages`).

May import: ``protocol`` and ``worker`` (of core), ``placement``, ``observability``, ``fencing``, ``failure``, ``retrying``, ``errors`` (checked against the import graph by ``tests/test_layers.py``).
"""
