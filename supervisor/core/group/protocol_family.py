"""Which DataProto implementations the dispatch functions split and concatenate.

Our own :mod:`supervisor.core.protocol` is one family; an integration adds another (the installed
verl's ``verl.protocol``), so a worker class written against verl passes verl's ``DataProto`` through
the same dispatch, padding and collection code as ours. A family is found by the type of the value
in hand; a non-blocking call's ObjectRefs carry no type, so a group names the family its futures
use (``protocol_family``).

Loaders run on first use: importing this module imports neither torch nor verl.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ProtocolFamily", "register_protocol_family", "families", "family_of", "group_family"]


@dataclass(frozen=True)
class ProtocolFamily:
    """One DataProto implementation and the helpers dispatch needs from it.

    Attributes:
        name: for messages.
        data_proto: the DataProto class (``chunk``, ``concat``, ``is_padding_enabled``, ``len``).
        future: its DataProtoFuture class (``chunk``, ``concat``, a settable ``dispatch_fn``).
        pad_to_divisor: ``(data, divisor) -> (padded copy, pad_size)``.
        unpad: ``(data, pad_size) -> data without the last pad_size rows``.
    """

    name: str
    data_proto: type
    future: type
    pad_to_divisor: Callable[[Any, int], tuple[Any, int]]
    unpad: Callable[[Any, int], Any]


def _ours() -> ProtocolFamily:
    from .. import protocol

    return ProtocolFamily("supervisor", protocol.DataProto, protocol.DataProtoFuture, protocol.pad_dataproto_to_divisor, protocol.unpad_dataproto)


_loaders: dict[str, Callable[[], ProtocolFamily]] = {"supervisor": _ours}
_loaded: dict[str, ProtocolFamily] = {}


def register_protocol_family(name: str, loader: Callable[[], ProtocolFamily]) -> None:
    """Add a family, loaded on first use (idempotent per name)."""
    _loaders.setdefault(name, loader)


def families() -> list[ProtocolFamily]:
    """Every registered family, ours first."""
    for name, loader in _loaders.items():
        if name not in _loaded:
            _loaded[name] = loader()
    return [_loaded[name] for name in _loaders]


def family_of(value: Any) -> ProtocolFamily | None:
    """The family whose DataProto or DataProtoFuture ``value`` is (None: neither)."""
    for family in families():
        if isinstance(value, family.data_proto | family.future):
            return family
    return None


def group_family(worker_group: Any) -> ProtocolFamily:
    """The family of a group's futures: the one it names (``protocol_family``), else ours."""
    name = getattr(worker_group, "protocol_family", None) or "supervisor"
    families()
    return _loaded[name]
