"""``supervisor run [--spec job.toml] [--name N] [--detach] -- COMMAND...``: an unmodified verl program, supervised.

Who owns what:

* The **parent** (the ``supervisor run`` process, :mod:`.launcher`) connects to the cluster (or starts
  an embedded Ray on loopback), claims the supervisor through the owner fence with a fresh owner id,
  writes the record and beats it, and starts the command with the run in its environment
  (:mod:`.descriptor`). It forwards SIGTERM/SIGHUP/SIGINT, and ``supervisor stop NAME`` becomes a
  SIGTERM. When the command ends, by any way, it claims the supervisor back and removes everything the
  supervisor owns by name (or, ``--detach``, kills its actors and leaves the placement groups and a
  detached record for the next run of the name), and exits with the command's status.
* The **host** (:mod:`.host`) lives in the process that builds the program's groups (verl's driver or its
  ``TaskRunner`` actor): it claims the supervisor with the parent's owner id (the fence grants an owner
  its own claim, with a new generation, which refuses the parent's writes from then on), takes over the
  record and writes it (every beat, and at once on every rank change), and gives the groups their pool
  names, fence, hooks and settings. Supervision lives there because that process makes the group calls:
  every in-flight call's outcome is decided where the call was made.
* The **import hook** (``supervisor/integrations/verl/_child/sitecustomize.py``), first on the
  PYTHONPATH of every process of the run, swaps verl's ``RayWorkerGroup``/``RayResourcePool`` for the
  supervised ones when verl's Ray module is imported (:mod:`.child`). Ray's ``RAY_RUNTIME_ENV_HOOK``
  (:mod:`.runtime_env`) copies the hook's PYTHONPATH and the run's descriptor into the program's Ray
  job, so its actors (a ``TaskRunner``) get them too.

May import: ``daemon``, ``integrations``, ``placement``, ``observability``, ``errors`` (checked against the import graph by ``tests/test_layers.py``).
"""
