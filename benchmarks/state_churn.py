"""A state store under churn: demo-like VWAP batches, a migration every third batch (issue #12).

Target (issue #12): after 30 demo-like batches with a migration every third batch, the store holds
at most 2x the live files of a freshly written store of the same state, and reading its channels
takes at most 1.2x the time of reading the fresh store's.

Each batch is what the VWAP pipeline does (``repart.demo.vwap``), without Spark:

1. every third batch, **apply** a migration plan: in turn a jump-hash scale-out N -> N+1, a
   rebalance (slot overrides that move every slot of ``--units`` (channel, slot group) pairs to
   another channel, and the batch's 8 hottest tickers as explicit moves), and a scale-in back to the
   jump hash on N channels;
2. **update** as ``update_state`` does: the trades routed by the store's function, each channel with
   trades reads its state (``read_channel``, filters honoured), adds the trades' sums per ticker and
   writes its complete new state (``write_channel_files``); one commit records the batch;
3. **compact** when due (``StateStore.compact``, its default thresholds) and vacuum, between batches,
   where the pipeline calls them.

The trades are the demo's stream (``repart.sim.trades.TradeStream``: Zipf tickers whose popularity
drifts). In it every channel has trades in every batch, so each update rewrites every channel and the
debris of a migration lives only until the next update: compaction never falls due. The **skewed**
variant (run after it by default; ``--skewed-channels K``, 0 to skip it) makes channels fall quiet:
in each run of ``--quiet-batches Q`` batches, K channels of the store's function (rotating from one
run to the next) get no trades (the trades of tickers routed to them are left out of the batch, as if
their market were closed), so their files are not rewritten, a migration's filters and extra files
pile up in them, and the compaction between batches falls due; the run prints how many happened.

After the last batch the store is compared with a fresh store of the same state (the same layout,
written by ``write_channel_files``): live files, and the time to read every channel (the best
of ``--repeats`` interleaved rounds of five passes each; two fresh copies of one state differ by up to
10 % on this shared machine). The state's totals must equal the input's exactly. For information:
the most live files over a fresh store's at any batch boundary, and both ratios right after each
migration, before its batch's update (the state ``update_state`` reads then).

Run: ``.venv/bin/python benchmarks/state_churn.py [--batches 30] [--skewed-channels 2]
[--quiet-batches 6] [--skip-uniform] [--json FILE]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from repart.migration import plan_migration
from repart.partitioning import PartitionFunction, initial_function
from repart.sim.trades import Trades, TradeStream
from repart.state.batches import ChannelUpdate, absorbed_batch
from repart.state.store import FileEntry, StateStore, write_channel_files

KEY = "ticker"
SUMS = ("trades", "volume", "notional_cents")
SCHEMA = pa.schema([(KEY, pa.string()), *((name, pa.int64()) for name in SUMS)])
SLOT_BITS = 16
REGION = "vwap"
FILES_TARGET = 2.0
READS_TARGET = 1.2
KINDS = ("scale-out", "rebalance", "scale-in")


def batch_sums(trades: Trades) -> pa.Table:
    """One row per ticker of the batch: its trades, volume and notional (the VWAP pipeline's sums)."""
    table = pa.table({KEY: trades.ticker, "volume": trades.volume, "notional_cents": trades.notional_cents})
    grouped = table.group_by(KEY).aggregate([(KEY, "count"), ("volume", "sum"), ("notional_cents", "sum")])
    return pa.table(
        {
            KEY: grouped[KEY],
            "trades": grouped[f"{KEY}_count"].cast(pa.int64()),
            "volume": grouped["volume_sum"],
            "notional_cents": grouped["notional_cents_sum"],
        },
        schema=SCHEMA,
    )


def combine(state: pa.Table, sums: pa.Table) -> pa.Table:
    """A channel's new state: its tickers' sums plus the batch's (``combine_vwap``)."""
    summed = pa.concat_tables([state, sums]).group_by(KEY).aggregate([(name, "sum") for name in SUMS])
    return pa.table({KEY: summed[KEY], **{name: summed[f"{name}_sum"] for name in SUMS}}, schema=SCHEMA)


def write(store: StateStore, channel: int, table: pa.Table) -> list[FileEntry]:
    return write_channel_files(
        store.root,
        channel,
        table,
        key_col=KEY,
        key_type="str",
        slot_bits=store.slot_bits,
        slot_groups=store.slot_groups,
    )


def update(store: StateStore, function: PartitionFunction, trades: Trades, seq: int) -> None:
    """Fold a batch into the store as ``update_state`` does (module docstring, step 2)."""
    sums = batch_sums(trades)
    channels = function.lookup_many(sums.column(KEY).to_pylist())
    replaced, updates = {}, []
    for channel in np.unique(channels).tolist():
        rows = sums.filter(pa.array(channels == channel))
        started = time.perf_counter()
        replaced[channel] = write(store, channel, combine(store.read_channel(channel), rows))
        updates.append(
            ChannelUpdate(
                channel,
                rows.num_rows,
                sum(entry.rows for entry in replaced[channel]),
                sum(entry.bytes for entry in replaced[channel]),
                time.perf_counter() - started,
            )
        )
    store.commit(
        replaced,
        version=store.version,
        function_digest=function.digest,
        n_channels=function.n_channels,
        batch=absorbed_batch(seq, updates),
    )


def next_function(
    kind: str, current: PartitionFunction, trades: Trades, units: int, slot_groups: int, seed: int
) -> PartitionFunction:
    """The function a migration of ``kind`` moves to from ``current`` (module docstring)."""
    n = current.n_channels
    if kind != "rebalance":
        return initial_function(n + 1 if kind == "scale-out" else n - 1, "str", SLOT_BITS)
    rng = np.random.default_rng(seed)
    shift = SLOT_BITS - (slot_groups.bit_length() - 1)
    overrides = dict(current.slot_overrides)
    for unit in rng.choice(n * slot_groups, size=units, replace=False).tolist():
        channel, group = divmod(unit, slot_groups)
        target = (channel + 1 + int(rng.integers(n - 1))) % n
        for slot in range(group << shift, (group + 1) << shift):
            if current.table[slot] == channel:
                overrides[slot] = target
    tickers, counts = np.unique(np.array(trades.ticker), return_counts=True)
    hot = tickers[np.argsort(counts)[-8:]].tolist()
    explicit = {
        key: (channel + 1) % n for key, channel in zip(hot, current.lookup_many(hot).tolist(), strict=True)
    }
    return PartitionFunction(
        n_channels=n, key_type="str", slot_bits=SLOT_BITS, explicit=explicit, slot_overrides=overrides
    )


def quiet_channels(seq: int, n_channels: int, quiet: int, quiet_batches: int) -> list[int]:
    """The channels that get no trades in batch ``seq`` of the skewed variant (module docstring)."""
    first = (seq // quiet_batches) * quiet
    return sorted({(first + step) % n_channels for step in range(min(quiet, n_channels - 1))})


def without_channels(trades: Trades, function: PartitionFunction, channels: list[int]) -> Trades:
    """``trades`` less those of the tickers ``function`` routes to ``channels``."""
    tickers, inverse = np.unique(np.array(trades.ticker), return_inverse=True)
    kept = ~np.isin(function.lookup_many(tickers.tolist()), channels)[inverse]
    return Trades(
        ticker=np.array(trades.ticker)[kept].tolist(),
        price_cents=trades.price_cents[kept],
        volume=trades.volume[kept],
    )


def fresh_copy(store: StateStore, root: Path) -> StateStore:
    """A freshly written store holding ``store``'s state in its layout."""
    fresh = StateStore.create(
        root,
        region=REGION,
        version=store.version,
        function_digest=store.function_digest,
        n_channels=store.n_channels,
        slot_bits=store.slot_bits,
        key_type="str",
        key_col=KEY,
        schema=SCHEMA,
        slot_groups=store.slot_groups,
    )
    replaced = {
        channel: write(fresh, channel, store.read_channel(channel)) for channel in range(store.n_channels)
    }
    return fresh.commit(
        replaced, version=store.version, function_digest=store.function_digest, n_channels=store.n_channels
    )


def read_seconds(store: StateStore, passes: int = 5) -> float:
    """The time to read every channel ``passes`` times (one pass of the demo's state takes ~5 ms)."""
    started = time.perf_counter()
    for _ in range(passes):
        for channel in range(store.n_channels):
            store.read_channel(channel)
    return time.perf_counter() - started


def compare(store: StateStore, scratch: Path, repeats: int) -> tuple[float, float, int, int]:
    """Live files and channel-read time of ``store`` over those of a fresh store of its state. Reads
    are timed in ``repeats`` rounds, the two stores in alternating order, after one untimed round;
    the best round of each counts (the least disturbed by other processes on a shared machine)."""
    fresh = fresh_copy(store, scratch / f"fresh-{store.generation}")
    stores = (store, fresh)
    for each in stores:
        read_seconds(each)
    seconds: tuple[list[float], list[float]] = ([], [])
    for repeat in range(repeats):
        for index in (0, 1) if repeat % 2 else (1, 0):
            seconds[index].append(read_seconds(stores[index]))
    files, fresh_files = file_count(store), file_count(fresh)
    return files / fresh_files, min(seconds[0]) / min(seconds[1]), files, fresh_files


def file_count(store: StateStore) -> int:
    return sum(len(store.files(channel)) for channel in range(store.n_channels))


def totals_match(store: StateStore, fed: dict[str, int]) -> bool:
    state = store.read()
    return all(int(pc.sum(state[name]).as_py() or 0) == fed[name] for name in SUMS)


@dataclass
class Outcome:
    """What a run measured: the final comparison, the comparisons right after each migration, the
    compactions, and whether the state's totals equal the input's."""

    final: tuple[float, float, int, int]
    boundaries: list[float]
    after_migrations: list[tuple[float, float]]
    compactions: int
    exact: bool


def run(args: argparse.Namespace, scratch: Path, quiet: int) -> Outcome:
    """The batches (module docstring), printing one line each; ``quiet`` channels at a time get no
    trades (0: the demo's stream)."""
    stream = TradeStream(tickers=args.tickers, base_trades=args.trades, growth=args.growth)
    function = initial_function(args.channels, "str", SLOT_BITS)
    store = StateStore.create(
        scratch / "state",
        region=REGION,
        version=1,
        function_digest=function.digest,
        n_channels=function.n_channels,
        slot_bits=SLOT_BITS,
        key_type="str",
        key_col=KEY,
        schema=SCHEMA,
        slot_groups=args.slot_groups,
    )
    fed = dict.fromkeys(SUMS, 0)
    after_migrations: list[tuple[float, float]] = []
    boundaries: list[float] = []
    compactions = 0
    for seq in range(args.batches):
        trades = stream.batch(seq)
        line = f"batch {seq + 1:2d}: {len(trades):,} trades"
        if seq % 3 == 2:
            kind = KINDS[(seq // 3) % len(KINDS)]
            target = next_function(kind, function, trades, args.units, args.slot_groups, seed=seq)
            version = store.version
            result = store.apply(
                plan_migration(function, target),
                plan_id=seq,
                region=REGION,
                from_version=version,
                to_version=version + 1,
            )
            function = target
            files_ratio, reads_ratio, _, _ = compare(store, scratch, args.repeats)
            after_migrations.append((files_ratio, reads_ratio))
            line += (
                f"; {kind} to N={function.n_channels}: {result.seconds:.2f}s, moved {result.moved_rows:,} "
                f"rows, {result.filtered_files} files filtered, then files {files_ratio:.2f}x and reads "
                f"{reads_ratio:.2f}x fresh"
            )
        if quiet:
            silent = quiet_channels(seq, function.n_channels, quiet, args.quiet_batches)
            trades = without_channels(trades, function, silent)
            line += f"; {len(trades):,} fed, channels {silent} quiet"
        update(store, function, trades, seq)
        fed["trades"] += len(trades)
        fed["volume"] += int(trades.volume.sum())
        fed["notional_cents"] += int(trades.notional_cents.sum())
        compaction = store.compact()
        if compaction.compacted:
            compactions += 1
            line += f"; compacted {len(compaction.channels)} channels ({compaction.seconds:.2f}s)"
        store.vacuum()
        boundaries.append(file_count(store) / file_count(fresh_copy(store, scratch / f"boundary-{seq}")))
        print(f"{line}; {store.rows():,} rows in {file_count(store)} files ({boundaries[-1]:.2f}x fresh)")
    final = compare(store, scratch, args.repeats)
    return Outcome(final, boundaries, after_migrations, compactions, totals_match(store, fed))


def report(outcome: Outcome, batches: int) -> dict[str, float | int | bool]:
    """Print the ratios with PASS/FAIL; return them for the JSON file."""
    files_ratio, reads_ratio, files, fresh_files = outcome.final
    worst_files = max((ratio for ratio, _ in outcome.after_migrations), default=float("nan"))
    worst_reads = max((ratio for _, ratio in outcome.after_migrations), default=float("nan"))
    print(
        f"after {batches} batches ({len(outcome.after_migrations)} migrations, {outcome.compactions} "
        f"compactions): {files} live files vs {fresh_files} in a fresh store of the same state"
    )
    for name, ratio, target in (
        ("live files / fresh", files_ratio, FILES_TARGET),
        ("channel reads / fresh", reads_ratio, READS_TARGET),
    ):
        print(f"  {name:<22} {ratio:.2f} (target <= {target}): {'PASS' if ratio <= target else 'FAIL'}")
    print(f"  state totals equal the input's: {outcome.exact}")
    print(f"  (for information: live files at a batch boundary at most {max(outcome.boundaries):.2f}x fresh;")
    print(
        f"  right after a migration, before its batch's update, at worst: files {worst_files:.2f}x, reads "
        f"{worst_reads:.2f}x fresh)"
    )
    return {
        "files_ratio": files_ratio,
        "reads_ratio": reads_ratio,
        "totals_exact": outcome.exact,
        "compactions": outcome.compactions,
        "worst_files_ratio_after_migration": worst_files,
        "worst_reads_ratio_after_migration": worst_reads,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--tickers", type=int, default=20_000, help="the stream's tickers (the demo's)")
    parser.add_argument("--trades", type=int, default=60_000, help="trades in the first batch (the demo's)")
    parser.add_argument(
        "--growth", type=float, default=1.15, help="trades grow by this factor per batch (the demo's)"
    )
    parser.add_argument("--channels", type=int, default=4, help="initial channels (the demo's)")
    parser.add_argument("--slot-groups", type=int, default=4, help="slot groups per channel (the demo's)")
    parser.add_argument("--units", type=int, default=2, help="(channel, slot group) pairs a rebalance moves")
    parser.add_argument("--repeats", type=int, default=10, help="interleaved read rounds per comparison")
    parser.add_argument(
        "--skewed-channels",
        type=int,
        default=2,
        help="channels without trades at a time in the skewed variant (0: skip the variant)",
    )
    parser.add_argument(
        "--quiet-batches", type=int, default=6, help="batches a channel of the skewed variant stays quiet"
    )
    parser.add_argument("--skip-uniform", action="store_true", help="run the skewed variant alone")
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="write the ratios to this file (the skewed variant's under the key 'skewed')",
    )
    args = parser.parse_args()
    if args.skewed_channels < 0 or args.quiet_batches < 1:
        parser.error("--skewed-channels must be >= 0 and --quiet-batches >= 1")
    variants = [] if args.skip_uniform else [("the demo's stream", 0)]
    if args.skewed_channels:
        variants.append(
            (
                f"skewed: {args.skewed_channels} channels quiet for {args.quiet_batches} batches at a time",
                args.skewed_channels,
            )
        )
    figures: dict[str, object] = {}
    for title, quiet in variants:
        print(f"== {title}")
        with tempfile.TemporaryDirectory() as directory:
            outcome = run(args, Path(directory), quiet)
        results = report(outcome, args.batches)
        if quiet:
            figures["skewed"] = results
        else:
            figures.update(results)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
