"""Compaction: folding a channel's deltas into its base files, and dropping what filters hide.

Three things make a channel's reads cost more than its state: the deltas batches add (a reader
resolves them against the base, ``repart.state.resolve``), the rows a migration's slot filters hide
(``repart.state.filters``: read and dropped), and the extra files a migration brings (a scale-in
33 → 32 under jump gives every remaining channel a second file in every slot group; under prefix, in
the slot groups of the slots it gets back). A channel is **due**
(``CompactionPolicy``) when

- its deltas hold more than ``max_delta_share`` of the rows of its base files, or it has more than
  ``max_delta_files`` deltas;
- the share of its files' rows that their filters hide exceeds ``max_filtered_share``;
- it holds more than ``max_files_per_group`` base files per slot group it has state in.

Compacting a due channel with deltas reads all its rows, resolves them to one row per key and writes
them as one base file per slot group; a channel without deltas has each of its slot groups that is not
already one unfiltered file rewritten. Every file read is verified (``read_verified``) and every file
written is read back and checked; a channel without deltas must keep its rows and checksum. The files
written keep the newest ``seq`` of the rows they fold, so a batch that commits while a compaction runs
stays newer than the compacted rows. ``StateStore.compact`` commits the result as one more generation.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from repart.errors import Corrupt
from repart.state.files import (
    SLOT_COLUMN,
    FileEntry,
    Layout,
    channel_totals,
    read_verified,
    write_channel_files,
    write_part,
)
from repart.state.objects import Objects
from repart.state.resolve import resolved
from repart.validation import Interval, check

#: The default share of a channel's file rows its filters may hide before it is compacted: a read
#: of the channel then reads at most 1 / (1 − 0.1) ≈ 1.11 times the rows it returns.
DEFAULT_MAX_FILTERED_SHARE = 0.1
#: The default number of base files per slot group a channel may hold before it is compacted.
DEFAULT_MAX_FILES_PER_GROUP = 1.5
#: The default rows of a channel's deltas, as a share of its base rows, before it is compacted.
DEFAULT_MAX_DELTA_SHARE = 1.0
#: The default number of deltas a channel may hold before it is compacted.
DEFAULT_MAX_DELTA_FILES = 32
FILTERED_SHARE = Interval(float, 0, 1, closed="left")
FILES_PER_GROUP = Interval(float, 1, 1024)
DELTA_SHARE = Interval(float, 0, 1000)
DELTA_FILES = Interval(int, 1, 100_000)


@dataclass(frozen=True)
class CompactionPolicy:
    """When a channel is due for compaction (module docstring). ``max_filtered_share`` is in [0, 1)
    (0: any filter makes a channel due); ``max_files_per_group`` in [1, 1024]; ``max_delta_share`` in
    [0, 1000]; ``max_delta_files`` in [1, 100000]. InvalidInput names the field at fault."""

    max_filtered_share: float = DEFAULT_MAX_FILTERED_SHARE
    max_files_per_group: float = DEFAULT_MAX_FILES_PER_GROUP
    max_delta_share: float = DEFAULT_MAX_DELTA_SHARE
    max_delta_files: int = DEFAULT_MAX_DELTA_FILES

    def __post_init__(self) -> None:
        for name, interval in (
            ("max_filtered_share", FILTERED_SHARE),
            ("max_files_per_group", FILES_PER_GROUP),
            ("max_delta_share", DELTA_SHARE),
            ("max_delta_files", DELTA_FILES),
        ):
            object.__setattr__(self, name, check(name, getattr(self, name), interval))

    def due(self, files: Sequence[FileEntry]) -> list[int]:
        """The channels of ``files`` (one generation's) that are due, ascending."""
        by_channel: dict[int, list[FileEntry]] = defaultdict(list)
        for entry in files:
            by_channel[entry.channel].append(entry)
        return [channel for channel, entries in sorted(by_channel.items()) if self._is_due(entries)]

    def _is_due(self, entries: Sequence[FileEntry]) -> bool:
        bases = [entry for entry in entries if entry.kind == "base"]
        deltas = [entry for entry in entries if entry.kind == "delta"]
        base_rows = sum(entry.rows for entry in bases)
        if deltas and (
            len(deltas) > self.max_delta_files
            or sum(entry.rows for entry in deltas) > self.max_delta_share * base_rows
        ):
            return True
        hidden = sum(entry.hidden_rows for entry in entries)
        if hidden > self.max_filtered_share * sum(entry.file_rows for entry in entries):
            return True
        groups = len({entry.slot_group for entry in bases})
        return len(bases) > self.max_files_per_group * groups


@dataclass
class Compaction:
    """The next generation's files after compacting ``channels``: the files written, and how many
    files they replace and rows they drop (hidden by filters, or folded away from deltas)."""

    channels: list[int]
    files: list[FileEntry] = field(default_factory=list)
    written: list[FileEntry] = field(default_factory=list)
    replaced_files: int = 0
    dropped_rows: int = 0


def compact_files(
    objects: Objects, files: Sequence[FileEntry], channels: Sequence[int], layout: Layout
) -> Compaction:
    """Compact ``channels`` (module docstring); writes only new files, made durable and verified.
    Corrupt naming a damaged file, or when a channel without deltas would change its rows or checksum
    (nothing is committed then).

    The channels are independent (each reads and writes only its own files), so they are compacted
    side by side on as many threads as the process may use cores (``_usable_cores``): Parquet's reader
    and writer, the object store's requests and numpy's hashing release the GIL. That many channels'
    rows are in memory at once. The result does not depend on the threads: the files are listed in
    channel order, and a failure raises the first failing channel's error."""
    compaction = Compaction(sorted(channels))
    by_channel: dict[int, list[FileEntry]] = defaultdict(list)
    for entry in files:
        if entry.channel in compaction.channels:
            by_channel[entry.channel].append(entry)
        else:
            compaction.files.append(entry)
    workers = max(1, min(len(compaction.channels), _usable_cores()))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(
            pool.map(
                lambda channel: _compacted(objects, channel, by_channel[channel], layout), compaction.channels
            )
        )
        for part, _ in parts:
            compaction.files.extend(part.files)
            compaction.written.extend(part.written)
            compaction.replaced_files += part.replaced_files
            compaction.dropped_rows += part.dropped_rows
        objects.sync([entry.path for entry in compaction.written])
        list(pool.map(lambda entry: read_verified(objects, entry, layout), compaction.written))
    old, new = channel_totals(files), channel_totals(compaction.files)
    for channel, (_, folded) in zip(compaction.channels, parts, strict=True):
        if not folded and old.get(channel) != new.get(channel):
            raise Corrupt(
                f"verification failed for channel {channel}: compaction would change its (rows, checksum) "
                f"from {old.get(channel)} to {new.get(channel)}; nothing was committed",
                path=objects.url,
            )
    return compaction


def _usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, which a container's CPU set limits (a CPU
    quota, such as a Kubernetes CPU limit, does not: the pool then has a thread per core of the
    node, and as many channels' rows in memory)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _compacted(
    objects: Objects, channel: int, entries: Sequence[FileEntry], layout: Layout
) -> tuple[Compaction, bool]:
    """``channel`` compacted on its own, and whether its deltas were folded into base files (its rows
    may change, as the deltas say) rather than its slot groups regrouped (its rows may not)."""
    compaction = Compaction([channel])
    if any(entry.kind == "delta" for entry in entries):
        _fold(objects, compaction, channel, entries, layout)
        return compaction, True
    _regroup(objects, compaction, channel, entries, layout)
    return compaction, False


