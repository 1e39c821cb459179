"""``verl.single_controller``: re-exports ``base`` as verl does."""

from .base import *  # noqa: F403
from .base import __all__ as __all__  # noqa: F401
