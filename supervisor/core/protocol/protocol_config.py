"""DataProto's error and its process-wide settings (the leaf every other protocol module imports).

Importing this module also makes tensordict stack densely, which every row operation assumes.
"""

from __future__ import annotations

import contextlib
import os

import tensordict

from ...errors import SupervisorError

__all__ = ["DataProtoConfig", "DataProtoError"]

# Older tensordict releases default to lazy stacking, where torch.stack returns a
# LazyStackedTensorDict view. Row operations here assume dense results. Newer
# releases may drop the switch entirely, hence the suppress.
with contextlib.suppress(Exception):
    tensordict.set_lazy_legacy(False).set()


class DataProtoError(SupervisorError, ValueError, AssertionError):
    """Misuse of a DataProto: inconsistent lengths, unknown keys, conflicting values.

    Besides the library's :class:`SupervisorError` and ``ValueError`` it derives from
    ``AssertionError``, because verl raised that for the same conditions and ported
    code may catch it.
    """


# --------------------------------------------------------------------------- config


class _DataProtoConfigMeta(type):
    # A metaclass, so that `DataProtoConfig.auto_padding` is a property of the class
    # itself and verl's `DataProtoConfig.auto_padding = True` keeps working.
    _config: dict[str, bool] = {}

    auto_padding_key = "_verl_auto_padding"

    @property
    def auto_padding(cls) -> bool:
        if os.getenv("VERL_AUTO_PADDING", "FALSE").upper() in ("TRUE", "1"):
            return True
        return cls._config.get(cls.auto_padding_key, False)

    @auto_padding.setter
    def auto_padding(cls, enabled: bool) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"auto_padding must be a bool, got {type(enabled).__name__}")
        cls._config[cls.auto_padding_key] = enabled


class DataProtoConfig(metaclass=_DataProtoConfigMeta):
    """Process-wide DataProto settings.

    ``DataProtoConfig.auto_padding`` (bool, default ``False``; also switched on by the
    env var ``VERL_AUTO_PADDING`` set to ``TRUE`` or ``1``) lets every DataProto chunk
    into uneven pieces. A single DataProto opts in through
    ``meta_info[DataProtoConfig.auto_padding_key] = True``.
    """
