"""What runs inside a rank: the worker base class, the environment contract, ``@register`` and the dispatch modes, heartbeats, zygotes, CPU priority, state endpoints.

Owns: the code every rank's actor process imports and runs (:mod:`.worker_base`'s :class:`Worker`,
:mod:`.env`, :mod:`.actor_heartbeat`'s writer thread, :mod:`.cpu_priority`, :mod:`.state_endpoints`),
the node's zygote and the launcher its standbys start with (:mod:`.zygote`, :mod:`.zygote_launch`),
and the registration of worker methods (:mod:`.registration`, :mod:`.dispatch_modes`). Registration is
here, not in :mod:`supervisor.core.group`, because worker classes apply ``@register`` when their
module is imported in every rank, and the worker base class reads the specs it attaches; the driver's
binding (:mod:`supervisor.core.group.binding`) only reads them, and the group may import the worker,
never the reverse.

May import: ``state_tree`` (of core), ``observability``, ``retrying``, ``errors`` (checked against the import graph by ``tests/test_layers.py``). Never
``group`` or ``protocol``: a rank process stays light (no torch import through this package).
"""
