"""A user's own RAY_RUNTIME_ENV_HOOK (tests/test_run.py checks the run's hook calls it first)."""


def add_marker(runtime_env):
    runtime_env = dict(runtime_env or {})
    runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), "MARKER": "user hook ran"}
    return runtime_env
