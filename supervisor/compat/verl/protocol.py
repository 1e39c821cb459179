"""``verl.protocol``."""

from supervisor.core.group.dispatch import PADDING_SIZE_KEY as _padding_size_key  # noqa: F401 (verl's modules import it)
from supervisor.core.protocol import *  # noqa: F403
from supervisor.core.protocol import __all__ as __all__  # noqa: F401
