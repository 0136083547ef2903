"""The keyed state store: immutable Parquet objects and a commit log, on a local disk or an object store.

A store lives at a path or a URL (``repart.state.objects``: ``file://``, ``s3://``, ``gs://``,
``az://``). Under its root:

- ``data/<uuid>.parquet``: immutable data files (``repart.state.files``), listed by a generation under
  the channels that own their rows: base files (one slot group each, one row per key) and deltas (what
  one batch wrote to one channel);
- ``_log/``: the commit log (``repart.state.log``): one document per generation, created only if
  absent, with checkpoints and a hint. No lock and no rename anywhere: two writers race on the
  conditional put of the next document, and exactly one wins.

A ``StateStore`` object is a handle on one generation: picklable, so it ships to Spark executors,
which read and write data files through it. What a batch costs follows the batch, not the state:

- ``write(channel, rows, kind="delta")`` writes one channel's rows of a batch as a delta and
  ``commit`` lists the deltas of every channel in one generation, recording the batch's id (a batch
  the store has absorbed is refused, so batches are exactly once). In a mergeable store (created with a
  ``merge``) a delta holds partial rows, in a general store newest rows and tombstones;
  ``read_channel`` resolves base and deltas into one row per key (``repart.state.resolve``).
- ``apply`` applies a migration plan (``repart.state.migrate``): files whose rows leave a channel are
  listed under the new channel with a slot filter and copied nowhere; only the rows of slots shared by
  explicitly moved or pinned keys are written again, and a split key's partials consolidated. Verified
  (rows and checksums per channel) before its commit, which records the plan's id: applying a plan again
  is a no-op.
- ``compact`` folds the deltas of a channel into its base files and drops the rows filters hide, for
  the channels that are due (``repart.state.compact``), as one more verified commit.
- ``evolve`` adds nullable columns to the state's schema by one commit that changes the layout and
  copies nothing: files written before it read the new columns as nulls (``repart.state.files``).
- ``vacuum`` deletes what no recent generation lists, by age: an object is deleted only when it is
  older than the retention time and neither the newest generation nor any committed within the
  retention time lists it, so neither a writer's files that are not committed yet nor a slow reader's
  generation are lost.

Stores of formats 1 and 2 (a local directory with a ``MANIFEST``, ``repart.state.legacy``) open for
reading; their first write, or ``upgrade``, lists their files in a format-3 log by one verified commit.

Errors: ``InvalidInput`` names the argument at fault (a plan of another region or version, a layout
that does not match); ``Corrupt`` names the damaged object (a missing or truncated data file, a torn
commit document that others build on, rows or a checksum that do not match); ``Conflict`` when another
writer's commit overlaps this one's; ``NotFound`` when there is no store; ``Unavailable`` when the object
store does not answer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from repart.errors import Conflict, Corrupt, InvalidInput
from repart.migration.plan import MigrationPlan
from repart.partitioning.consistent import check_n_channels
from repart.partitioning.domain import KeyType
from repart.state.batches import AbsorbedBatch
from repart.state.checksum import add_checksums
from repart.state.compact import CompactionPolicy, compact_files
from repart.state.files import (
    CHANNEL_COLUMN,
    DATA_PREFIX,
    FileEntry,
    FileKindName,
    Layout,
    checked_layout,
    file_schema,
    read_bytes,
    read_entry,
    read_keyed,
    read_verified,
    write_channel_files,
)
from repart.state.legacy import is_legacy, read_legacy
from repart.state.log import (
    LOG_PREFIX,
    Change,
    Generation,
    LayoutVersion,
    Log,
    Metadata,
    applied,
    checked_digest,
    checked_region,
    commit_path,
    is_temporary,
    log_number,
)
from repart.state.merge import Merge, MergeColumns, merged
from repart.state.migrate import migrate_files
from repart.state.objects import Objects, objects_at
from repart.state.resolve import StoreMerge, resolved
from repart.validation import Interval, check

__all__ = ["ApplyResult", "CompactResult", "FileEntry", "StateStore", "VacuumResult"]

DEFAULT_SLOT_GROUPS = 64
#: The default retention of ``vacuum``: objects younger than this are never deleted.
DEFAULT_RETENTION = timedelta(hours=1)
RETENTION_SECONDS = Interval(float, 0, 10 * 365 * 86400)
_READ_THREADS = 8


@dataclass(frozen=True)
class ApplyResult:
    """What ``StateStore.apply`` did: rows that changed channel and their files' bytes (``moved_bytes``:
    moved, whether listed elsewhere or written), files dropped and written anew (rewritten), given a slot
    filter (filtered) and listed under another channel (relocated); rows taken out of their files; the
    bytes the migration wrote (data files and its commit document, not the checkpoint or hint that may
    follow: ``written_bytes``); the generation it committed (or found, when the plan had been applied
    already) and the wall time."""

    plan_id: int
    moved_rows: int
    moved_bytes: int
    rewritten_files: int
    relocated_files: int
    generation: int
    already_applied: bool
    seconds: float
    filtered_files: int = 0
    taken_rows: int = 0
    written_bytes: int = 0


@dataclass(frozen=True)
class CompactResult:
    """What ``StateStore.compact`` did: whether it committed a generation (``compacted``: some channel
    was due), the channels it compacted, the files it replaced and wrote, the rows it dropped (hidden by
    filters, or folded deltas), the store's file count before and after, the generation and wall time."""

    compacted: bool
    channels: tuple[int, ...]
    replaced_files: int
    written_files: int
    dropped_rows: int
    files_before: int
    files_after: int
    generation: int
    seconds: float


