"""The chaos suite: seeded fault campaigns against the example RLHF job on a local multi-node Ray cluster.

Run ``python -m chaos SCENARIO [--quick] [--seed N]`` (``all`` runs every scenario on one cluster).
Each run injects faults into a real ``supervisor start`` daemon and its workers, checks the invariants
while it runs and after teardown, and writes a report (JSON plus a short summary). See docs/chaos.md.
"""
