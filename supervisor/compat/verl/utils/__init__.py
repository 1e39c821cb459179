"""``verl.utils``: the helpers verl's single controller and protocol modules import (submodules only)."""
