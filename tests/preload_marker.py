"""A module for a zygote to preload: it records the process that imported it."""

import os

IMPORTED_IN = os.getpid()
