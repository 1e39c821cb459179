"""``verl.protocol``."""

from supervisor.core.protocol import *  # noqa: F403
from supervisor.core.protocol import __all__ as __all__  # noqa: F401
