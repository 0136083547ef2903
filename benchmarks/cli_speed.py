"""How long the CLI takes to answer: ``repart --help`` and ``repart status`` on a database with 10 regions.

    .venv/bin/python benchmarks/cli_speed.py [--runs 11]

Each command runs ``--runs`` times as a new process (as a user types it), after one unmeasured run that
warms the file cache and writes the bytecode; the median wall time is compared with the targets
(``--help`` ≤ 0.3 s, ``status`` ≤ 0.6 s). Other read-only commands are timed for reference, and so are
the floors of the database commands: a Python process that only imports typer and the schema's Core
tables (SQLAlchemy's core with them: what ``status`` cannot avoid, as it reads without the ORM), and one
that imports typer and the ORM models (SQLAlchemy's ORM too: what every command reading through the
repository functions cannot avoid). The database is a fresh SQLite file with 10 regions, each
initialized by a tick.

The machine may be shared, so the commands take turns (one run of each per round: a burst of other
work slows them all alike), the load average is printed, and each command's median CPU time (user +
system) is shown beside its wall time. The commands run from compiled bytecode, as an installed repart
does (pip compiles it; an editable install writes it on its first run): when
``PYTHONDONTWRITEBYTECODE`` is set, as in some shells and containers, every run would compile repart's
modules again, so it is unset for the measured commands and the bytecode goes to the benchmark's
temporary directory (``PYTHONPYCACHEPREFIX``), not into the source tree.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPART = str(Path(sys.executable).with_name("repart"))
TARGETS = {"--help": 0.3, "status": 0.6}
# Other read-only commands, timed without a target.
OTHERS = ("status --json", "region list", "versions list region-0", "events list region-0")
# What a database command cannot avoid importing: the command line and the schema, as Core tables
# (``status``) or as ORM models (the commands that read through the repository functions).
FLOORS = ("import typer, repart.storage.tables", "import typer, repart.storage.models")


def run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """The wall time and the CPU time (user + system) of ``command`` in a new process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def measure(
    commands: dict[str, list[str]], runs: int, env: dict[str, str]
) -> dict[str, list[tuple[float, float]]]:
    """``runs`` (wall, CPU) times of each command, the commands taking turns, after a warming run each."""
    for command in commands.values():
        run(command, env)  # warm the file cache and write the bytecode
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            times[name].append(run(command, env))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {
            "REPART_DB": f"sqlite:///{directory}/repart.db",
            "PYTHONPYCACHEPREFIX": f"{directory}/bytecode",
        }
        run([REPART, "init"], env)
        for i in range(10):
            run([REPART, "region", "create", f"region-{i}", "--key-type", "str", "--channels", "4"], env)
        run([REPART, "tick"], env)
        print(
            f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)"
        )
        commands = {f"repart {c}": [REPART, *c.split()] for c in (*TARGETS, *OTHERS)}
        for floor in FLOORS:
            commands[f"floor, python -c '{floor}'"] = [sys.executable, "-c", floor]
        times = measure(commands, args.runs, env)
        failed = False
        for name, measured in times.items():
            wall = statistics.median(w for w, _ in measured)
            cpu = statistics.median(c for _, c in measured)
            target = TARGETS.get(name.removeprefix("repart "))
            if target is None:
                print(f"      {name}: median {wall:.2f} s of {args.runs}; CPU {cpu:.2f} s")
                continue
            verdict = "PASS" if wall <= target else "FAIL"
            failed |= verdict == "FAIL"
            shown = " ".join(f"{w:.2f}" for w, _ in measured)
            print(f"{verdict}  {name}: median {wall:.2f} s of {args.runs} ({shown}) ≤ {target} s; ", end="")
            print(f"CPU {cpu:.2f} s")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
