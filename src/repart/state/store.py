"""The keyed state store: Parquet per channel and slot group, generations, an atomic manifest (DESIGN §9).

On disk, under ``ROOT``:

- ``channel=<c>/<uuid>.parquet``: immutable data files (``repart.state.files``), one channel and
  one slot group each, sorted by slot, with a ``_slot`` column;
- ``generations/<gen:08d>.json``: a generation: the files it consists of (path, channel, slot group,
  rows, bytes, checksum, and a slot filter where the file holds rows of slots the entry no longer
  owns: ``repart.state.filters``) and the layout they are in: region, version number, function
  digest, channel count, slot bits, key type and column, the Arrow schema, slot groups, the plans
  applied so far, and the last batch the state absorbed (``repart.state.batches``: its id and
  per-channel measurements);
- ``MANIFEST``: ``{"format", "generation", "sha256"}``, the current generation and the SHA-256 of its
  document, replaced atomically (temporary file, ``fsync``, rename, ``fsync`` of the directory).

A generation becomes reachable only when ``MANIFEST`` names it, after its document and all its files
are durable, so a reader (or a process killed at any point) sees the old generation or the new one,
never a mix. Files a generation shares with the previous one are listed by both; ``vacuum`` removes
what no recent generation lists, including the leftovers of an apply that was killed.

Writers (``commit``, ``apply``, ``compact``, ``vacuum``) hold an exclusive lock on ``ROOT/.lock``;
``compact`` does not wait for it: another process writing is a ``Conflict``. ``apply`` takes a
migration plan (DESIGN §6) from the version the store holds to the next one, moving only the rows
that change channel (``repart.state.migrate``: files that lose a few slots get a slot filter instead
of being rewritten), and records the plan's id: applying it again is a no-op. ``compact`` rewrites
the files of the channels whose filtered rows or file count pass a threshold
(``repart.state.compact``), one more generation with the same content.

A job writes a channel's state with ``write_channel_files`` (on executors) and ``commit``; a commit
under a version other than the store's is refused, so no state is ever written in a layout the store
is not in. A commit may name the batch it absorbs: the generation records the batch's id,
and ``absorbed(batch_id)`` tells a job that runs the batch again that it is in the state already
(exactly-once batches, like Delta Lake's transaction identifiers). A commit whose handle is behind
the manifest goes ahead when the manifest's generation holds what the handle's did: the same rows and
checksum per channel, layout, plans and batch. Plans and batches only accumulate, so no generation in
between can have changed them and changed them back: what lies between is compactions. The commit
replaces whole channels, so it loses nothing.

Formats: the manifest and generation documents are format 2 (entries may carry a filter); format 1
documents, written before filters existed, are read as they are (their entries have none), so an
older store opens and its next generation is written in format 2. A format this code does not know
is refused naming it (``Corrupt``: the store cannot be read by this version).

Errors (DESIGN §12.4): ``InvalidInput`` names the argument at fault (a plan of another region or
generation, a layout that does not match the version); ``Corrupt`` names the damaged file (a missing
or truncated data file, a missing or unreadable manifest or generation document, rows or a checksum
that do not match); ``Conflict`` when another writer moved the store on; ``NotFound`` when there is no
store at all.

A ``StateStore`` object is a handle on one generation: plain data, picklable, so it can be shipped
to Spark executors to read a channel. ``commit`` and ``apply`` move the handle to the new generation.
"""

from __future__ import annotations

import base64
import fcntl
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from repart.errors import Conflict, Corrupt, InvalidInput, NotFound
from repart.migration.plan import MigrationPlan
from repart.partitioning.consistent import check_n_channels
from repart.partitioning.documents import (
    canonical_json,
    parse_json,
    require_int,
    require_list,
    require_object,
    require_row,
    sha256_hex,
)
from repart.partitioning.domain import KeyType
from repart.protocol.files import fsync_path, write_durably
from repart.state.batches import AbsorbedBatch
from repart.state.checksum import add_checksums
from repart.state.compact import (
    DEFAULT_MAX_FILES_PER_GROUP,
    DEFAULT_MAX_FILTERED_SHARE,
    CompactionPolicy,
    compact_files,
)
from repart.state.files import (
    CHANNEL_COLUMN,
    FileEntry,
    Layout,
    channel_totals,
    checked_layout,
    read_entry,
    read_verified,
    write_channel_files,
)
from repart.state.merge import Merge, MergeColumns, merged
from repart.state.migrate import migrate_files
from repart.validation import REGION_NAME, Options, check

