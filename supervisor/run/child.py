"""What the import hook does in a run's process once verl's Ray module is loaded (see
``supervisor/integrations/verl/_child/sitecustomize.py``)."""

from __future__ import annotations

__all__ = ["arm_verl"]


def arm_verl() -> None:
    """Replace verl's ``RayWorkerGroup``/``RayResourcePool`` by the supervised ones, and make this
    process's groups belong to the run (its :class:`~supervisor.run.run_host.RunHost`, made when the first
    group is created, after the program's own ``ray.init``).

    Raises:
        ImportError: the supervised verl classes are not installed. The program then fails at its
            import of verl rather than run unsupervised under ``supervisor run``.
    """
    from ..integrations.verl import patch
    from ..integrations.verl.host import set_host_factory
    from .run_host import RunHost

    set_host_factory(RunHost.from_environment)
    patch.install()
