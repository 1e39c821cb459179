"""Started by every Python process that has this directory on ``PYTHONPATH``: the conformance run's
driver and the Ray processes it starts (which inherit the environment), before any user code runs."""

import verl_alias

verl_alias.install()
