"""``verl.protocol``."""

from supervisor.protocol import *  # noqa: F403
from supervisor.protocol import __all__ as __all__  # noqa: F401