__all__ = ["ApplyResult", "CompactResult", "FileEntry", "StateStore", "write_channel_files"]

FORMAT_VERSION = 2
#: The document formats this code reads: 1 (before slot filters) and 2.
READABLE_FORMATS = (1, 2)
MANIFEST = "MANIFEST"
GENERATIONS = "generations"
LOCK = ".lock"
DEFAULT_SLOT_GROUPS = 64
_READ_THREADS = 8
_MANIFEST_FIELDS = ("format", "generation", "sha256")
_GENERATION_FIELDS = (
    "format",
    "generation",
    "region",
    "version",
    "function_digest",
    "n_channels",
    "slot_bits",
    "slot_groups",
    "key_type",
    "key_col",
    "schema",
    "applied_plans",
    "files",
)
_OPTIONAL_GENERATION_FIELDS = ("batch",)
_DIGEST = re.compile(r"[0-9a-f]{64}")
_GENERATION_NAME = re.compile(r"([0-9]{8})\.json")


@dataclass(frozen=True)
class ApplyResult:
    """What ``StateStore.apply`` did: rows that changed channel and the bytes written or linked for
    them; files dropped and written anew (rewritten), given a slot filter (filtered) and hard-linked
    into another channel (relocated); rows taken out of their files (the rows of the slots a filter
    now hides, and of the files split); the generation it committed (or found, when the plan had been
    applied already) and the wall time."""

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


@dataclass(frozen=True)
class CompactResult:
    """What ``StateStore.compact`` did: whether it committed a generation (``compacted``: some channel
    was due), the channels it compacted, the files it replaced and wrote, the filtered rows it left
    behind, the store's file count before and after, the store's generation and the wall time."""

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
class _Generation:
    """One generation document (module docstring), parsed and checked."""

    generation: int
    region: str
    version: int
    function_digest: str
    n_channels: int
    layout: Layout
    applied_plans: tuple[tuple[int, str], ...]
    files: tuple[FileEntry, ...]
    batch: AbsorbedBatch | None = None

    def to_json(self) -> str:
        schema = base64.b64encode(self.layout.schema.serialize().to_pybytes()).decode("ascii")
        batch = {} if self.batch is None else {"batch": self.batch.to_dict()}
        return canonical_json(
            {
                **batch,
                "format": FORMAT_VERSION,
                "generation": self.generation,
                "region": self.region,
                "version": self.version,
                "function_digest": self.function_digest,
                "n_channels": self.n_channels,
                "slot_bits": self.layout.slot_bits,
                "slot_groups": self.layout.slot_groups,
                "key_type": self.layout.key_type,
                "key_col": self.layout.key_col,
                "schema": schema,
                "applied_plans": [list(pair) for pair in self.applied_plans],
                "files": [entry.to_dict() for entry in self.files],
            }
        )

    @classmethod
    def from_json(cls, text: str, name: str) -> _Generation:
        """Parse a generation document; ``Corrupt`` naming the file ``name`` and the field."""
        try:
            document = require_object(
                parse_json(text, name), "generation", _GENERATION_FIELDS, _OPTIONAL_GENERATION_FIELDS
            )
            _check_format(document["format"], name)
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(document["schema"], validate=True)))
            layout = checked_layout(
                document["key_col"],
                document["key_type"],
                document["slot_bits"],
                document["slot_groups"],
                schema,
            )
            n_channels = check_n_channels(document["n_channels"])
            files = tuple(
                _entry_in_layout(FileEntry.from_dict(entry, f"files[{index}]"), layout, n_channels, index)
                for index, entry in enumerate(require_list(document["files"], "files"))
            )
            if len({entry.path for entry in files}) != len(files):
                raise InvalidInput("files", "must list each file once; a path appears twice")
            plans = require_list(document["applied_plans"], "applied_plans")
            applied = tuple(
                (require_int(plan_id, "applied_plans.id"), _checked_digest(digest, "applied_plans.digest"))
                for plan_id, digest in (
                    require_row(row, "applied_plans[]", ("id", "digest")) for row in plans
                )
            )
            batch = document.get("batch")
            return cls(
                generation=require_int(document["generation"], "generation"),
                region=_checked_region(document["region"]),
                version=require_int(document["version"], "version"),
                function_digest=_checked_digest(document["function_digest"], "function_digest"),
                n_channels=n_channels,
                layout=layout,
                applied_plans=applied,
                files=files,
                batch=None if batch is None else AbsorbedBatch.from_dict(batch),
            )
        except (ValueError, TypeError, pa.ArrowException) as error:  # InvalidInput is a ValueError
            raise Corrupt(f"not a valid generation document: {error}", path=name) from None


