"""``supervisor export``: the ops assets the package ships (dashboards, alert rules and the Prometheus
config, the systemd unit, the KubeRay manifests), written to a directory, so ``pip install
ray-supervisor`` is all a deployment needs.

The assets are the repository's top-level ``dashboards/`` and ``ops/``; ``supervisor/_assets/`` links
to them, and the wheel carries copies (pyproject.toml's package data).
"""

from __future__ import annotations

import enum
import importlib.resources
from dataclasses import dataclass
from pathlib import Path

from ..errors import SupervisorError

__all__ = ["AssetBundle", "ExportConflictError", "AssetsMissingError", "asset_root", "planned_files", "export_bundle"]


class AssetBundle(enum.StrEnum):
    DASHBOARDS = "dashboards"
    ALERTS = "alerts"
    SYSTEMD = "systemd"
    KUBERAY = "kuberay"


@dataclass(frozen=True)
class _Source:
    directory: str  # under the assets root
    pattern: str  # a glob under it; the match's path under ``directory`` is its path in the export


_BUNDLES: dict[AssetBundle, tuple[_Source, ...]] = {
    # Grafana's file provisioning beside the dashboards it loads (its `path` names where they go).
    AssetBundle.DASHBOARDS: (_Source("dashboards", "*.json"), _Source("ops/grafana", "provisioning/*/*.yml")),
    # prometheus.yml loads alerts.yml from its own directory; alerts_test.yml is promtool's test of it.
    AssetBundle.ALERTS: (_Source("ops", "alerts.yml"), _Source("ops", "alerts_test.yml"), _Source("ops", "prometheus.yml")),
    AssetBundle.SYSTEMD: (_Source("ops/systemd", "*.service"),),
    AssetBundle.KUBERAY: (_Source("ops/kuberay", "*.yaml"), _Source("ops/kuberay", "README.md")),
}


class ExportConflictError(SupervisorError):
    """A file to export exists with other contents (and ``force`` was not given); nothing was written."""


class AssetsMissingError(SupervisorError):
    """The installed package has no assets (a broken install, or a build without its package data)."""


def asset_root() -> Path:
    """Where the assets are: the installed package's copies, or (in a checkout) the links to the
    repository's directories."""
    return Path(str(importlib.resources.files("supervisor") / "_assets"))


def planned_files(bundle: AssetBundle, root: Path | None = None) -> dict[Path, Path]:
    """{path in the export (relative): the asset file}, for ``bundle`` (pure but for the listing).

    Raises:
        AssetsMissingError: one of the bundle's sources matches nothing.
    """
    root = asset_root() if root is None else root
    files: dict[Path, Path] = {}
    for source in _BUNDLES[bundle]:
        base = root / source.directory
        matched = sorted(p for p in base.glob(source.pattern) if p.is_file())
        if not matched:
            raise AssetsMissingError(f"ray-supervisor's {bundle} assets are missing ({base / source.pattern}): reinstall the package")
        files.update({p.relative_to(base): p for p in matched})
    return files


def export_bundle(bundle: AssetBundle, destination: Path, force: bool = False, root: Path | None = None) -> list[Path]:
    """Write ``bundle``'s files under ``destination`` (created); returns the paths written.

    A file already there with the same contents is left as it is; one with other contents is an
    error unless ``force``, and then nothing at all is written.

    Raises:
        ExportConflictError: files with other contents exist (all of them are named).
        AssetsMissingError: see :func:`planned_files`.
    """
    files = {destination / rel: src.read_bytes() for rel, src in planned_files(bundle, root).items()}
    if not force:
        differing = [str(path) for path, data in files.items() if path.exists() and path.read_bytes() != data]
        if differing:
            what = f"{differing[0]} exists" if len(differing) == 1 else f"{len(differing)} files exist ({', '.join(differing)})"
            raise ExportConflictError(f"{what} with other contents: give --force to overwrite")
    written = []
    for path, data in files.items():
        if path.exists() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written
