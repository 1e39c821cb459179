"""``verl.utils.tensordict_utils``."""

from supervisor.core.tensordict_utils import *  # noqa: F403
from supervisor.core.tensordict_utils import __all__ as __all__  # noqa: F401
