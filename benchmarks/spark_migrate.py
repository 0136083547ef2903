"""Applying a migration plan vs rewriting the whole state, on one keyed state store (DESIGN §9).

Issue #4 target: on a 10M-row state, applying a plan that moves 1% of the rows takes <= 25% of the
time of rewriting the whole state.

The state: ``--rows`` str keys (one row per key) with VWAP-like columns (volume, notional, trades),
N=32 channels of the jump consistent hash, 2^16 slots, 64 slot groups per channel.

- **plan A (rebalance)**: the function ``b`` keeps ``a``'s table except for slot overrides that take
  every slot of ``--units`` (channel, slot group) pairs to another channel, and an explicit map that
  moves ``--hot`` keys off their channel: the shape of a rebalance by the slot-override pass and the
  explicit map (DESIGN §5), sized to move ~1% of the rows. ``plan_migration(a, b)`` is the plan.
- **baseline (rewrite)**: what a job without plans would do: read every file of every channel (with
  the same verification as apply), write each channel's complete state again with
  ``write_channel_files`` and commit.
- **plan B (scattered, for information)**: N 32 -> 33 with the jump hash: ~3% of the slots of every
  channel move to the new channel, so nearly every file holds moved rows and is rewritten.

Apply and rewrite alternate ``--repeats`` times (plan A, rewrite, plan A reversed, rewrite: the
rewrite after the reverse also restores the compact layout, so every plan A run starts alike).

Run: ``.venv/bin/python benchmarks/spark_migrate.py [--rows N]``
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
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
TARGET = 0.25


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
    """Plan A's target: ``units`` whole (channel, slot group) pairs and ``hot`` keys to other channels."""
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
    explicit = {
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


def describe(plan: MigrationPlan, rows: int, result_rows: int) -> str:
    slots = int((plan.slot_moves[:, 1] - plan.slot_moves[:, 0] + 1).sum())
    return (
        f"{len(plan.explicit_moves)} explicit moves, {len(plan.slot_moves)} slot runs ({slots} slots), "
        f"channels losing keys {len(plan.channels_losing_keys)}/{plan.source_n_channels}; "
        f"moved {result_rows:,} rows = {100 * result_rows / rows:.2f}% of the state"
    )


def apply(store: StateStore, plan: MigrationPlan) -> ApplyResult:
    """Apply ``plan`` from the store's version to the next, under a fresh plan id."""
    plan_id = len(store.applied_plans) + 1
    version = store.version
    return store.apply(plan, plan_id=plan_id, region=REGION, from_version=version, to_version=version + 1)


def files_line(result: ApplyResult) -> str:
    return (
        f"{result.seconds:6.2f}s  moved {result.moved_rows:,} rows, {result.moved_bytes / 2**20:.1f} MiB; "
        f"{result.rewritten_files} files rewritten, {result.relocated_files} relocated (hard links)"
    )


def alternate(store: StateStore, plan: MigrationPlan, rows: int, repeats: int) -> float:
    """Plan A, rewrite, plan A reversed, rewrite, ``repeats`` times; prints them, returns the median
    rewrite time."""
    applies, reverses, rewrites = [], [], []
    for repeat in range(repeats):
        result = apply(store, plan)
        if repeat == 0:
            print(f"plan A (rebalance): {describe(plan, rows, result.moved_rows)}")
        print(f"  apply A:          {files_line(result)}")
        rewrites.append(rewrite_all(store))
        print(f"  rewrite all:      {rewrites[-1]:6.2f}s")
        back = apply(store, plan.reverse())
        print(f"  apply A reversed: {files_line(back)}")
        rewrites.append(rewrite_all(store))
        print(f"  rewrite all:      {rewrites[-1]:6.2f}s")
        applies.append(result.seconds)
        reverses.append(back.seconds)
        store.vacuum(keep_generations=1)
    rewrite = statistics.median(rewrites)
    for name, times in (("plan A", applies), ("plan A reversed", reverses)):
        ratio = statistics.median(times) / rewrite
        verdict = "PASS" if ratio <= TARGET else "FAIL"
        print(
            f"{name}: median apply {statistics.median(times):.2f}s vs median rewrite {rewrite:.2f}s: "
            f"ratio {ratio:.3f} (target <= {TARGET}): {verdict}"
        )
    return rewrite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="state rows (one per key)")
    parser.add_argument("--units", type=int, default=0, help="(channel, slot group) pairs A moves; 0: 1%%")
    parser.add_argument("--hot", type=int, default=32, help="explicit keys plan A moves")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to build the store (default: temp)")
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
        rewrite = alternate(
            store,
            plan_migration(a, rebalance(a, units, args.hot, args.rows, seed=7)),
            args.rows,
            args.repeats,
        )
        scattered = plan_migration(a, initial_function(N_CHANNELS + 1, "str", SLOT_BITS))
        result = apply(store, scattered)
        print(f"plan B (scattered, jump N {N_CHANNELS} -> {N_CHANNELS + 1}, for information):")
        print(f"  {describe(scattered, args.rows, result.moved_rows)}")
        print(f"  apply B:          {files_line(result)}: ratio {result.seconds / rewrite:.3f}")
        print(
            "  (its moved rows lie in nearly every file of every channel: apply reads, splits, writes and "
            "reads back nearly all the state)"
        )


if __name__ == "__main__":
    main()
