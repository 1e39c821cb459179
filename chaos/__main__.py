"""``python -m chaos SCENARIO|all [--quick] [--seed N] [--out DIR] [--workdir DIR]``: run fault campaigns, write reports.

Exit code 0 when every scenario run held its invariants, 1 otherwise, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from .harness import ChaosCluster
from .runner import run_scenario
from .scenarios import SCENARIOS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=[*SCENARIOS, "all"], help="a scenario, or all of them on one cluster")
    parser.add_argument("--quick", action="store_true", help="the quick profile (CI); default: the full profile")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    parser.add_argument("--out", type=Path, default=None, help="report directory (default: chaos/reports for the full profile, a temporary one for --quick)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the daemons' logs and specs here (default: a temporary directory, removed)")
    args = parser.parse_args(argv)
    profile = "quick" if args.quick else "full"
    out = args.out or (Path(__file__).parent / "reports" if profile == "full" else Path(tempfile.mkdtemp(prefix="chaos-reports-")))
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        workdir = args.workdir or Path(tmp)
        cluster = ChaosCluster()
        try:
            for name in names:
                report = run_scenario(SCENARIOS[name], profile, args.seed, cluster, workdir)
                json_path, _ = report.write(out)
                print(report.summary(), flush=True)
                print(f"  report: {json_path}", flush=True)
                failed += not report.ok
        finally:
            cluster.shutdown()
    print(f"chaos: {len(names) - failed}/{len(names)} scenario(s) held their invariants", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
