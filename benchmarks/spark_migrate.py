"""Applying migration plans vs rewriting the whole state, on one keyed state store (DESIGN §9, issue #12).

Targets (issue #12), on a 10M-row state: a jump-hash scale-out 32 -> 33 costs <= 0.15 of a full
rewrite, a rebalance that moves 1 % of the rows <= 0.05; a scale-in 33 -> 32 is reported beside them.

The state: ``--rows`` str keys (one row per key) with VWAP-like columns (volume, notional, trades),
N=32 channels of the jump consistent hash, 2^16 slots, 64 slot groups per channel.

- **rebalance**: the function keeps the jump table except for slot overrides that take every slot of
  ``--units`` (channel, slot group) pairs to another channel, and an explicit map that moves ``--hot``
  keys off their channel: the shape of a rebalance by the slot-override pass and the explicit map
  (DESIGN §5), sized to move ~1 % of the rows. Its reverse is applied right after it.
- **scale-out**: jump N 32 -> 33: ~3 % of the slots of every channel move to the new one, so nearly
  every file holds moved rows (each gets a slot filter; only the row groups holding moved slots are
  read). **scale-in**: 33 -> 32 right after it: every row of channel 32 returns to its old channel.
- **full rewrite** (the baseline): what a job without plans would do: read every file of every
  channel (with the same verification as apply), write each channel's complete state again with
  ``write_channel_files`` and commit.

One round is: rewrite, rebalance, rebalance reversed, rewrite, scale-out, scale-in, then a
compaction (for information: after the scale-in every channel holds two files per slot group). Each
rewrite restores the freshly written layout, so every rebalance and scale-out starts alike. Ratios
are medians over ``--repeats`` rounds, all from one run.

Run: ``.venv/bin/python benchmarks/spark_migrate.py [--rows N] [--json FILE]``
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa

from repart.migration import MigrationPlan, plan_migration
from repart.partitioning import PartitionFunction, initial_function
from repart.state.files import read_verified
from repart.state.store import ApplyResult, FileEntry, StateStore, write_channel_files

N_CHANNELS = 32
SLOT_BITS = 16
SLOT_GROUPS = 64
CHUNK = 1_000_000
REGION = "vwap"
TARGETS = {"rebalance": 0.05, "scale-out": 0.15}
KINDS = ("rebalance", "rebalance reversed", "scale-out", "scale-in")


def state_chunks(rows: int, seed: int) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    chunks = []
    for start in range(0, rows, CHUNK):
        n = min(CHUNK, rows - start)
        chunks.append(
            pa.table(
                {
                    "ticker": [f"T{i:09d}" for i in range(start, start + n)],
                    "volume": rng.integers(1, 10**7, n),
                    "notional": rng.random(n) * 1e9,
                    "trades": rng.integers(1, 10**5, n),
                }
            )
        )
    return chunks


def build_store(root: Path, a: PartitionFunction, rows: int) -> StateStore:
    per_channel: list[list[pa.Table]] = [[] for _ in range(N_CHANNELS)]
    for chunk in state_chunks(rows, seed=1):
        channels = a.lookup_many(chunk.column("ticker").to_pylist())
        for channel in range(N_CHANNELS):
            per_channel[channel].append(chunk.filter(pa.array(channels == channel)))
    store = StateStore.create(
        root,
        region=REGION,
        version=1,
        function_digest=a.digest,
        n_channels=N_CHANNELS,
        slot_bits=SLOT_BITS,
        key_type="str",
        key_col="ticker",
        schema=per_channel[0][0].schema,
        slot_groups=SLOT_GROUPS,
    )
    replaced = {
        channel: write(store, channel, pa.concat_tables(parts)) for channel, parts in enumerate(per_channel)
    }
    return store.commit(replaced, version=1, function_digest=a.digest, n_channels=N_CHANNELS)


def write(store: StateStore, channel: int, table: pa.Table) -> list[FileEntry]:
    return write_channel_files(
        store.root,
        channel,
        table,
        key_col=store.key_col,
        key_type=store.key_type,
        slot_bits=store.slot_bits,
        slot_groups=store.slot_groups,
    )


def rewrite_all(store: StateStore) -> float:
    """The baseline: read (verified), write again and commit every channel's complete state."""
    started = time.perf_counter()
    replaced = {}
    for channel in range(store.n_channels):
        parts = [read_verified(store.root, entry, store.layout)[0] for entry in store.files(channel)]
        table = pa.concat_tables(parts).drop_columns(["_slot"]) if parts else store.schema.empty_table()
        replaced[channel] = write(store, channel, table)
    store.commit(
        replaced, version=store.version, function_digest=store.function_digest, n_channels=store.n_channels
    )
    return time.perf_counter() - started


