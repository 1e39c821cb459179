"""The ``supervisor`` command line (a thin click layer over the library).

The daemon commands (start, status, stop, gc) arrive with the daemon; for now the CLI reports what
is installed and can check that a cluster is reachable.
"""

from __future__ import annotations

import json
import os
import sys

import click

from . import __version__

__all__ = ["main"]


def _versions() -> dict[str, str]:
    import ray

    return {"ray-supervisor": __version__, "ray": ray.__version__, "python": sys.version.split()[0]}


@click.group()
@click.version_option(__version__, prog_name="supervisor")
def main() -> None:
    """Fault-tolerant GPU worker groups on Ray."""


@main.command()
@click.option("--address", default=None, help="Ray cluster to check (default: $RAY_ADDRESS; none: skip).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def info(address: str | None, as_json: bool) -> None:
    """Print versions, and the resources of a Ray cluster when an address is given."""
    out: dict[str, object] = dict(_versions())
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        import ray

        from .cluster import connect
        from .errors import ClusterUnavailableError

        try:
            connect(address, logging_level="ERROR")
        except ClusterUnavailableError as exc:
            raise click.ClickException(str(exc)) from None
        try:
            out["cluster_resources"] = ray.cluster_resources()
            out["alive_nodes"] = sum(1 for n in ray.nodes() if n.get("Alive"))
        finally:
            ray.shutdown()
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
    else:
        for key, value in out.items():
            click.echo(f"{key}: {value}")
if __name__ == "__main__":
    main()
