"""The ``supervisor`` command line: a thin click layer over the library.

``start`` runs the daemon; ``status``, ``list``, ``stop`` and ``gc`` read and act on the supervisor
records kept in the cluster; ``info`` reports versions and a cluster's resources. Errors are one line
on stderr; exit codes: 0 fine, 1 failed (or something found), 2 invalid spec or usage.
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
@main.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option("--address", default=None, help="Ray cluster (default: $RAY_ADDRESS, then the spec's ray.address, else an embedded local Ray).")
@click.option("--log-level", default="INFO", show_default=True, help="Minimum level of the structured logs.")
@click.option("--log-json/--log-console", default=None, help="Log format (default: JSON unless stderr is a terminal).")
def start(spec_path: str, address: str | None, log_level: str, log_json: bool | None) -> None:
    """Run the supervisor daemon for SPEC until it is stopped (SIGTERM, SIGINT, `supervisor stop`) or its
    driver ends. Exit code 0 on a clean stop, 1 when a group FAILED, the driver raised or start-up
    failed, 2 when the spec is invalid (nothing is created then)."""
    from .log import configure_logging
    from .spec import SpecError, load_spec

    configure_logging(log_level, json=log_json)
    try:
        spec = load_spec(spec_path)
    except SpecError as exc:
        for line in str(exc).splitlines():
            click.echo(f"error: {line}", err=True)
        sys.exit(2)
    from .daemon import Daemon

    sys.exit(int(Daemon(spec, address=address or os.environ.get("RAY_ADDRESS")).run()))


if __name__ == "__main__":
    main()
