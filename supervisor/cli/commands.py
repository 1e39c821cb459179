"""The ``supervisor`` command line: a thin click layer over the library.

``validate`` checks a spec; ``start`` runs the daemon; ``run`` runs a verl program supervised; ``status``, ``list``, ``stop`` and ``gc`` read and act on the supervisor
records kept in the cluster; ``info`` reports versions and a cluster's resources. Errors are one line
on stderr; exit codes: 0 fine, 1 failed (or something found), 2 invalid spec or usage.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from ..version import __version__
from . import options
from .export import AssetBundle
from .watch import WatchStop

__all__ = ["main"]


def _versions() -> dict[str, str]:
    import ray

    return {"ray-supervisor": __version__, "ray": ray.__version__, "python": sys.version.split()[0]}


@click.group()
@click.version_option(__version__, prog_name="supervisor")
def main() -> None:
    """Fault-tolerant GPU worker groups on Ray."""


@main.command()
@options.address_to_check
@options.as_json("Print one JSON object.")
def info(address: str | None, as_json: bool) -> None:
    """Print versions, and the resources of a Ray cluster when an address is given."""
    out: dict[str, object] = dict(_versions())
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        import ray

        from ..daemon.cluster import connect
        from ..errors import ClusterUnavailableError

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
@click.option("--run", "for_run", is_flag=True, help="SPEC is for `supervisor run` ([run.groups.NAME]; no pools, groups or driver).")
@click.option("--no-imports", is_flag=True, help="Do not import the worker classes and the driver SPEC names (importing runs their code).")
@options.as_json("Print one JSON object: valid, problems, and what SPEC describes.")
def validate(spec_path: str, for_run: bool, no_imports: bool, as_json: bool) -> None:
    """Check SPEC as `start` (or, with --run, `run`) would, touching no cluster: exit 0 when it is
    valid, 2 with one line per problem, each naming its field. For CI and pre-commit hooks."""
    from ..daemon.spec import SpecError, load_spec

    try:
        spec = load_spec(spec_path, check_imports=not no_imports, run=for_run)
    except SpecError as exc:
        if as_json:
            click.echo(json.dumps({"spec": spec_path, "valid": False, "problems": exc.problems}))
        else:
            for line in str(exc).splitlines():
                click.echo(f"error: {line}", err=True)
        sys.exit(2)
    described = {
        "spec": spec_path, "valid": True, "name": spec.supervisor.name or None, "pools": sorted(spec.pools),
        "groups": sorted(spec.run.groups if spec.run is not None else spec.groups), "driver": spec.driver is not None,
    }  # fmt: skip
    if as_json:
        click.echo(json.dumps(described))
        return
    what = f"{len(described['pools'])} pool(s), {len(described['groups'])} group(s)" + (", a driver" if spec.driver else "")
    click.echo(f"{spec_path}: valid ({'supervisor ' + spec.supervisor.name + ': ' if spec.supervisor.name else ''}{what})")


@main.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@options.address_for_a_run
@options.log_options
def start(spec_path: str, address: str | None, log_level: str, log_json: bool | None) -> None:
    """Run the supervisor daemon for SPEC until it is stopped (SIGTERM, SIGINT, `supervisor stop`) or its
    driver ends. Exit code 0 on a clean stop, 1 when a group FAILED, the driver raised, start-up
    failed or the cluster's GCS stayed unreachable past gcs_outage_grace_s (the job is then left
    running), 2 when the spec is invalid (nothing is created then)."""
    from ..daemon.spec import SpecError, load_spec
    from ..observability.log import configure_logging

    configure_logging(log_level, json=log_json, capture_stdlib=True)
    try:
        spec = load_spec(spec_path)
    except SpecError as exc:
        for line in str(exc).splitlines():
            click.echo(f"error: {line}", err=True)
        sys.exit(2)
    from ..daemon.daemon import Daemon
    from ..daemon.stop import StopReason
    from .status import collect_status, status_to_json

    def status_document() -> dict[str, Any]:  # what the daemon serves on /status
        return status_to_json(collect_status(time.time(), [spec.name]))

    daemon = Daemon(spec, address=address or os.environ.get("RAY_ADDRESS"), status_document=status_document)
    code = int(daemon.run())
    if daemon.stop_reason is StopReason.GCS_UNREACHABLE:  # Ray's exit hooks would wait for the GCS
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@options.spec_file("A run spec: [supervisor], [ray], [metrics], [run.groups.NAME].")
@click.option("--name", default=None, help="The supervisor's name (default: the spec's supervisor.name, else run-<id>).")
@options.address_for_a_run
@click.option("--detach", is_flag=True, help="At the end, leave the placement groups (and the record, detached) for the next run of the name.")
@options.log_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run(
    spec_path: str | None, name: str | None, address: str | None, detach: bool, log_level: str, log_json: bool | None, command: tuple[str, ...]
) -> None:
    """Run COMMAND (an unmodified verl program, e.g. `python -m verl.trainer.main_ppo ...`) with its verl
    worker groups supervised, and remove everything it owned when it ends. Exit status: the command's
    (128+N when signal N ended it); 2 for bad usage or an invalid spec, 125 when the run could not start
    (cluster unreachable, the name is running), 126/127 when COMMAND cannot be executed."""
    import uuid

    from ..daemon.spec import SpecError, load_spec, parse_spec, supervisor_name_problem
    from ..observability.log import configure_logging
    from ..run.descriptor import named
    from ..run.exit_status import RunExit, command_problem

    def fail(code: RunExit, message: str) -> None:
        click.echo(f"error: {message}", err=True)
        sys.exit(int(code))

    configure_logging(log_level, json=log_json, capture_stdlib=True)
    if not command:
        fail(RunExit.USAGE, "no command to run: supervisor run [OPTIONS] -- COMMAND [ARGS]...")
    spec_text = None
    try:
        if spec_path:
            spec_text = Path(spec_path).read_text() if Path(spec_path).is_file() else None
            spec = load_spec(spec_path, check_imports=False, check_budget=False, run=True)
        else:
            spec = parse_spec("", check_imports=False, run=True)
    except SpecError as exc:
        for line in str(exc).splitlines():
            click.echo(f"error: {line}", err=True)
        sys.exit(int(RunExit.USAGE))
    name = name or spec.name or f"run-{uuid.uuid4().hex[:8]}"
    problem = supervisor_name_problem(name)
    if problem:
        fail(RunExit.USAGE, f"--name: {problem}")
    address = address or os.environ.get("RAY_ADDRESS") or spec.ray.address
    if detach and not address:
        fail(RunExit.USAGE, "--detach needs a cluster that outlives the run (--address, RAY_ADDRESS or ray.address): an embedded Ray ends with it")
    unrunnable = command_problem(list(command))
    if unrunnable:
        fail(*unrunnable)
    from ..run.launcher import RunLauncher, RunNotStartedError

    launcher = RunLauncher(list(command), named(spec, name), spec_text, str(spec_path or "<run spec>"), address=address, detach=detach)
    try:
        status = launcher.run()
    except RunNotStartedError as exc:
        fail(RunExit.RUN_FAILED, str(exc))
    sys.exit(status)


@contextlib.contextmanager
def _connected(address: str | None, auth_token_path: Path | None = None) -> Iterator[None]:
    """Connect to the cluster for one command; any failure to reach it (a missing or wrong token
    too) is one line and exit 1."""
    import ray

    from ..daemon.cluster import connect, resolve_address
    from ..errors import ClusterUnavailableError

    try:
        connect(resolve_address(address), auth_token_path, logging_level="ERROR")
    except ClusterUnavailableError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        yield
    finally:
        ray.shutdown()


@main.command()
@click.argument("names", nargs=-1)
@options.address
@options.as_json()
@options.output(
    ["text", "wide", "json", "yaml"],
    "wide: also every rank (state, node, original node, actor id, pid, restarts, last failure); json/yaml: the document, with schema_version.",
)
@options.watch_options("Show it again every --interval seconds until interrupted.", "Seconds between --watch updates.")
def status(names: tuple[str, ...], address: str | None, as_json: bool, output: str, watch: bool, interval_s: float) -> None:
    """Show supervisors (all, or NAMES), their pools, groups, drift, recent failures and pending demands,
    laid out like `ray status`. Works while a daemon is down. Exit 1 when the cluster cannot be reached."""
    from .status import collect_status, render_status, status_to_json, status_to_yaml

    output = "json" if as_json else output
    with _connected(address), (WatchStop() if watch else contextlib.nullcontext()) as stop:  # Ctrl-C ends --watch
        while True:
            report = collect_status(time.time(), list(names) or None, ranks=output == "wide")
            if output == "json":  # one document per update: a compact line each when watching
                text = json.dumps(status_to_json(report), indent=None if watch else 2, sort_keys=True)
            elif output == "yaml":
                text = status_to_yaml(report) + ("---" if watch else "")
            else:
                text = render_status(report, wide=output == "wide")
                if watch and sys.stdout.isatty():
                    click.clear()
                elif watch:
                    text = "\n" + text  # off a terminal: the updates one after the other, a blank line apart
            click.echo(text.rstrip("\n"))
            if stop is None or stop.wait(interval_s):
                return


@main.command()
@click.argument("names", nargs=-1)
@options.address
@click.option(
    "--since", default=None, metavar="DURATION", help="Only events newer than this (30s, 10m, 1h30m, 2d)."
)
@click.option("--group", default=None, help="Only the events of this group (and its ranks).")
@click.option("--warnings", "warnings_only", is_flag=True, help="Only Warning events.")
@options.output(["text", "json", "yaml"], "json/yaml: one document, with schema_version.")
@options.watch_options(
    "After the history, print new events as they come (every --interval seconds) until interrupted.", "Seconds between --watch reads."
)
def events(
    names: tuple[str, ...],
    address: str | None,
    since: str | None,
    group: str | None,
    warnings_only: bool,
    output: str,
    watch: bool,
    interval_s: float,
) -> None:
    """Show what happened to supervisors (all, or NAMES), oldest first, like `kubectl get events`: failures,
    replacements, recoveries, drift, group and daemon state changes, takeovers, stops and collection.
    The last 1000 per supervisor are kept in the cluster, also after it stopped."""
    from ..daemon.events import parse_duration
    from .events_command import collect_events, events_document, render_events, select_events

    try:
        since_s = parse_duration(since) if since is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--since'") from None
    with _connected(address), (WatchStop() if watch else contextlib.nullcontext()) as stop:  # Ctrl-C ends --watch
        after: float | None = None  # with --watch: the newest event printed so far
        while True:
            now = time.time()
            rows = select_events(
                collect_events(list(names) or None),
                now=now,
                since_s=since_s,
                group=group,
                warnings_only=warnings_only,
                after=after,
            )
            if output == "json" and watch:  # a compact, versioned line per event
                text = "\n".join(json.dumps(events_document([r]), sort_keys=True) for r in rows)
            elif output == "json":
                text = json.dumps(events_document(rows), indent=2, sort_keys=True)
            elif output == "yaml":
                import yaml

                text = (
                    str(yaml.safe_dump(events_document(rows), sort_keys=True)) + ("---" if watch else "")
                    if rows or after is None
                    else ""
                )
            elif rows:
                text = render_events(rows, now, with_supervisor=len(names) != 1, header=after is None)
            else:
                text = "no events" if after is None else ""
            if text:
                click.echo(text.rstrip("\n"))
            if stop is None:
                return
            after = max([r.event.time for r in rows] + [after if after is not None else now])
            if stop.wait(interval_s):
                return


@main.command()
@options.output(["json", "yaml"])
def schema(output: str) -> None:
    """Print the JSON Schema of a spec (TOML or YAML), for editors: Taplo (`#:schema ./spec.schema.json`
    atop a TOML spec) and yaml-language-server (`# yaml-language-server: $schema=./spec.schema.json`)
    complete fields and flag unknown keys and wrong types. `supervisor validate` checks the rest."""
    from ..daemon.spec_schema import spec_schema

    if output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(spec_schema(), sort_keys=False).rstrip("\n"))
    else:
        click.echo(json.dumps(spec_schema(), indent=2))


@main.command(name="export")
@click.argument("bundle", metavar="|".join(AssetBundle), type=click.Choice([b.value for b in AssetBundle]))
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite files that exist with other contents.")
def export_assets(bundle: str, directory: Path, force: bool) -> None:
    """Write the ops files the package ships into DIRECTORY: the Grafana dashboards with their
    provisioning (dashboards), the alert rules with their promtool tests and the Prometheus config
    (alerts), the systemd unit (systemd), or the KubeRay manifests: RayCluster, the daemon's Deployment,
    ServiceMonitor, PrometheusRule and a RayJob (kuberay). Files there with other contents are an
    error (nothing is written) unless --force."""
    from ..errors import SupervisorError
    from .export import export_bundle, planned_files

    try:
        written = export_bundle(AssetBundle(bundle), directory, force=force)
    except SupervisorError as exc:
        raise click.ClickException(str(exc)) from None
    for path in written:
        click.echo(f"wrote {path}")
    unchanged = len(planned_files(AssetBundle(bundle))) - len(written)
    if unchanged:
        click.echo(f"{unchanged} file(s) in {directory} already up to date")


@main.command()
@click.argument("name")
@click.argument("group")
@click.argument("rank", type=click.IntRange(min=0))
@options.address
@click.option("--err", "stderr", is_flag=True, help="The actor's stderr (logging, tracebacks) instead of its stdout.")
@click.option("-p", "--previous", is_flag=True, help="The rank's previous actor: the last one that died (its last words).")
@click.option("--tail", type=click.IntRange(min=0), default=None, help="Only the last N lines (default: all).")
@click.option("-f", "--follow", is_flag=True, help="Then print new lines as they come, until Ctrl-C.")
def logs(name: str, group: str, rank: int, address: str | None, stderr: bool, previous: bool, tail: int | None, follow: bool) -> None:
    """Print the log of rank RANK of group GROUP of supervisor NAME: its actor's stdout (or --err), the
    current actor's or with --previous the one it replaced. Read from the node's files when the node
    runs on this machine, else through Ray's log API (which needs the cluster's dashboard)."""
    from .logs import LogStream, LogsUnavailableError, find_rank_actor, read_log

    with _connected(address), contextlib.suppress(*((KeyboardInterrupt,) if follow else ())):
        try:
            actor = find_rank_actor(name, group, rank, previous)
            for line in read_log(actor, LogStream.ERR if stderr else LogStream.OUT, tail, follow and not previous):
                click.echo(line)
        except LogsUnavailableError as exc:
            raise click.ClickException(str(exc)) from None


@main.command(name="list")
@options.address
@options.as_json()
def list_supervisors(address: str | None, as_json: bool) -> None:
    """List every supervisor known to the cluster, with its liveness."""
    from ..daemon.fence import observed_silence
    from ..daemon.record import RecordStore, liveness

    now = time.time()
    with _connected(address):
        records = [(r, observed_silence(r, now)[0]) for r in RecordStore().all()]
    rows = [
        {
            "name": r.name,
            "liveness": liveness(r, silent).value,
            "state": r.state,
            "pid": r.pid,
            "host": r.host,
            "heartbeat_age_s": round(silent, 1),
            "pools": sorted(r.pools),
            "groups": sorted(r.groups),
        }
        for r, silent in records
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("No supervisors found.")
        return
    from .table import format_table

    header = ("name", "liveness", "state", "pid", "host", "heartbeat", "pools", "groups")
    click.echo(format_table(header, [
        (r["name"], r["liveness"], r["state"], r["pid"], r["host"], f"{r['heartbeat_age_s']:g}s ago", r["pools"], r["groups"]) for r in rows
    ]))  # fmt: skip


@main.command()
@click.argument("name")
@options.address
@click.option("--timeout", "timeout_s", default=120.0, show_default=True, help="Seconds to wait for the teardown.")
@click.option("--detach", is_flag=True, help="Stop the daemon but leave its pools and workers running; the next start re-adopts them.")
def stop(name: str, address: str | None, timeout_s: float, detach: bool) -> None:
    """Ask the running daemon NAME to tear down (or, with --detach, to exit and leave the job to the next
    start, e.g. to upgrade the daemon), and wait until it has."""
    from ..daemon.fence import observed_silence
    from ..daemon.liveness import HeartbeatWatch
    from ..daemon.record import DaemonState, Liveness, RecordStore, liveness

    with _connected(address):
        store = RecordStore()
        record = store.get(name)
        if record is None:
            raise click.ClickException(f"no supervisor named {name!r} on this cluster (see `supervisor list`)")
        silent, _ = observed_silence(record, time.time())
        if liveness(record, silent) is not Liveness.ALIVE:
            raise click.ClickException(_not_running(record, silent))
        store.request_stop(name, record.owner, detach=detach)
        click.echo(f"asked supervisor {name} (pid {record.pid} on {record.host}) to stop; waiting...", err=True)
        started = time.monotonic()
        next_report = started + 5.0
        # The daemon beats on while it tears down: watched on this process's own clock, its heartbeat
        # tells a slow teardown (a checkpoint in a shutdown method) from a daemon that died.
        watch = HeartbeatWatch()
        while True:
            current = store.get(name)
            if current is None or current.owner != record.owner or (detach and current.state == DaemonState.DETACHED.value):
                break
            watch.observe(current.heartbeat_seq, time.monotonic())
            if liveness(current, watch.silent_for(time.monotonic())) is not Liveness.ALIVE:  # it died before finishing
                raise click.ClickException(_not_running(current, watch.silent_for(time.monotonic())))
            waited = time.monotonic() - started
            if waited > timeout_s:
                raise click.ClickException(f"supervisor {name} did not finish its teardown within {timeout_s:g}s (state {current.state})")
            if time.monotonic() >= next_report:
                click.echo(f"[{waited:4.0f}s] waiting for supervisor {name} to tear down (state {current.state})", err=True)
                next_report += 5.0
            time.sleep(0.2)
    click.echo(f"supervisor {name} detached: its pools and workers run on; start it again to re-adopt them" if detach else f"supervisor {name} stopped")


def _not_running(record: Any, silent_s: float) -> str:
    if record.detached:
        return f"supervisor {record.name} is detached (its daemon exited {silent_s:.0f}s ago): start its spec to re-adopt the job"
    return (
        f"supervisor {record.name} is not running (last heartbeat {silent_s:.0f}s ago); "
        f"`supervisor gc` removes what it left once it has been silent for {record.orphan_grace_s:g}s"
    )


@main.command()
@options.spec_file("Also check this spec's budget against the cluster.")
@click.option(
    "--fail-on", type=click.Choice(["info", "warning", "error", "never"]), default="warning", show_default=True,
    help="Exit 1 when a finding is this severe or more (info: handled by the supervisor, such as a restart).",
)
@options.address
@options.as_json()
def doctor(spec_path: str | None, fail_on: str, address: str | None, as_json: bool) -> None:
    """Triage a stuck or slow job: what blocks scheduling, which ranks fail their init, and what hurts
    after start, each with its severity and a suggested fix. Exit 1 when a finding reaches --fail-on,
    else 0; 2 for an invalid spec."""
    from ..daemon.spec import SpecError, load_spec
    from .doctor import Severity, diagnose, fails, gather_facts, render_findings

    spec = None
    if spec_path:
        try:
            spec = load_spec(spec_path, check_imports=False, check_budget=False)
        except SpecError as exc:
            for line in str(exc).splitlines():
                click.echo(f"error: {line}", err=True)
            sys.exit(2)
    # The cluster as `start` would pick it: --address, $RAY_ADDRESS, the spec's; else the local one.
    address = address or os.environ.get("RAY_ADDRESS") or (spec.ray.address if spec else None)
    with _connected(address, spec.path(spec.ray.auth_token_path) if spec else None):
        findings = diagnose(gather_facts(spec))
    if as_json:
        click.echo(json.dumps([f.as_dict() for f in findings], indent=2))
    else:
        click.echo(render_findings(findings))
    sys.exit(1 if fails(findings, None if fail_on == "never" else Severity.parse(fail_on)) else 0)


@main.command()
@options.address
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
@click.option(
    "--grace", "grace_s", type=float, default=None,
    help="Silence that makes a supervisor orphaned (default: its own orphan_grace_s); a live daemon is never collected.",
)  # fmt: skip
@click.option(
    "--include-detached", is_flag=True,
    help="Also collect detached jobs (left by `stop --detach` for the next start) younger than their detached_grace_s.",
)  # fmt: skip
def gc(address: str | None, dry_run: bool, grace_s: float | None, include_detached: bool) -> None:
    """Remove the pools and actors of supervisors whose daemon is gone (silent for longer than the grace
    period), and their records. Running supervisors are never touched; detached ones only once older
    than their detached_grace_s, or with --include-detached."""
    import uuid

    from ..daemon.events import EventKind, EventType, history_ending_with
    from ..daemon.fence import ClaimVerdict, OwnerFence, observed_silence
    from ..daemon.ownership import find_owned
    from ..daemon.record import Liveness, RecordStore, liveness
    from ..errors import SupersededError

    now = time.time()
    found = 0
    with _connected(address):
        store = RecordStore()
        for record in store.all():
            silent, _ = observed_silence(record, now)
            state = liveness(record, silent)
            if state is Liveness.DETACHED:
                if not include_detached and silent <= record.detached_grace_s:
                    click.echo(
                        f"kept supervisor {record.name}: detached {silent:.0f}s ago, for the next start to re-adopt "
                        f"(collected after {record.detached_grace_s:g}s, or with --include-detached)"
                    )
                    continue
            elif state is not Liveness.ORPHANED and (grace_s is None or state is Liveness.ALIVE or silent <= grace_s):
                continue  # a live heartbeat is never collected, whatever --grace says
            found += 1
            owned = find_owned(record.name)
            what = f"{len(owned.placement_groups)} placement group(s), {len(owned.actors)} actor(s) and the record"
            if dry_run:
                click.echo(f"would remove supervisor {record.name} (silent for {silent:.0f}s): {what}")
                continue
            # gc takes the supervisor over like a new start would: from then on its old daemon, if it
            # comes back, is refused everything; a daemon that took it over meanwhile makes the claim fail.
            fence = OwnerFence(record.name)
            verdict, before = fence.claim(
                f"gc-{uuid.uuid4().hex}", record.orphan_grace_s, record.heartbeat_interval_s, record=record, grace_override_s=grace_s
            )
            if verdict is not ClaimVerdict.GRANTED:
                click.echo(f"skipped supervisor {record.name}: a daemon owns it (heard from {before.silent_s:.1f}s ago)")
                continue
            try:
                fence.remove_owned(find_owned(record.name))
                collected = f"collected by `supervisor gc` after {silent:.0f}s of silence: {what}"
                history = history_ending_with(
                    store.events(record.name),
                    EventKind.COLLECTED,
                    collected,
                    time=time.time(),
                    type=EventType.WARNING,
                    generation=fence.generation or 0,
                )
                fence.retire(history)
            except SupersededError:
                click.echo(f"skipped supervisor {record.name}: a daemon took it over meanwhile")
                continue
            click.echo(f"removed supervisor {record.name} (silent for {silent:.0f}s): {what}")
        found += _collect_old_histories(store, now, dry_run)
        found += _collect_stale_beats(dry_run)
    if not found:
        click.echo("nothing to collect: no orphaned supervisors")


def _collect_stale_beats(dry_run: bool) -> int:
    """Remove the heartbeats of supervised actors that are gone (see heartbeat.stale_beats)."""
    from ..core.worker.actor_heartbeat import clear_beats, stale_beats

    stale = stale_beats()
    if not stale:
        return 0
    if dry_run:
        click.echo(f"would remove the heartbeats of {len(stale)} actor(s) that are gone")
    else:
        clear_beats(stale)
        click.echo(f"removed the heartbeats of {len(stale)} actor(s) that are gone")
    return 1


def _collect_old_histories(store: Any, now: float, dry_run: bool) -> int:
    """Remove the event histories of supervisors that have had no record for EVENTS_KEPT_S."""
    from ..daemon.events import EVENTS_KEPT_S

    removed = 0
    live = set(store.names())
    for name in store.event_names():
        events = store.events(name)
        newest = max((e.time for e in events), default=0.0)
        if name in live or now - newest <= EVENTS_KEPT_S:
            continue
        removed += 1
        if dry_run:
            click.echo(
                f"would remove the event history of supervisor {name} (gone, last event {now - newest:.0f}s ago)"
            )
        else:
            store.delete_events(name)
            click.echo(
                f"removed the event history of supervisor {name} (gone, last event {now - newest:.0f}s ago)"
            )
    return removed


if __name__ == "__main__":
    main()
