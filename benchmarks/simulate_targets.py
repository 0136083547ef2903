"""Check the simulation targets on records written by ``repart simulate --json FILE``.

    .venv/bin/repart simulate --runs 5 --json docs/results/paper-default.json
    .venv/bin/python benchmarks/simulate_targets.py docs/results/paper-default.json

    .venv/bin/repart simulate --runs 3 --stream-factor 10 --tail-aware \\
        --algorithms scan,redist,readj,consistent --json docs/results/tail-aware.json
    .venv/bin/python benchmarks/simulate_targets.py docs/results/tail-aware.json

Prints a Markdown table of b, b_lb, m, explicit-map and counter sizes at a few N, then every target
that the records can decide, with PASS or FAIL.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

SHOWN_N = (2, 4, 8, 10, 16, 24, 32)
OURS = ("scan", "redist", "readj")


def series(records: list[dict], algorithm: str, tail_aware: bool) -> dict[int, dict]:
    return {r["N"]: r for r in records if r["algorithm"] == algorithm and r["tail_aware"] == tail_aware}


def table(records: list[dict]) -> None:
    variants = sorted({(r["algorithm"], r["tail_aware"]) for r in records}, key=lambda v: (v[1], v[0]))
    print("| algorithm | " + " | ".join(f"N={n}: b / m" for n in SHOWN_N) + " | explicit@10 | overrides@32 |")
    print("|---" * (len(SHOWN_N) + 3) + "|")
    for algorithm, tail in variants:
        rows = series(records, algorithm, tail)
        cells = [f"{rows[n]['b']:.3f} / {rows[n]['m']:.2f}" for n in SHOWN_N if n in rows]
        name = algorithm + (" + tail" if tail else "")
        last = rows[max(rows)]
        print(
            f"| {name} | " + " | ".join(cells) + f" | {rows.get(10, last)['explicit_size']:g} | "
            f"{last['slot_overrides']:g} |"
        )
    lower = series(records, *variants[0])
    print(
        "| lower bound b_lb | "
        + " | ".join(f"{lower[n]['b_lb']:.3f}" for n in SHOWN_N if n in lower)
        + " | | |"
    )


def check(name: str, ok: bool, detail: str) -> None:
    print(f"- {'PASS' if ok else 'FAIL'}: {name} ({detail})")


def targets(records: list[dict]) -> None:
    names = {r["algorithm"] for r in records}
    top = max(r["N"] for r in records)
    if {"uniform", "consistent"} <= names:
        uniform, consistent = series(records, "uniform", False), series(records, "consistent", False)
        check(
            "uniform m at the largest N >= 10",
            uniform[top]["m"] >= 10,
            f"m = {uniform[top]['m']:.1f} at N={top}",
        )
        means = {
            a: statistics.mean(r["m"] for n, r in series(records, a, False).items() if n >= 2) for a in names
        }
        check(
            "consistent has the lowest m (mean over N >= 2)",
            means["consistent"] == min(means.values()),
            ", ".join(f"{a} {m:.3f}" for a, m in sorted(means.items())),
        )
        steps = [n for n in consistent if n >= 2]
        lowest = [
            n for n in steps if consistent[n]["m"] <= min(series(records, a, False)[n]["m"] for a in names)
        ]
        print(f"  (consistent has the lowest m at {len(lowest)} of {len(steps)} steps)")
        worse = [
            n
            for n in uniform
            if n >= 4
            for a in OURS
            if a in names
            if min(uniform[n]["b"], consistent[n]["b"]) <= series(records, a, False)[n]["b"]
        ]
        check(
            "uniform and consistent have a higher b than scan, redist and readj at every N >= 4",
            not worse,
            f"violations at N = {sorted(set(worse))}" if worse else "no violation",
        )
    if "redist" in names:
        redist = series(records, "redist", False)
        worst = max(r["m"] for n, r in redist.items() if n >= 2)
        check("redist m <= 1.3 at every N >= 2", worst <= 1.3, f"max m = {worst:.3f}")
        if 10 in redist:
            size, counter = redist[10]["explicit_size"], redist[10]["counter_size"]
            check("explicit map at N = 10 holds 10..500 keys", 10 <= size <= 500, f"{size:g} keys")
            check("lossy counter at N = 10 <= 10,000 entries", counter <= 10_000, f"{counter:g} entries")
    tail = {a: series(records, a, True) for a in OURS if series(records, a, True)}
    if tail:

        def best(n: int) -> float:
            return min(rows[n]["b"] / rows[n]["b_lb"] for rows in tail.values())

        upto10 = max(best(n) for n in range(1, min(top, 10) + 1))
        upto32 = max(best(n) for n in range(1, min(top, 32) + 1))
        check(
            "tail-aware: best b <= 1.03 b_lb at every N <= 10", upto10 <= 1.03, f"max b/b_lb = {upto10:.4f}"
        )
        check(
            "tail-aware: best b <= 1.15 b_lb at every N <= 32", upto32 <= 1.15, f"max b/b_lb = {upto32:.4f}"
        )
        for algorithm, rows in tail.items():
            worst = max(r["m"] for n, r in rows.items() if n >= 2)
            ratio = max(r["b"] / r["b_lb"] for r in rows.values())
            check(
                f"tail-aware {algorithm}: m <= 1.5 at every N >= 2",
                worst <= 1.5,
                f"max m = {worst:.3f}; max b/b_lb = {ratio:.4f}",
            )


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    records = json.loads(Path(sys.argv[1]).read_text())
    table(records)
    print()
    targets(records)


if __name__ == "__main__":
    main()