@dataclass(frozen=True)
class VacuumResult:
    """What ``StateStore.vacuum`` deleted (paths relative to the root, sorted) and kept."""

    deleted: tuple[str, ...]
    kept_objects: int
    retention_seconds: float


class StateStore:
    """A handle on one generation of a keyed state store (module docstring).

    Build one with ``StateStore.create`` (an empty store) or ``StateStore.open`` (an existing one).
    """

    def __init__(self, objects: Objects, current: Generation, *, legacy: bool = False) -> None:
        """Internal: use ``create`` or ``open``."""
        self._objects = objects
        self._current = current
        self._legacy = legacy

    def __getstate__(self) -> dict[str, Any]:
        return {"_objects": self._objects, "_current": self._current, "_legacy": self._legacy}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @classmethod
    def create(
        cls,
        location: str | os.PathLike[str],
        *,
        region: str,
        version: int,
        function_digest: str,
        n_channels: int,
        slot_bits: int,
        key_type: KeyType,
        key_col: str,
        schema: pa.Schema,
        slot_groups: int = DEFAULT_SLOT_GROUPS,
        merge: MergeColumns | Mapping[str, str] | None = None,
        options: Mapping[str, str] | None = None,
    ) -> StateStore:
        """An empty store (generation 0, no files) at ``location``, which must hold no store. A local
        directory must not exist or be empty.

        ``schema`` holds the user's columns: the key column (string for ``str`` keys, a signed integer
        type for ``int`` keys) and state columns of fixed-width or string/binary types; ``_slot``,
        ``_deleted`` and ``channel`` are reserved. ``slot_groups`` is a power of two in
        [1, 2^slot_bits]. ``merge`` (a ``MergeSpec``, or each state column with ``sum``, ``count``,
        ``min`` or ``max``) makes the store mergeable: batches write partials that merge, and read no
        state. ``options`` are the object store's settings and credentials.
        InvalidInput for a bad argument or a location that holds something else; Conflict when another
        process created a store there at the same moment.
        """
        columns = merge if merge is None or isinstance(merge, Mapping) else merge.columns
        metadata = Metadata(
            checked_region(region),
            checked_layout(key_col, key_type, slot_bits, slot_groups, schema, columns),
        )
        layout_version = LayoutVersion(
            check_version(version),
            checked_digest(function_digest, "function_digest"),
            check_n_channels(n_channels),
        )
        objects = objects_at(location, options)
        _require_empty(objects)
        log = Log(objects)
        current = log.commit(None, Change("create", metadata=metadata, layout_version=layout_version))
        return cls(objects, current)

    @classmethod
    def open(cls, location: str | os.PathLike[str], options: Mapping[str, str] | None = None) -> StateStore:
        """The store at ``location`` at its newest generation. NotFound when there is none; Corrupt
        naming the object when its log is damaged. A store of format 1 or 2 opens as it is."""
        objects = objects_at(location, options)
        log = Log(objects)
        if objects.local_root is not None and not log.exists() and is_legacy(objects.local_root):
            return cls(objects, read_legacy(objects.local_root), legacy=True)
        return cls(objects, log.newest())

    # --- what the handle's generation holds -------------------------------------------------------

    @property
    def url(self) -> str:
        """The store's location as given."""
        return self._objects.url

    @property
    def objects(self) -> Objects:
        return self._objects

    @property
    def format(self) -> int:
        """3, or 2 for a store not upgraded yet (its first write upgrades it)."""
        return 2 if self._legacy else 3

    @property
    def region(self) -> str:
        return self._current.metadata.region

    @property
    def version(self) -> int:
        """The number of the version whose function the state is laid out by."""
        return self._current.layout_version.version

    @property
    def function_digest(self) -> str:
        return self._current.layout_version.function_digest

    @property
    def n_channels(self) -> int:
        return self._current.layout_version.n_channels

    @property
    def layout(self) -> Layout:
        """Key column and type, slot bits, slot groups, schema and merge (``repart.state.files.Layout``)."""
        return self._current.layout

    @property
    def slot_bits(self) -> int:
        return self.layout.slot_bits

    @property
    def slot_groups(self) -> int:
        return self.layout.slot_groups

    @property
    def key_type(self) -> KeyType:
        return self.layout.key_type

    @property
    def key_col(self) -> str:
        return self.layout.key_col

    @property
    def schema(self) -> pa.Schema:
        """The user's columns (without ``_slot``)."""
        return self.layout.schema

    @property
    def merge(self) -> dict[str, str] | None:
        """The merge of a mergeable store (each state column with its operation), else None."""
        return None if self.layout.merge is None else dict(self.layout.merge)

    @property
    def generation(self) -> int:
        return self._current.generation

    @property
    def applied_plans(self) -> tuple[int, ...]:
        """The ids of the plans applied to this store, oldest first."""
        return tuple(plan_id for plan_id, _ in self._current.applied_plans)

    @property
    def last_batch(self) -> AbsorbedBatch | None:
        """The last batch a commit absorbed into the state (None before the first)."""
        return self._current.batch

    def absorbed(self, batch_id: int) -> bool:
        """Whether batch ``batch_id`` is in the state already: batch ids grow, so every id up to the
        last absorbed one is."""
        number = check_version(batch_id, "batch_id")
        return self._current.batch is not None and number <= self._current.batch.batch_id

    def all_files(self) -> tuple[FileEntry, ...]:
        """Every entry of the handle's generation, by channel."""
        return self._current.files

    def files(self, channel: int) -> list[FileEntry]:
        """The entries of ``channel`` in the handle's generation."""
        self._check_channel(channel)
        return [entry for entry in self._current.files if entry.channel == channel]

    def refreshed(self) -> StateStore:
        """This handle moved to the store's newest generation."""
        if not self._legacy:
            self._current = Log(self._objects).newest()
        return self

    # --- reading -------------------------------------------------------------------------------------

    def read_channel(self, channel: int, columns: Sequence[str] | None = None) -> pa.Table:
        """The state of ``channel``, one row per key (the user's columns, or ``columns`` of them): its
        base files and deltas resolved (module docstring)."""
        names = list(self.schema.names if columns is None else columns)
        unknown = [name for name in names if name not in self.schema.names]
        if unknown:
            raise InvalidInput("columns", f"must be state columns {self.schema.names}, got {unknown}")
        entries = self.files(channel)
        layout = self.layout
        if not entries:
            return pa.Table.from_batches([], schema=self.schema).select(names)  # not empty_table(): pandas
        if all(entry.kind == "base" for entry in entries):
            return pa.concat_tables([read_entry(self._objects, entry, layout, names) for entry in entries])
        file_columns = [name for name in layout.file_schema.names if name != "_slot"]
        tables = [read_entry(self._objects, entry, layout, file_columns) for entry in entries]
        seqs = np.concatenate(
            [
                np.full(table.num_rows, entry.seq, np.int64)
                for entry, table in zip(entries, tables, strict=True)
            ]
        )
        return resolved(pa.concat_tables(tables), seqs, layout).select(names)

    def read_keys(self, channel: int, keys: pa.Array | pa.ChunkedArray) -> pa.Table:
        """The state of ``keys`` on ``channel``, one row per key that has state (the user's columns):
        only the rows of those keys are read (``repart.state.files.read_keyed``), then resolved."""
        entries = self.files(channel)
        layout = self.layout
        if not entries or len(keys) == 0:
            return pa.Table.from_batches([], schema=self.schema)
        value_set = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        value_set = value_set.cast(layout.schema.field(layout.key_col).type)
        tables = [read_keyed(self._objects, entry, layout, value_set) for entry in entries]
        seqs = [
            np.full(table.num_rows, entry.seq, np.int64) for entry, table in zip(entries, tables, strict=True)
        ]
        rows = pa.concat_tables(tables)
        return resolved(
            rows.select([n for n in rows.column_names if n != "_slot"]), np.concatenate(seqs), layout
        )

    def read(self) -> pa.Table:
        """The whole state with a ``channel`` (int32) column: per channel, one row per key."""
        with ThreadPoolExecutor(_READ_THREADS) as pool:  # pyarrow reads without the GIL
            tables = list(pool.map(self.read_channel, range(self.n_channels)))
        parts = [
            table.append_column(CHANNEL_COLUMN, pa.array(np.full(table.num_rows, channel, np.int32)))
            for channel, table in enumerate(tables)
        ]
        return pa.concat_tables(parts)

    def read_merged(self, merge: MergeColumns | Merge | None = None) -> pa.Table:
        """The whole state with one row per key (the user's columns, no ``channel``).

        In split mode a split key has one partial row on each channel it was routed to; ``merge``
        merges them: a ``repart.protocol.merge.MergeSpec`` (each column's sum, count, min or max; see
        ``repart.state.merge``) or a function from the partial rows of any keys to one row per key. A
        mergeable store merges by its own merge when none is given. A key with one row keeps it
        unchanged under a spec. InvalidInput ``merge`` when a spec does not fit the state's columns, or
        a function returns another schema, several rows for one key, or other keys than it was given.
        """
        with ThreadPoolExecutor(_READ_THREADS) as pool:
            parts = list(pool.map(self.read_channel, range(self.n_channels)))
        table = pa.concat_tables(parts)
        merge = merge or StoreMerge.of(self.layout)
        if merge is None:
            raise InvalidInput(
                "merge", "must be given: the store is not mergeable, so it has no merge of its own"
            )
        return merged(table, merge, self.key_col)

    def read_bytes(self, channel: int) -> int:
        """The bytes ``read_channel(channel)`` fetches: whole files, and of a file filtered for this
        channel (after a migration, until compaction) its footer and the row groups holding its slots."""
        return sum(read_bytes(self._objects, entry, self.layout) for entry in self.files(channel))

    def rows(self) -> int:
        """The number of rows the generation's files hold for readers (deltas included)."""
        return sum(entry.rows for entry in self._current.files)

    def checksum(self) -> int:
        """The order-independent checksum of every row the generation lists (``repart.state.checksum``),
        from its entries; ``verify`` recomputes it from the data."""
        total = 0
        for entry in self._current.files:
            total = add_checksums(total, entry.checksum)
        return total

    def verify(self) -> None:
        """Read every file and check it against its entry (rows, checksum, slots); Corrupt naming the
        first file that differs."""
        damaged = self.damaged_files()
        if damaged:
            raise damaged[0]

    def damaged_files(self) -> list[Corrupt]:
        """Every entry of the handle's generation whose file is missing, unreadable or differs from it
        (rows, checksum, slots), as one ``Corrupt`` each naming the file, in the generation's order."""
        damaged = []
        for entry in self._current.files:
            try:
                read_verified(self._objects, entry, self.layout)
            except Corrupt as error:
                damaged.append(error)
        return damaged

    # --- writing -------------------------------------------------------------------------------------

    def write(self, channel: int, rows: pa.Table, *, kind: FileKindName = "delta") -> list[FileEntry]:
        """Write ``rows`` of ``channel`` (the user's columns; in a general store ``_deleted`` marks
        tombstones) as new data files, for ``commit``: a delta (one file) or base files (one per slot
        group, for a channel's first state). Runs on executors; nothing is visible until a commit."""
        self._check_channel(channel)
        return write_channel_files(self._objects, channel, rows, self.layout, kind=kind)

    def commit(
        self,
        added: Mapping[int, Sequence[FileEntry]],
        *,
        version: int,
        function_digest: str,
        n_channels: int,
        batch: AbsorbedBatch | None = None,
    ) -> StateStore:
        """A new generation in which each channel of ``added`` also lists the given files (``write``).
        Returns this handle, moved to the new generation.

        ``version``, ``function_digest`` and ``n_channels`` name the layout the files were written in;
        it must be the store's: a job must apply the migration plan before it writes under a new
        version. The files must exist and have the store's schema. ``batch``, when given, is recorded as
        the batch this generation absorbs; a batch the store absorbed already is refused (Conflict:
        another run of the batch committed it first), with nothing committed.
        """
        require_channels = check_n_channels(n_channels)
        current = self._writable()
        if require_channels != current.layout_version.n_channels:
            raise InvalidInput(
                "n_channels",
                f"must be the store's: version {version} has N={n_channels} channels but the store at "
                f"{self.url} is laid out for {current.layout_version.n_channels} channels; apply the "
                "migration plan first",
            )
        if (version, function_digest) != (
            current.layout_version.version,
            current.layout_version.function_digest,
        ):
            raise InvalidInput(
                "version",
                f"must be the store's: version {version} (digest {str(function_digest)[:12]}) is not "
                f"the layout of the store: it holds version {current.layout_version.version} (digest "
                f"{current.layout_version.function_digest[:12]}, generation {current.generation}); apply "
                "the migration plan first",
            )
        if batch is not None and current.batch is not None and batch.batch_id <= current.batch.batch_id:
            raise Conflict(
                f"batch {batch.batch_id} is already in the state store at {self.url}: generation "
                f"{current.generation} holds batches up to {current.batch.batch_id}"
            )
        entries = self._checked_additions(added, current)
        change = Change("write", add=tuple(entries), batch=batch, reads_state=not current.layout.mergeable)
        self._current = Log(self._objects).commit(current, change)
        return self

    def apply(
        self,
        plan: MigrationPlan,
        *,
        plan_id: int,
        region: str,
        from_version: int,
        to_version: int,
        merge: MergeColumns | Merge | None = None,
    ) -> ApplyResult:
        """Apply ``plan`` (from version ``from_version`` to ``to_version`` of ``region``): move exactly
        the rows that change channel, verify, and commit a new generation (module docstring).

        A plan with consolidations (split mode) merges the partials of a split key that meet on its home
        with ``merge`` (by default a mergeable store's own), the region's ``MergeSpec`` or merge
        function as in ``read_merged``; it is needed only then. A spec is checked against the state's
        columns whatever the plan.

        A plan id already applied is a no-op (``already_applied=True``). A plan of another region, of a
        version or function other than the store's, or of another key type or slot bits is refused
        (InvalidInput) with nothing committed, as is a ``merge`` that a plan needs and that is missing,
        does not fit the state's columns or returns another schema; a data file it must read that is
        missing or damaged is Corrupt, naming the file, with nothing committed either.
        """
        started = time.perf_counter()
        check_version(plan_id, "plan_id")
        check_version(from_version, "from_version")
        check_version(to_version, "to_version")
        if not isinstance(plan, MigrationPlan):
            raise InvalidInput("plan", f"must be a MigrationPlan, got {type(plan).__name__}")
        current = self._writable(refresh=True)
        if region != current.metadata.region:
            raise InvalidInput(
                "region",
                f"must be the store's: plan {plan_id} is for region {region!r} but the store at "
                f"{self.url} holds region {current.metadata.region!r}",
            )
        applied = dict(current.applied_plans)
        if plan_id in applied:
            if applied[plan_id] != plan.digest:
                raise InvalidInput(
                    "plan",
                    f"must be the content applied under its id: plan {plan_id} was applied to this store "
                    f"with another content (digest {applied[plan_id][:12]}, given {plan.digest[:12]})",
                )
            return ApplyResult(plan_id, 0, 0, 0, 0, current.generation, True, time.perf_counter() - started)
        self._check_plan(plan, plan_id, from_version, current)
        layout = current.layout
        merge = merge or StoreMerge.of(layout)
        if merge is not None and not callable(merge):  # a spec: check it fits the state's columns
            merged(pa.Table.from_batches([], schema=layout.schema), merge, layout.key_col)
        migration = migrate_files(self._objects, current.files, plan, layout, merge)
        removed, added = _difference(current.files, migration.files)
        change = Change(
            "apply",
            layout_version=LayoutVersion(to_version, plan.target_digest, plan.target_n_channels),
            remove=removed,
            add=added,
            plan=(plan_id, plan.digest),
        )
        self._current = Log(self._objects).commit(current, change)
        document = self._objects.size(commit_path(self._current.generation)) or 0
        return ApplyResult(
            plan_id=plan_id,
            moved_rows=migration.moved_rows,
            moved_bytes=migration.moved_bytes,
            rewritten_files=migration.rewritten_files,
            relocated_files=migration.relocated_files,
            generation=self.generation,
            already_applied=False,
            seconds=time.perf_counter() - started,
            filtered_files=migration.filtered_files,
            taken_rows=migration.taken_rows,
            written_bytes=sum(entry.bytes for entry in migration.written) + document,
        )

    def compact(self, policy: CompactionPolicy | None = None) -> CompactResult:
        """Compact the channels that are due (``repart.state.compact``: deltas folded into base files,
        filtered rows dropped), verify, and commit a new generation with the same state; move this
        handle to it. When no channel is due nothing is written (``compacted=False``), so a pipeline
        may call it between every two batches.

        Conflict when another writer's commit removed a file this compaction replaces (compact later);
        Corrupt names a damaged file, with nothing committed.
        """
        started = time.perf_counter()
        policy = policy or CompactionPolicy()
        current = self._writable(refresh=True)
        before = len(current.files)
        due = policy.due(current.files)
        if not due:
            return CompactResult(
                False, (), 0, 0, 0, before, before, current.generation, time.perf_counter() - started
            )
        compaction = compact_files(self._objects, current.files, due, current.layout)
        removed, added = _difference(current.files, compaction.files)
        change = Change("compact", remove=removed, add=added)
        self._current = Log(self._objects).commit(current, change)
        return CompactResult(
            compacted=True,
            channels=tuple(due),
            replaced_files=compaction.replaced_files,
            written_files=len(compaction.written),
            dropped_rows=compaction.dropped_rows,
            files_before=before,
            files_after=len(self._current.files),
            generation=self.generation,
            seconds=time.perf_counter() - started,
        )

    def vacuum(
        self, retain: timedelta | float = DEFAULT_RETENTION, *, now: datetime | None = None
    ) -> VacuumResult:
        """Delete the objects no recent generation lists (module docstring): data files, commit
        documents and checkpoints older than the retention time ``retain`` (a timedelta or seconds,
        in [0, 10 years]) that neither the newest generation nor any generation committed within it
        needs. InvalidInput ``retain`` out of range."""
        seconds = retention_seconds(retain)
        if self._legacy:
            return VacuumResult((), 0, seconds)
        moment = now or datetime.now(UTC)
        cutoff = moment - timedelta(seconds=seconds)
        log = Log(self._objects)
        newest = self._current = log.newest()
        listed, oldest_needed = _recent_listings(log, newest, cutoff)
        deleted = []
        objects = self._objects.listing()
        for info in objects:
            if info.modified >= cutoff:
                continue
            if is_temporary(info.path):  # a killed local writer's temporary (under _log/ or data/)
                deleted.append(info.path)
            elif info.path.startswith(DATA_PREFIX) or info.path.startswith("channel="):
                if info.path not in listed:
                    deleted.append(info.path)
            elif info.path.startswith(LOG_PREFIX):
                number = log_number(info.path)
                if number is not None and number < oldest_needed:
                    deleted.append(info.path)
        self._objects.delete(deleted)
        return VacuumResult(tuple(sorted(deleted)), len(objects) - len(deleted), seconds)

    def evolve(self, schema: pa.Schema, merge: Mapping[str, str] | None = None) -> StateStore:
        """Give the state the user's columns ``schema``: the store's columns as they are, then new
        nullable columns. Returns this handle, moved to the store's newest generation (a generation
        that evolved it, when there are new columns).

        A ``schema`` equal to the store's writes nothing. New columns are committed as one generation
        that changes the store's layout and reads or writes no data file: the files written before
        it lack the new columns, and every reader returns them as nulls of their type for those rows;
        batches write them from then on. A mergeable store needs ``merge``, each new column's
        operation (sum, count, min or max); it may repeat the other columns' operations, unchanged.
        Its merge skips nulls (sum, min and max of the values that are not null; a count's partials
        are summed, so a key counts what was written since the column was added), and a key with no
        value in a column keeps a null there. A store of format 1 or 2 is upgraded first (its first
        write).

        Any other change (a column removed, renamed or moved, a column's type or nullability
        changed, the key column's included, or a new column that is not nullable) is InvalidInput
        ``schema`` naming the column; a merge that leaves out a new column, changes a column's
        operation or names no state column is InvalidInput ``merge``, as is any merge for a store
        that is not mergeable; nothing is written then. Like a migration, an evolution changes the
        layout, so it is a Conflict when another writer committed since the newest generation was
        read, and a commit prepared before it is a Conflict too: a job re-opens the store and writes
        the new columns.
        """
        current = self.refreshed()._current
        layout = current.layout.evolved(schema, merge)
        if layout is current.layout:
            return self
        current = self._writable()
        change = Change("evolve", metadata=Metadata(current.metadata.region, layout))
        self._current = Log(self._objects).commit(current, change)
        return self

    def upgrade(self) -> bool:
        """Convert a store of format 1 or 2 to format 3 by one verified commit that lists its files as
        they are (no data file is copied); False when it is format 3 already. Corrupt naming a damaged
        file, with nothing committed."""
        if not self._legacy:
            return False
        self._current = self._writable()
        return True

    # --- internals -----------------------------------------------------------------------------------

    def _writable(self, *, refresh: bool = False) -> Generation:
        """The generation to write on: a legacy store upgraded first; with ``refresh``, the newest."""
        if self._legacy:
            legacy = (
                read_legacy(self._objects.local_root)
                if self._objects.local_root is not None
                else self._current
            )
            self.verify_generation(legacy)
            change = Change(
                "upgrade",
                metadata=legacy.metadata,
                layout_version=legacy.layout_version,
                add=tuple(legacy.files),
                batch=legacy.batch,
                applied_plans=legacy.applied_plans,
            )
            self._current = Log(self._objects).commit(None, change)
            self._legacy = False
            return self._current
        if refresh:
            self._current = Log(self._objects).newest()
        return self._current

    def verify_generation(self, generation: Generation) -> None:
        """Read every file of ``generation`` and check it against its entry; Corrupt on the first."""
        for entry in generation.files:
            read_verified(self._objects, entry, generation.layout)

    def _check_channel(self, channel: int) -> None:
        check("channel", channel, Interval(int, 0, self.n_channels - 1))

    def _check_plan(self, plan: MigrationPlan, plan_id: int, from_version: int, current: Generation) -> None:
        """InvalidInput unless ``plan`` starts from the generation the store holds, in its layout."""
        held = current.layout_version
        holds = (
            f"the store at {self.url} holds version {held.version} (generation {current.generation}, "
            f"digest {held.function_digest[:12]}, N={held.n_channels})"
        )
        if from_version != held.version:
            raise InvalidInput(
                "from_version",
                f"must be the store's: plan {plan_id} starts from version {from_version} but {holds}",
            )
        if plan.source_digest != held.function_digest or plan.source_n_channels != held.n_channels:
            raise InvalidInput(
                "plan",
                f"must start from the store's function: plan {plan_id} starts from function "
                f"{plan.source_digest[:12]} (N={plan.source_n_channels}) but {holds}",
            )
        layout = current.layout
        if plan.slot_bits != layout.slot_bits:
            raise InvalidInput(
                "plan",
                f"must have the store's slot_bits {layout.slot_bits}: plan {plan_id} has {plan.slot_bits}",
            )
        if plan.key_type not in (None, layout.key_type):
            raise InvalidInput(
                "plan",
                f"must move the store's {layout.key_type!r} keys: "
                f"plan {plan_id} moves {plan.key_type!r} keys",
            )

    def _checked_additions(
        self, added: Mapping[int, Sequence[FileEntry]], current: Generation
    ) -> list[FileEntry]:
        entries: list[FileEntry] = []
        n_channels = current.layout_version.n_channels
        listed = {entry.path for entry in current.files}
        held = {entry.channel for entry in current.files}
        for channel, files in added.items():
            check("added.channel", channel, Interval(int, 0, n_channels - 1))
            field = f"added[{channel}]"
            for entry in files:
                if not isinstance(entry, FileEntry) or entry.channel != channel:
                    raise InvalidInput(field, f"must hold file entries of channel {channel}, got {entry!r}")
                if entry.filter is not None or entry.seq:
                    raise InvalidInput(
                        field, f"must list files as write returns them, without a filter or seq: {entry.path}"
                    )
                if entry.path in listed or entry.path in {added_entry.path for added_entry in entries}:
                    raise InvalidInput(
                        field, f"must list new files, each once: {entry.path} is listed already"
                    )
                if entry.kind == "base" and channel in held:
                    raise InvalidInput(
                        field,
                        f"must hold deltas: channel {channel} has state, and base files are for a channel's "
                        f"first state only ({entry.path})",
                    )
                if entry.slot_group is not None:
                    check(
                        f"{field}.slot_group",
                        entry.slot_group,
                        Interval(int, 0, current.layout.slot_groups - 1),
                    )
                size = self._objects.size(entry.path)
                if size is None:
                    raise InvalidInput(field, f"must list written files: {entry.path} does not exist")
                if size != entry.bytes:
                    raise InvalidInput(
                        field,
                        f"must list written files of the size their entry states: {entry.path} has "
                        f"{size} bytes, the entry {entry.bytes}",
                    )
                schema = file_schema(self._objects, entry.path)
                if not current.layout.matches(schema):
                    raise InvalidInput(
                        field,
                        f"must list files with the store's schema: {entry.path} has "
                        f"{', '.join(f'{f.name}: {f.type}' for f in schema)}",
                    )
                entries.append(entry)
        return entries