def rebalance(a: PartitionFunction, units: int, hot: int, rows: int, seed: int) -> PartitionFunction:
    """The rebalance's target: ``units`` whole (channel, slot group) pairs and ``hot`` keys elsewhere."""
    rng = random.Random(seed)
    shift = SLOT_BITS - (SLOT_GROUPS.bit_length() - 1)
    overrides: dict[int, int] = {}
    for unit in rng.sample(range(N_CHANNELS * SLOT_GROUPS), units):
        channel, group = divmod(unit, SLOT_GROUPS)
        target = rng.choice([c for c in range(N_CHANNELS) if c != channel])
        for slot in range(group << shift, (group + 1) << shift):
            if a.table[slot] == channel:
                overrides[slot] = target
    keys = [f"T{i:09d}" for i in rng.sample(range(rows), hot)]
    explicit: dict[str | int, int] = {
        key: (channel + 1 + rng.randrange(N_CHANNELS - 1)) % N_CHANNELS
        for key, channel in zip(keys, a.lookup_many(keys).tolist(), strict=True)
    }
    return PartitionFunction(
        n_channels=N_CHANNELS,
        key_type="str",
        slot_bits=SLOT_BITS,
        explicit=explicit,
        slot_overrides=overrides,
    )


def describe(plan: MigrationPlan) -> str:
    slots = int((plan.slot_moves[:, 1] - plan.slot_moves[:, 0] + 1).sum())
    return (
        f"{len(plan.explicit_moves)} explicit moves, {len(plan.slot_moves)} slot runs ({slots} slots), "
        f"channels losing keys {len(plan.channels_losing_keys)}/{plan.source_n_channels}"
    )


def apply(store: StateStore, plan: MigrationPlan) -> ApplyResult:
    """Apply ``plan`` from the store's version to the next, under a fresh plan id."""
    plan_id = len(store.applied_plans) + 1
    version = store.version
    return store.apply(plan, plan_id=plan_id, region=REGION, from_version=version, to_version=version + 1)


def files_line(name: str, result: ApplyResult, rows: int) -> str:
    return (
        f"  {name:<19} {result.seconds:6.2f}s  moved {result.moved_rows:,} rows "
        f"({100 * result.moved_rows / rows:.2f}%), took {result.taken_rows:,}, wrote/linked "
        f"{result.moved_bytes / 2**20:.1f} MiB; files: {result.filtered_files} filtered, "
        f"{result.rewritten_files} rewritten, {result.relocated_files} relocated"
    )


def run_rounds(
    store: StateStore, plans: dict[str, MigrationPlan], rows: int, repeats: int
) -> tuple[dict[str, list[float]], list[float]]:
    """``repeats`` rounds (module docstring); returns each kind's apply times and the rewrite times."""
    times: dict[str, list[float]] = defaultdict(list)
    rewrites: list[float] = []
    for repeat in range(repeats):
        print(f"round {repeat + 1}:")
        for kinds in (("rebalance", "rebalance reversed"), ("scale-out", "scale-in")):
            rewrites.append(rewrite_all(store))
            print(f"  {'rewrite all':<19} {rewrites[-1]:6.2f}s")
            for kind in kinds:
                result = apply(store, plans[kind])
                times[kind].append(result.seconds)
                print(files_line(kind, result, rows))
        compaction = store.compact()
        print(
            f"  {'compact':<19} {compaction.seconds:6.2f}s  channels {len(compaction.channels)}, "
            f"files {compaction.files_before} -> {compaction.files_after}, "
            f"{compaction.dropped_rows:,} filtered rows dropped (for information)"
        )
        store.vacuum(keep_generations=1)
    return times, rewrites


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="state rows (one per key)")
    parser.add_argument("--units", type=int, default=0, help="(channel, slot group) pairs moved; 0: 1%%")
    parser.add_argument("--hot", type=int, default=32, help="explicit keys the rebalance moves")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to build the store (default: temp)")
    parser.add_argument("--json", type=Path, default=None, help="write the ratios to this file")
    args = parser.parse_args()
    units = args.units or max(1, round(0.01 * N_CHANNELS * SLOT_GROUPS))
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        a = initial_function(N_CHANNELS, "str", SLOT_BITS)
        started = time.perf_counter()
        store = build_store(Path(directory) / "state", a, args.rows)
        files = sum(len(store.files(c)) for c in range(N_CHANNELS))
        print(
            f"state: {store.rows():,} rows, N={N_CHANNELS}, {SLOT_GROUPS} slot groups, {files} files "
            f"(built in {time.perf_counter() - started:.1f}s)"
        )
        moved = plan_migration(a, rebalance(a, units, args.hot, args.rows, seed=7))
        grown = plan_migration(a, initial_function(N_CHANNELS + 1, "str", SLOT_BITS))
        plans = {
            "rebalance": moved,
            "rebalance reversed": moved.reverse(),
            "scale-out": grown,
            "scale-in": grown.reverse(),
        }
        for kind in KINDS:
            print(f"{kind}: {describe(plans[kind])}")
        times, rewrites = run_rounds(store, plans, args.rows, args.repeats)
    rewrite = statistics.median(rewrites)
    ratios = {kind: statistics.median(times[kind]) / rewrite for kind in KINDS}
    print(f"median full rewrite {rewrite:.2f}s; median apply / full rewrite:")
    for kind in KINDS:
        target = TARGETS.get(kind)
        verdict = (
            "(reported)"
            if target is None
            else f"target <= {target}: " + ("PASS" if ratios[kind] <= target else "FAIL")
        )
        print(f"  {kind:<19} {statistics.median(times[kind]):6.2f}s  ratio {ratios[kind]:.3f}  {verdict}")
    if args.json is not None:
        figures = {
            "scale_out_ratio": ratios["scale-out"],
            "rebalance_ratio": ratios["rebalance"],
            "scale_in_ratio": ratios["scale-in"],
            "full_rewrite_seconds": rewrite,
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
