"""``verl.utils.tensordict_utils``."""

from supervisor.core.protocol.tensordict_batches import *  # noqa: F403
from supervisor.core.protocol.tensordict_batches import __all__ as __all__  # noqa: F401
