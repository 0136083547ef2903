"""Compaction: rewriting a channel's files when filters and migrations have left too many behind (DESIGN §9).

Migrations leave two kinds of debris. A filtered file still holds the rows of the slots it no longer
owns (``repart.state.filters``): readers read and drop them. And every migration that brings rows to
a channel adds an incoming file per slot group beside the ones it has: a scale-in 33 → 32 gives
every remaining channel a second file in every slot group. A freshly written channel has one file
per slot group and no filter.

A channel is **due** when the share of its files' rows that their filters hide exceeds
``max_filtered_share``, or when it holds more than ``max_files_per_group`` files per slot group it
has state in (``CompactionPolicy``). Compacting a due channel rewrites each of its slot groups that
is not already one unfiltered file: the rows its files let through, read and verified
(``read_verified``), sorted by slot and written as one file. Every written file is read back and
checked, and the channel's rows and checksum must be unchanged; ``StateStore.compact`` then commits
the result as one more generation, with the same crash safety as any other (new files only, the
manifest swap last).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from repart.errors import Corrupt
from repart.state.files import (
    SLOT_COLUMN,
    FileEntry,
    Layout,
    channel_totals,
    make_durable,
    read_verified,
    write_part,
)
from repart.validation import Interval, check

#: The default share of a channel's file rows its filters may hide before it is compacted: a read
#: of the channel then reads at most 1 / (1 − 0.1) ≈ 1.11 times the rows it returns.
DEFAULT_MAX_FILTERED_SHARE = 0.1
#: The default number of files per slot group a channel may hold before it is compacted.
DEFAULT_MAX_FILES_PER_GROUP = 1.5
FILTERED_SHARE = Interval(float, 0, 1, closed="left")
FILES_PER_GROUP = Interval(float, 1, 1024)


@dataclass(frozen=True)
class CompactionPolicy:
    """When a channel is due for compaction (module docstring). ``max_filtered_share`` is in [0, 1)
    (0: any filter makes a channel due); ``max_files_per_group`` in [1, 1024] (1: any slot group with
    a second file does). InvalidInput names the field at fault."""

    max_filtered_share: float = DEFAULT_MAX_FILTERED_SHARE
    max_files_per_group: float = DEFAULT_MAX_FILES_PER_GROUP

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "max_filtered_share", check("max_filtered_share", self.max_filtered_share, FILTERED_SHARE)
        )
        object.__setattr__(
            self,
            "max_files_per_group",
            check("max_files_per_group", self.max_files_per_group, FILES_PER_GROUP),
        )

    def due(self, files: Sequence[FileEntry]) -> list[int]:
        """The channels of ``files`` (one generation's) that are due, ascending."""
        by_channel: dict[int, list[FileEntry]] = defaultdict(list)
        for entry in files:
            by_channel[entry.channel].append(entry)
        due = []
        for channel, entries in sorted(by_channel.items()):
            hidden = sum(entry.hidden_rows for entry in entries)
            total = sum(entry.file_rows for entry in entries)
            groups = len({entry.slot_group for entry in entries})
            if hidden > self.max_filtered_share * total or len(entries) > self.max_files_per_group * groups:
                due.append(channel)
        return due


@dataclass
class Compaction:
    """The next generation's files after compacting ``channels``: the files written, and how many
    files they replace and rows of filtered slots they leave behind."""

    channels: list[int]
    files: list[FileEntry] = field(default_factory=list)
    written: list[FileEntry] = field(default_factory=list)
    replaced_files: int = 0
    dropped_rows: int = 0


def compact_files(
    root: str | os.PathLike[str], files: Sequence[FileEntry], channels: Sequence[int], layout: Layout
) -> Compaction:
    """Rewrite the slot groups of ``channels`` that are not one unfiltered file (module docstring);
    writes only new files, made durable and verified. Corrupt naming a damaged file, or when a
    channel's rows or checksum would change (nothing is committed then)."""
    compaction = Compaction(sorted(channels))
    groups: dict[tuple[int, int], list[FileEntry]] = defaultdict(list)
    for entry in files:
        if entry.channel in compaction.channels:
            groups[entry.channel, entry.slot_group].append(entry)
        else:
            compaction.files.append(entry)
    for (channel, group), entries in sorted(groups.items()):
        if len(entries) == 1 and entries[0].filter is None:
            compaction.files.extend(entries)
            continue
        parts = [read_verified(root, entry, layout) for entry in entries]
        table = pa.concat_tables([part for part, _ in parts])
        hashes = np.concatenate([part_hashes for _, part_hashes in parts])
        order = np.argsort(table.column(SLOT_COLUMN).to_numpy(), kind="stable")
        written = write_part(root, channel, group, table.take(order), hashes[order], layout)
        compaction.written.append(written)
        compaction.files.append(written)
        compaction.replaced_files += len(entries)
        compaction.dropped_rows += sum(entry.hidden_rows for entry in entries)
    make_durable(root, compaction.written)
    _verify(root, files, compaction, layout)
    return compaction


def _verify(
    root: str | os.PathLike[str], before: Sequence[FileEntry], compaction: Compaction, layout: Layout
) -> None:
    """Read back every written file; every channel's rows and checksum must be what they were."""
    for entry in compaction.written:
        read_verified(root, entry, layout)
    old, new = channel_totals(before), channel_totals(compaction.files)
    for channel in compaction.channels:
        if old.get(channel) != new.get(channel):
            raise Corrupt(
                f"verification failed for channel {channel}: compaction would change its (rows, checksum) "
                f"from {old.get(channel)} to {new.get(channel)}; nothing was committed",
                path=str(Path(root)),
            )
