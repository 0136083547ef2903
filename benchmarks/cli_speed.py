"""How long the CLI takes to answer: ``repart --help`` and ``repart status`` on a database with 10 regions.

    .venv/bin/python benchmarks/cli_speed.py [--runs 5]

Each command runs ``--runs`` times as a new process (as a user types it), after one unmeasured run that
warms the file cache; the median wall time is compared with issue #10's targets (``--help`` ≤ 0.3 s,
``status`` ≤ 0.6 s). The database is a fresh SQLite file with 10 regions, each initialized by a tick.
Prints the load average, since the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPART = str(Path(sys.executable).with_name("repart"))
TARGETS = {"--help": 0.3, "status": 0.6}


def run(*args: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([REPART, *args], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        env = os.environ | {"REPART_DB": f"sqlite:///{directory}/repart.db"}
        run("init", env=env)
        for i in range(10):
            run("region", "create", f"region-{i}", "--key-type", "str", "--channels", "4", env=env)
        run("tick", env=env)
        print(
            f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)"
        )
        failed = False
        for command, target in TARGETS.items():
            run(command, env=env)  # warm the file cache
            times = [run(command, env=env) for _ in range(args.runs)]
            median = statistics.median(times)
            verdict = "PASS" if median <= target else "FAIL"
            failed |= verdict == "FAIL"
            shown = " ".join(f"{t:.2f}" for t in times)
            print(f"{verdict}  repart {command}: median {median:.2f} s of {args.runs} ({shown}) ≤ {target} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