def retention_seconds(retain: object) -> float:
    """A retention time (a timedelta, or seconds) as seconds in [0, 10 years]; InvalidInput ``retain``
    otherwise."""
    seconds = retain.total_seconds() if isinstance(retain, timedelta) else retain
    return float(check("retain", seconds, RETENTION_SECONDS))


def check_version(value: object, name: str = "version") -> int:
    """A version, plan or batch id: an integer ≥ 0."""
    return int(check(name, value, Interval(int, 0, None)))


def _require_empty(objects: Objects) -> None:
    """InvalidInput unless ``objects`` holds no store (and, for a local directory, nothing at all)."""
    if any(not is_temporary(info.path) for info in objects.listing(LOG_PREFIX)):
        raise InvalidInput("state", f"already holds a state store: {objects.url}; open it instead")
    _refuse_data_without_log(objects)
    root = objects.local_root
    if root is None:
        return
    if is_legacy(root):
        read_legacy(root)  # Corrupt when its manifest is missing: creating over it would lose state
        raise InvalidInput("state", f"already holds a state store (format 2): {objects.url}; open it instead")
    if root.exists() and any(path.name not in ("data", "_log") for path in root.iterdir()):
        raise InvalidInput("state", f"must be a new or empty directory: {objects.url} holds other files")