def _fold(
    objects: Objects, compaction: Compaction, channel: int, entries: Sequence[FileEntry], layout: Layout
) -> None:
    """Resolve every row of ``channel`` and write its state as base files."""
    parts = [read_verified(objects, entry, layout)[0] for entry in entries]
    seqs = np.concatenate(
        [np.full(part.num_rows, entry.seq, np.int64) for entry, part in zip(entries, parts, strict=True)]
    )
    rows = pa.concat_tables(parts)
    state = resolved(rows, seqs, layout)
    newest = max(entry.seq for entry in entries)
    written = [replace(entry, seq=newest) for entry in write_channel_files(objects, channel, state, layout)]
    compaction.written.extend(written)
    compaction.files.extend(written)
    compaction.replaced_files += len(entries)
    compaction.dropped_rows += sum(entry.file_rows for entry in entries) - state.num_rows


def _regroup(
    objects: Objects, compaction: Compaction, channel: int, entries: Sequence[FileEntry], layout: Layout
) -> None:
    """Rewrite each slot group of ``channel`` (base files only) that is not one unfiltered file."""
    groups: dict[int | None, list[FileEntry]] = defaultdict(list)
    for entry in entries:
        groups[entry.slot_group].append(entry)
    for group, members in sorted(groups.items(), key=lambda item: -1 if item[0] is None else item[0]):
        if len(members) == 1 and members[0].filter is None:
            compaction.files.extend(members)
            continue
        parts = [read_verified(objects, entry, layout) for entry in members]
        table = pa.concat_tables([part for part, _ in parts])
        hashes = np.concatenate([part_hashes for _, part_hashes in parts])
        order = np.argsort(table.column(SLOT_COLUMN).to_numpy(), kind="stable")
        newest = max(entry.seq for entry in members)
        written = write_part(
            objects, channel, group, table.take(order), hashes[order], layout, "base", newest
        )
        compaction.written.append(written)
        compaction.files.append(written)
        compaction.replaced_files += len(members)
        compaction.dropped_rows += sum(entry.hidden_rows for entry in members)