class StateStore:
    """A handle on the current generation of a keyed state store (module docstring; DESIGN §9).

    Build one with ``StateStore.create`` (an empty store) or ``StateStore.open`` (an existing one).
    """

    def __init__(self, root: Path, current: _Generation) -> None:
        """Internal: use ``create`` or ``open``."""
        self._root = root
        self._current = current

    @classmethod
    def create(
        cls,
        root: str | os.PathLike[str],
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
    ) -> StateStore:
        """An empty store (generation 0, no files) in ``root``, which must not exist or be empty (or
        hold only the leftovers of a ``create`` that was killed before it wrote the manifest).
        InvalidInput for a bad argument or a ``root`` that holds something else (a store too: open
        it); Corrupt for a store whose MANIFEST is missing (creating over it would lose its state).

        ``schema`` holds the user's columns: the key column (string for ``str`` keys, a signed integer type
        for ``int`` keys) and state columns of fixed-width or string/binary types; ``_slot`` and
        ``channel`` are reserved. ``slot_groups`` is a power of two in [1, 2^slot_bits].
        """
        current = _Generation(
            generation=0,
            region=_checked_region(region),
            version=require_int(version, "version"),
            function_digest=_checked_digest(function_digest, "function_digest"),
            n_channels=check_n_channels(n_channels),
            layout=checked_layout(key_col, key_type, slot_bits, slot_groups, schema),
            applied_plans=(),
            files=(),
        )
        path = Path(root)
        if path.exists() and not _is_fresh(path):
            if (path / MANIFEST).exists():
                raise InvalidInput("root", f"already holds a state store: {str(path)!r}; open it instead")
            _refuse_a_store_without_manifest(path)
            raise InvalidInput("root", f"must be a new or empty directory: {str(path)!r} holds other files")
        (path / GENERATIONS).mkdir(parents=True, exist_ok=True)
        fsync_path(path)
        store = cls(path, current)
        with _locked(path):
            store._publish(current)
        return store

    @classmethod
    def open(cls, root: str | os.PathLike[str]) -> StateStore:
        """The store in ``root`` at the generation its MANIFEST names. NotFound when ``root`` holds no
        store (create one); Corrupt naming the file when the manifest is missing from a store that
        has generations or data, is unreadable, or does not match its generation document."""
        path = Path(root)
        return cls(path, _load(path))

    @property
    def root(self) -> Path:
        return self._root

    @property
    def region(self) -> str:
        return self._current.region

    @property
    def version(self) -> int:
        """The number of the version whose function the state is laid out by."""
        return self._current.version

    @property
    def function_digest(self) -> str:
        return self._current.function_digest

    @property
    def n_channels(self) -> int:
        return self._current.n_channels

    @property
    def slot_bits(self) -> int:
        return self._current.layout.slot_bits

    @property
    def slot_groups(self) -> int:
        return self._current.layout.slot_groups

    @property
    def key_type(self) -> KeyType:
        return self._current.layout.key_type

    @property
    def key_col(self) -> str:
        return self._current.layout.key_col

    @property
    def schema(self) -> pa.Schema:
        """The user's columns (without ``_slot``)."""
        return self._current.layout.schema

    @property
    def layout(self) -> Layout:
        """Key column and type, slot bits, slot groups and schema together (``state_files.Layout``)."""
        return self._current.layout

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
        last absorbed one is (module docstring)."""
        number = require_int(batch_id, "batch_id")
        return self._current.batch is not None and number <= self._current.batch.batch_id

    def files(self, channel: int) -> list[FileEntry]:
        """The files of ``channel`` in the current generation."""
        self._check_channel(channel)
        return [entry for entry in self._current.files if entry.channel == channel]

    def read_channel(self, channel: int, columns: Sequence[str] | None = None) -> pa.Table:
        """The state of ``channel`` (the user's columns, or ``columns`` of them) as one table: the rows
        its files' entries let through (a filtered file's hidden slots are dropped)."""
        names = list(self.schema.names if columns is None else columns)
        unknown = [name for name in names if name not in self.schema.names]
        if unknown:
            raise InvalidInput("columns", f"must be state columns {self.schema.names}, got {unknown}")
        entries = self.files(channel)
        if not entries:
            return pa.Table.from_batches([], schema=self.schema).select(names)  # not empty_table(): pandas
        return pa.concat_tables([read_entry(self._root, entry, names) for entry in entries])

    def read(self) -> pa.Table:
        """The whole state with a ``channel`` (int32) column."""
        parts = []
        for channel in range(self.n_channels):
            table = self.read_channel(channel)
            parts.append(
                table.append_column(CHANNEL_COLUMN, pa.array([channel] * table.num_rows, pa.int32()))
            )
        return pa.concat_tables(parts)

    def read_merged(self, merge: MergeColumns | Merge) -> pa.Table:
        """The whole state with one row per key (the user's columns, no ``channel``; DESIGN §11.3).

        In split mode a split key has one partial row on each channel it was routed to; ``merge``
        merges them: a ``repart.protocol.merge.MergeSpec`` (each column's sum, min or max; see
        ``repart.state.merge``) or a function from the partial rows of any keys to one row per key.
        A key with one row keeps it unchanged under a spec. InvalidInput ``merge`` when a spec does
        not fit the state's columns, or a function returns another schema, several rows for one key,
        or other keys than it was given.
        """
        with ThreadPoolExecutor(_READ_THREADS) as pool:  # pyarrow reads without the GIL
            parts = list(pool.map(self.read_channel, range(self.n_channels)))
        return merged(pa.concat_tables(parts), merge, self.key_col)

    def rows(self) -> int:
        """The number of state rows (from the generation's entries)."""
        return sum(entry.rows for entry in self._current.files)

    def checksum(self) -> int:
        """The order-independent checksum of the whole state (``repart.state.checksum``), from the
        generation's entries; ``verify`` recomputes it from the data."""
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
        """Every file of the current generation that is missing, unreadable or differs from its entry
        (rows, checksum, slots), as one ``Corrupt`` each naming the file, in the generation's order."""
        damaged = []
        for entry in self._current.files:
            try:
                read_verified(self._root, entry, self._current.layout)
            except Corrupt as error:
                damaged.append(error)
        return damaged

    def commit(
        self,
        replaced: Mapping[int, Sequence[FileEntry]],
        *,
        version: int,
        function_digest: str,
        n_channels: int,
        batch: AbsorbedBatch | None = None,
    ) -> StateStore:
        """A new generation in which each channel of ``replaced`` holds exactly the given files
        (``write_channel_files``) and every other channel keeps its files. Returns this handle, moved
        to the new generation.

        ``version``, ``function_digest`` and ``n_channels`` name the layout the files were written in;
        it must be the store's: a job must apply the migration plan before it writes under a new
        version. The files must exist under the root and have the store's schema. ``batch``, when
        given, is recorded as the batch this generation absorbs; a batch the store absorbed already
        is refused (Conflict: another run of the batch committed it first), with nothing written.
        """
        require_int(n_channels, "n_channels", 1)
        with _locked(self._root):
            current = self._current_for_writing()
            if n_channels != current.n_channels:
                raise InvalidInput(
                    "n_channels",
                    f"must be the store's: version {version} has N={n_channels} channels but the store at "
                    f"{str(self._root)!r} is laid out for {current.n_channels} channels; apply the "
                    "migration plan first",
                )
            if (version, function_digest) != (current.version, current.function_digest):
                raise InvalidInput(
                    "version",
                    f"must be the store's: version {version} (digest {str(function_digest)[:12]}) is not "
                    f"the layout of the store: it holds version {current.version} (digest "
                    f"{current.function_digest[:12]}, generation {current.generation}); apply the "
                    "migration plan first",
                )
            if batch is not None and current.batch is not None and batch.batch_id <= current.batch.batch_id:
                raise Conflict(
                    f"batch {batch.batch_id} is already in the state store at {str(self._root)!r}: "
                    f"generation {current.generation} holds batches up to {current.batch.batch_id}"
                )
            entries = self._checked_replacement(replaced, current)
            kept = [entry for entry in current.files if entry.channel not in replaced]
            self._publish(
                replace(
                    current,
                    generation=current.generation + 1,
                    files=_sorted_files([*kept, *entries]),
                    batch=current.batch if batch is None else batch,
                )
            )
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

        A plan with consolidations (split mode, DESIGN §11.3) merges the partials of a split key that
        meet on its home with ``merge``, the region's ``MergeSpec`` or merge function as in
        ``read_merged`` (``repart.state.consolidate``); it is needed only then. A spec is checked
        against the state's columns whatever the plan.

        A plan id already applied is a no-op (``already_applied=True``). A plan of another region, of
        a version or function other than the store's, or of another key type or slot bits is refused
        (InvalidInput) with nothing written, as is a ``merge`` that a plan needs and that is missing,
        does not fit the state's columns or returns another schema; a data file it must read that is
        missing or damaged is Corrupt, naming the file, with nothing written either.
        """
        started = time.perf_counter()
        require_int(plan_id, "plan_id")
        require_int(from_version, "from_version")
        require_int(to_version, "to_version")
        if not isinstance(plan, MigrationPlan):
            raise InvalidInput("plan", f"must be a MigrationPlan, got {type(plan).__name__}")
        with _locked(self._root):
            current = self._current = _load(self._root)
            if region != current.region:
                raise InvalidInput(
                    "region",
                    f"must be the store's: plan {plan_id} is for region {region!r} but the store at "
                    f"{str(self._root)!r} holds region {current.region!r}",
                )
            applied = dict(current.applied_plans)
            if plan_id in applied:
                if applied[plan_id] != plan.digest:
                    raise InvalidInput(
                        "plan",
                        f"must be the content applied under its id: plan {plan_id} was applied to this "
                        f"store with another content (digest {applied[plan_id][:12]}, given "
                        f"{plan.digest[:12]})",
                    )
                return ApplyResult(
                    plan_id, 0, 0, 0, 0, current.generation, True, time.perf_counter() - started
                )
            self._check_plan(plan, plan_id, from_version, current)
            if merge is not None and not callable(merge):  # a spec: check it fits the state's columns
                merged(pa.Table.from_batches([], schema=current.layout.schema), merge, current.layout.key_col)
            migration = migrate_files(self._root, current.files, plan, current.layout, merge)
            self._publish(
                replace(
                    current,
                    generation=current.generation + 1,
                    version=to_version,
                    function_digest=plan.target_digest,
                    n_channels=plan.target_n_channels,
                    applied_plans=(*current.applied_plans, (plan_id, plan.digest)),
                    files=_sorted_files(migration.files),
                )
            )
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
        )

    def compact(
        self,
        *,
        max_filtered_share: float = DEFAULT_MAX_FILTERED_SHARE,
        max_files_per_group: float = DEFAULT_MAX_FILES_PER_GROUP,
    ) -> CompactResult:
        """Compact the channels that are due (``repart.state.compact``: their filters hide more than
        ``max_filtered_share`` of their files' rows, or they hold more than ``max_files_per_group``
        files per slot group), verify, and commit a new generation with the same content; move this
        handle to it. When no channel is due nothing is written (``compacted=False``), so a pipeline
        may call it between every two batches.

        InvalidInput names a threshold out of range. Conflict when another process holds the store's
        lock (it is writing: compact later; compaction never waits for a writer). Corrupt names a
        damaged file, with nothing committed.
        """
        started = time.perf_counter()
        policy = CompactionPolicy(max_filtered_share, max_files_per_group)
        with _locked(self._root, wait=False):
            current = self._current = _load(self._root)
            before = len(current.files)
            due = policy.due(current.files)
            if not due:
                seconds = time.perf_counter() - started
                return CompactResult(False, (), 0, 0, 0, before, before, current.generation, seconds)
            compaction = compact_files(self._root, current.files, due, current.layout)
            self._publish(
                replace(current, generation=current.generation + 1, files=_sorted_files(compaction.files))
            )
        return CompactResult(
            compacted=True,
            channels=tuple(due),
            replaced_files=compaction.replaced_files,
            written_files=len(compaction.written),
            dropped_rows=compaction.dropped_rows,
            files_before=before,
            files_after=len(compaction.files),
            generation=self.generation,
            seconds=time.perf_counter() - started,
        )

    def vacuum(self, keep_generations: int = 2) -> list[str]:
        """Remove what the last ``keep_generations`` generations do not list: older generation
        documents, data files no longer referenced, the leftovers of a killed writer (files and
        generation documents newer than the manifest's, temporary files). Returns the removed paths
        (relative to the root), sorted. Readers of a removed generation lose their files."""
        keep = require_int(keep_generations, "keep_generations", 1)
        removed: list[str] = []
        with _locked(self._root):
            current = self._current = _load(self._root)
            kept_numbers = range(current.generation - keep + 1, current.generation + 1)
            referenced: set[str] = set()
            for number in kept_numbers:
                document = self._root / GENERATIONS / f"{number:08d}.json"
                if document.exists():
                    generation = _Generation.from_json(document.read_text(encoding="utf-8"), str(document))
                    referenced.update(entry.path for entry in generation.files)

            def stale(path: Path) -> bool:
                match = _GENERATION_NAME.fullmatch(path.name)
                return match is None or int(match.group(1)) not in kept_numbers

            removed += _relative(self._root, filter(stale, self._root.glob(f"{GENERATIONS}/*")))
            data = _relative(self._root, self._root.glob("channel=*/*"))
            removed += [name for name in data if name not in referenced]
            removed += _relative(
                self._root, self._root.glob(f".{MANIFEST}.*")
            )  # a killed writer's temporaries
            for name in removed:
                (self._root / name).unlink()
        return sorted(removed)

    def _check_channel(self, channel: int) -> None:
        require_int(channel, "channel", 0, self.n_channels - 1)

    def _check_plan(self, plan: MigrationPlan, plan_id: int, from_version: int, current: _Generation) -> None:
        """InvalidInput unless ``plan`` starts from the generation the store holds, in its layout."""
        holds = (
            f"the store at {str(self._root)!r} holds version {current.version} (generation "
            f"{current.generation}, digest {current.function_digest[:12]}, N={current.n_channels})"
        )
        if from_version != current.version:
            raise InvalidInput(
                "from_version",
                f"must be the store's: plan {plan_id} starts from version {from_version} but {holds}",
            )
        if plan.source_digest != current.function_digest or plan.source_n_channels != current.n_channels:
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

    def _current_for_writing(self) -> _Generation:
        """The manifest's generation, which must be this handle's or hold the same state in the same
        layout (a compaction moved it on: module docstring); else another writer moved on."""
        current = _load(self._root)
        if current.generation != self._current.generation and not _same_state(current, self._current):
            raise Conflict(
                f"the store at {str(self._root)!r} moved on to generation {current.generation} since this "
                f"handle read generation {self._current.generation}; open it again"
            )
        return current

    def _checked_replacement(
        self, replaced: Mapping[int, Sequence[FileEntry]], current: _Generation
    ) -> list[FileEntry]:
        entries = []
        for channel, files in replaced.items():
            require_int(channel, "replaced.channel", 0, current.n_channels - 1)
            field = f"replaced[{channel}]"
            for entry in files:
                if not isinstance(entry, FileEntry) or entry.channel != channel:
                    raise InvalidInput(field, f"must hold file entries of channel {channel}, got {entry!r}")
                if entry.filter is not None:
                    raise InvalidInput(
                        field,
                        "must list files as write_channel_files returns them, without a slot filter: "
                        f"{entry.path}",
                    )
                require_int(entry.slot_group, f"{field}.slot_group", 0, current.layout.slot_groups - 1)
                path = self._root / entry.path
                try:
                    found = pq.read_schema(path)
                except (OSError, pa.ArrowException) as error:
                    raise InvalidInput(field, f"must list readable files: {str(path)!r}: {error}") from None
                if not current.layout.matches(found) or path.stat().st_size != entry.bytes:
                    raise InvalidInput(
                        field,
                        f"must list files with the store's schema and the size their entry states: "
                        f"{str(path)!r} ({entry.bytes} bytes) has schema {found}",
                    )
                entries.append(entry)
        return entries

    def _publish(self, generation: _Generation) -> None:
        """Write ``generation``'s document, then swap the manifest to it (the commit point)."""
        text = generation.to_json()
        write_durably(self._root / GENERATIONS / f"{generation.generation:08d}.json", text)
        manifest = {"format": FORMAT_VERSION, "generation": generation.generation, "sha256": sha256_hex(text)}
        write_durably(self._root / MANIFEST, canonical_json(manifest))
        self._current = generation


def _load(root: Path) -> _Generation:
    """The generation the manifest in ``root`` names, checked against the manifest's SHA-256."""
    manifest = root / MANIFEST
    try:
        text = manifest.read_text(encoding="utf-8")
    except FileNotFoundError:
        if not root.exists() or _is_fresh(root):
            raise NotFound(f"no state store at {str(root)!r}: it has no {MANIFEST}; create one") from None
        _refuse_a_store_without_manifest(root)
        raise NotFound(
            f"no state store at {str(root)!r}: it has no {MANIFEST} and holds no store's files"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise Corrupt(f"the manifest cannot be read: {error}", path=str(manifest)) from None
    try:
        document = require_object(parse_json(text, "manifest"), "manifest", _MANIFEST_FIELDS)
        _check_format(document["format"], str(manifest))
        number = require_int(document["generation"], "generation")
        digest = _checked_digest(document["sha256"], "sha256")
    except InvalidInput as error:
        raise Corrupt(f"the manifest is corrupt: {error}", path=str(manifest)) from None
    path = root / GENERATIONS / f"{number:08d}.json"
    try:
        generation_text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise Corrupt(
            f"the generation file named by the manifest {str(manifest)!r} cannot be read: {error}",
            path=str(path),
        ) from None
    if sha256_hex(generation_text) != digest:
        raise Corrupt(
            f"the generation file does not match the SHA-256 recorded in {str(manifest)!r}: it was modified "
            "or is incomplete",
            path=str(path),
        )
    generation = _Generation.from_json(generation_text, str(path))
    if generation.generation != number:
        raise Corrupt(
            f"the generation file holds generation {generation.generation}, not {number}", path=str(path)
        )
    return generation


def _entry_in_layout(entry: FileEntry, layout: Layout, n_channels: int, index: int) -> FileEntry:
    """``entry`` (``files[index]`` of a generation) if its channel, slot group and filter fit the
    generation's layout; InvalidInput naming the field otherwise."""
    name = f"files[{index}]"
    require_int(entry.channel, f"{name}.channel", 0, n_channels - 1)
    require_int(entry.slot_group, f"{name}.slot_group", 0, layout.slot_groups - 1)
    if entry.filter is not None:
        entry.filter.check_within(*layout.slot_range(entry.slot_group), f"{name}.filter")
    return entry


def _check_format(value: object, path: str) -> None:
    """InvalidInput ``format`` unless ``value`` is one of ``READABLE_FORMATS``; a later format (a store
    written by a newer repart) is Corrupt naming the file ``path`` and the format: this code cannot
    read it, and nothing may be written over it."""
    if isinstance(value, int) and not isinstance(value, bool) and value > FORMAT_VERSION:
        raise Corrupt(
            f"the document is in format {value}, which this version of repart does not read (it reads "
            f"formats {', '.join(map(str, READABLE_FORMATS))}): open the store with the repart that wrote it",
            path=path,
        )
    check("format", value, Options(READABLE_FORMATS))


def _same_state(a: _Generation, b: _Generation) -> bool:
    """Whether two generations hold the same state in the same layout: version, function, plans,
    last batch, and every channel's rows and checksum."""
    return (a.version, a.function_digest, a.n_channels, a.applied_plans, a.batch) == (
        b.version,
        b.function_digest,
        b.n_channels,
        b.applied_plans,
        b.batch,
    ) and channel_totals(a.files) == channel_totals(b.files)


def _refuse_a_store_without_manifest(root: Path) -> None:
    """Corrupt when ``root`` holds a store's generation documents or data files but no MANIFEST: the
    manifest was deleted, and creating a store over it would silently lose the state."""
    names = sorted(
        path.relative_to(root).as_posix()
        for path in (*root.glob(f"{GENERATIONS}/[0-9]*.json"), *root.glob("channel=*"))
    )
    if names:
        raise Corrupt(
            f"the manifest is missing, but the directory holds a state store ({len(names)} generation "
            f"documents and channel directories, such as {names[-1]!r}); restore it from a backup",
            path=str(root / MANIFEST),
        )


@contextmanager
def _locked(root: Path, *, wait: bool = True) -> Iterator[None]:
    """An exclusive lock on ``ROOT/.lock`` for the duration of one write (released if the process
    dies). Without ``wait``, Conflict when another process holds it."""
    with open(root / LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Conflict(
                f"another process is writing the state store at {str(root)!r} (it holds {LOCK}); "
                "try again when it is done"
            ) from None
        yield


def _is_fresh(root: Path) -> bool:
    """An empty directory, or what a ``create`` killed before its manifest left (then create again)."""
    if not root.is_dir():
        return False
    first = f"{0:08d}.json"
    # The durable writer's temporaries are hidden files (``.<name>.<random>``, repart.protocol.files).
    leftovers = {path.name for path in root.iterdir() if not path.name.startswith(".")} - {LOCK, GENERATIONS}
    documents = {path.name for path in (root / GENERATIONS).glob("*") if not path.name.startswith(".")} - {
        first
    }
    return not leftovers and not documents


def _relative(root: Path, paths: Iterable[Path]) -> list[str]:
    return [path.relative_to(root).as_posix() for path in paths]


def _sorted_files(files: Sequence[FileEntry]) -> tuple[FileEntry, ...]:
    return tuple(sorted(files, key=lambda entry: (entry.channel, entry.slot_group, entry.path)))


def _checked_region(region: object) -> str:
    return str(check("region", region, REGION_NAME))


def _checked_digest(digest: object, name: str) -> str:
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise InvalidInput(name, f"must be a SHA-256 digest (64 lowercase hex digits), got {digest!r}")
    return digest