def _refuse_data_without_log(objects: Objects) -> None:
    """Corrupt when the location holds data files but no commit log: the log was lost, and a store
    created over it would see its data as unlisted and vacuum it."""
    found = [info.path for info in objects.listing(DATA_PREFIX) if not is_temporary(info.path)]
    if found:
        raise Corrupt(
            f"the location holds {len(found)} data files, such as {found[0]}, but no commit log: the log "
            "was lost; restore it from a backup rather than create a store over the data",
            path=LOG_PREFIX,
        )


def _difference(
    before: Sequence[FileEntry], after: Sequence[FileEntry]
) -> tuple[tuple[tuple[str, int], ...], tuple[FileEntry, ...]]:
    """The actions that turn listing ``before`` into ``after``: the entries to remove (by file and
    channel: gone, or changed, as a filter widened) and the entries to add (new, or changed)."""
    kept = set(before) & set(after)
    removed = tuple(sorted(entry.identity for entry in before if entry not in kept))
    added = tuple(entry for entry in after if entry not in kept)
    return removed, added


def _recent_listings(log: Log, newest: Generation, cutoff: datetime) -> tuple[set[str], int]:
    """The data files a reader may still need (module docstring): those listed by the newest
    generation, by every generation committed after ``cutoff``, and by the one that was newest at the
    cutoff (a reader may have started on it just before); and the first log document needed to read
    those generations (the checkpoint they replay from, or 0)."""
    recent = [
        number
        for info in log.objects.listing(LOG_PREFIX)
        if info.modified >= cutoff and (number := log_number(info.path)) is not None
    ]
    first = max(min(recent, default=newest.generation + 1) - 1, 0)
    start = log.checkpoint_at_or_before(first)
    generation = start
    listed = {entry.path for entry in newest.files}
    if start is not None and start.generation >= first:
        listed.update(entry.path for entry in start.files)
    for commit in log.commits_after(-1 if start is None else start.generation):
        generation = applied(generation, commit)
        if commit.generation >= first:
            listed.update(entry.path for entry in generation.files)
    return listed, 0 if start is None else start.generation
