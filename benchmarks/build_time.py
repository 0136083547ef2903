"""Construction time of scan, redist and readj: production vs the reference, side by side in one run.

Setting (Gedik Fig. 12): N^(t) = 9 → N^(t+1) = 10, |D| = 10^6, Zipf z = 1, LCL, α = 1.2,
U^APM, σ ∈ {0.1, 0.03, 0.008}. p^(t) is built by the same algorithm (production) from the consistent
hash at N = 8, so both implementations start from the same realistic previous function and the same
window estimate. Each time is the best of ``--repeat`` runs; the script also checks that both return the
identical explicit map. Targets: every algorithm < 20 ms at σ = 0.1; at σ = 0.008 redist < 0.3 s and
readj < 1 s; production ≥ 20× faster than the reference for redist and readj at σ = 0.008.

    .venv/bin/python benchmarks/build_time.py [--domain 1000000] [--repeat 3] [--sigmas 0.1,0.03,0.008]
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.partitioning.reference import REFERENCE

from repart.partitioning.algorithms.builder import BuildParams, build, initial_function
from repart.sim.experiment import ExperimentConfig, window_estimate
from repart.sim.workload import ZipfWorkload


def best_of(repeat: int, call) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = call()
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--domain", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sigmas", default="0.1,0.03,0.008")
    args = parser.parse_args()
    workload = ZipfWorkload(1.0, args.domain)
    rows = []
    for sigma in (float(s) for s in args.sigmas.split(",")):
        config = ExperimentConfig(domain=args.domain, sigma=sigma)
        params = BuildParams(sigma=sigma)
        rng = np.random.default_rng(7)
        previous_estimate, _ = window_estimate(workload, config, 9, rng)
        estimate, _ = window_estimate(workload, config, 10, rng)
        for algorithm in ("scan", "redist", "readj"):
            start = build(initial_function(8, "int"), previous_estimate, 9, params, algorithm).function
            production_s, result = best_of(
                args.repeat, partial(build, start, estimate, 10, params, algorithm)
            )
            print(
                f"σ={sigma:<6} {algorithm:<7} production {production_s:.4f} s; running the reference…",
                flush=True,
            )
            reference_s, expected = best_of(1, partial(REFERENCE[algorithm], start, estimate, 10, params))
            same = dict(result.function.explicit) == expected  # type: ignore[union-attr]
            rows.append((sigma, algorithm, len(expected), production_s, reference_s, same))  # type: ignore[arg-type]
        for algorithm in ("uniform", "consistent"):
            start = initial_function(9, "int")
            production_s, _ = best_of(args.repeat, partial(build, start, estimate, 10, params, algorithm))
            rows.append((sigma, algorithm, 0, production_s, float("nan"), True))
    print()
    header = ("sigma", "algorithm", "explicit", "production s", "reference s", "ref/prod", "identical")
    print("{:>6} {:<10} {:>8} {:>13} {:>12} {:>9}  {}".format(*header))
    for sigma, algorithm, size, production_s, reference_s, same in rows:
        ratio = reference_s / production_s if reference_s == reference_s else float("nan")
        times = f"{production_s:>13.4f} {reference_s:>12.3f} {ratio:>9.1f}"
        print(f"{sigma:>6} {algorithm:<10} {size:>8} {times}  {same}")


if __name__ == "__main__":
    main()
