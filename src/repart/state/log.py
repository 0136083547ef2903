"""The state store's commit log: generations committed by conditional puts, with no lock and no rename.

Under the store's root (a directory or a bucket prefix, ``repart.state.objects``):

- ``_log/<generation, 20 digits>.json``: one **commit document** per generation, holding its actions
  (the files it adds and removes, each under one channel, filters included; the metadata it sets; the
  batch it absorbs; the plan it applies), the generation it builds on (``parent``), when it was
  committed, and a SHA-256 ``checksum`` of everything else;
- ``_log/<generation>.checkpoint.json``: every ``checkpoint_interval`` generations, the whole state at
  that generation (metadata, applied plans, last batch, every file entry), with its own checksum;
- ``_log/_hint.json``: the newest generation and checkpoint a writer knows of, overwritten after each
  commit. Only a hint: a missing, stale or damaged one costs a listing, never an error.

**Commit.** A writer prepares its change against the generation ``g`` it read, writes its data files
(new, uniquely named objects that nothing lists yet), and then creates ``_log/<g+1>.json`` *only if it
is absent* (``Objects.create``: a conditional put on an object store, a hard link of a fully written
and ``fsync``ed temporary file locally). Exactly one writer creates it. The loser reads what won and
rebases: when the winners' changes do not overlap its own it commits at the next number, else it raises
``Conflict``. Changes overlap when both absorb a batch, when either changes the store's layout (a plan,
an upgrade, a schema evolution), or when the loser removes an entry the winners removed. So a
compaction and a batch on other channels, or even on the same channel (a batch only adds files), both
go through.

**Read.** A reader takes the newest checkpoint (from the hint, else from a listing of ``_log/``), lists
the commit documents after it, and replays them. Each document names its parent. A document that does
not parse or whose checksum fails is *torn*: the newest one is an aborted commit and is ignored (the
next writer commits past it, naming the last good generation as its parent); a torn document that a
later document builds on is ``Corrupt``.

**Exactly once.** A commit that absorbs a batch records its id and per-channel measurements
(``repart.state.batches``); a commit that applies a plan records its id and digest. Both carry over to
every later generation, so a batch or plan run again is found in the log and not applied twice, as
Delta Lake's transaction identifiers work.

The documents are JSON with sorted keys; docs/state-format.md describes them for other readers.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import pyarrow as pa

from repart.errors import Conflict, Corrupt, InvalidInput, NotFound, RepartError, Unavailable
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
from repart.state.batches import AbsorbedBatch
from repart.state.files import FileEntry, Layout, checked_layout
from repart.state.objects import Objects
from repart.validation import REGION_NAME, check

FORMAT_VERSION = 3
LOG_PREFIX = "_log/"
HINT = f"{LOG_PREFIX}_hint.json"
DEFAULT_CHECKPOINT_INTERVAL = 10
Operation = Literal["create", "write", "apply", "compact", "upgrade", "evolve"]
OPERATIONS: tuple[Operation, ...] = ("create", "write", "apply", "compact", "upgrade", "evolve")
_DIGITS = 20
_COMMIT_FIELDS = ("format", "generation", "parent", "committed_at_ms", "operation", "checksum")
_OPTIONAL_COMMIT_FIELDS = ("metadata", "layout", "add", "remove", "batch", "plan", "applied_plans")
_CHECKPOINT_FIELDS = (
    "format",
    "generation",
    "committed_at_ms",
    "metadata",
    "layout",
    "applied_plans",
    "files",
    "checksum",
)
_OPTIONAL_CHECKPOINT_FIELDS = ("batch",)
_METADATA_FIELDS = ("region", "key_col", "key_type", "slot_bits", "slot_groups", "schema", "merge")
_OPTIONAL_METADATA_FIELDS = ("added",)
_LAYOUT_FIELDS = ("version", "function_digest", "n_channels")
_MAX_REBASES = 100
_LOG = logging.getLogger(__name__)


def commit_path(generation: int) -> str:
    return f"{LOG_PREFIX}{generation:0{_DIGITS}d}.json"


def checkpoint_path(generation: int) -> str:
    return f"{LOG_PREFIX}{generation:0{_DIGITS}d}.checkpoint.json"


@dataclass(frozen=True)
class Metadata:
    """What a store is: its region and layout, set at its creation; an ``evolve`` commit adds columns
    to the layout's schema (``Layout.added``)."""

    region: str
    layout: Layout

    def to_dict(self) -> dict[str, Any]:
        """The metadata as a JSON object; ``added`` only when the schema gained columns, so that the
        documents of a store that never evolved are the ones it always wrote."""
        layout = self.layout
        document: dict[str, Any] = {
            "region": self.region,
            "key_col": layout.key_col,
            "key_type": layout.key_type,
            "slot_bits": layout.slot_bits,
            "slot_groups": layout.slot_groups,
            "schema": base64.b64encode(layout.schema.serialize().to_pybytes()).decode("ascii"),
            "merge": None if layout.merge is None else dict(layout.merge),
        }
        if layout.added:
            document["added"] = list(layout.added)
        return document

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Metadata:
        fields = require_object(document, "metadata", _METADATA_FIELDS, _OPTIONAL_METADATA_FIELDS)
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(fields["schema"], validate=True)))
        merge = fields["merge"]
        if merge is not None and not isinstance(merge, dict):
            raise InvalidInput("metadata.merge", f"must be an object or null, got {merge!r}")
        layout = checked_layout(
            fields["key_col"],
            fields["key_type"],
            fields["slot_bits"],
            fields["slot_groups"],
            schema,
            merge,
            require_list(fields.get("added", []), "metadata.added"),
        )
        return cls(checked_region(fields["region"]), layout)


@dataclass(frozen=True)
class LayoutVersion:
    """The partition function the state is laid out by: version number, digest, channel count."""

    version: int
    function_digest: str
    n_channels: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "function_digest": self.function_digest,
            "n_channels": self.n_channels,
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> LayoutVersion:
        fields = require_object(document, "layout", _LAYOUT_FIELDS)
        return cls(
            require_int(fields["version"], "layout.version"),
            checked_digest(fields["function_digest"], "layout.function_digest"),
            check_n_channels(fields["n_channels"]),
        )


@dataclass(frozen=True)
class Generation:
    """The state at one generation: metadata, layout version, applied plans, the last batch absorbed,
    every file entry, and when it was committed (milliseconds since the epoch)."""

    generation: int
    metadata: Metadata
    layout_version: LayoutVersion
    applied_plans: tuple[tuple[int, str], ...]
    files: tuple[FileEntry, ...]
    batch: AbsorbedBatch | None
    committed_at_ms: int

    @property
    def layout(self) -> Layout:
        return self.metadata.layout

    def to_checkpoint(self) -> str:
        """The checkpoint document of this generation."""
        body: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "generation": self.generation,
            "committed_at_ms": self.committed_at_ms,
            "metadata": self.metadata.to_dict(),
            "layout": self.layout_version.to_dict(),
            "applied_plans": [list(pair) for pair in self.applied_plans],
            "files": [entry.to_dict() for entry in self.files],
        }
        if self.batch is not None:
            body["batch"] = self.batch.to_dict()
        return _with_checksum(body)

    @classmethod
    def from_checkpoint(cls, text: str, name: str) -> Generation:
        document = _checked_document(text, name, _CHECKPOINT_FIELDS, _OPTIONAL_CHECKPOINT_FIELDS)
        try:
            metadata = Metadata.from_dict(document["metadata"])
            layout_version = LayoutVersion.from_dict(document["layout"])
            files = tuple(
                FileEntry.from_dict(entry, f"files[{index}]")
                for index, entry in enumerate(require_list(document["files"], "files"))
            )
            batch = document.get("batch")
            generation = cls(
                generation=require_int(document["generation"], "generation"),
                metadata=metadata,
                layout_version=layout_version,
                applied_plans=applied_plans_of(document["applied_plans"]),
                files=files,
                batch=None if batch is None else AbsorbedBatch.from_dict(batch),
                committed_at_ms=require_int(document["committed_at_ms"], "committed_at_ms"),
            )
            check_files(generation.files, metadata.layout, layout_version.n_channels)
        except (ValueError, TypeError, pa.ArrowException) as error:  # InvalidInput is a ValueError
            raise Corrupt(f"not a valid checkpoint document: {error}", path=name) from None
        return generation


@dataclass(frozen=True)
class Change:
    """What one commit does (module docstring): the metadata it sets (a create, an upgrade or a schema
    evolution), the layout version it moves to (a plan), the entries it removes (by file and channel)
    and adds, the batch it absorbs and the plan it applies."""

    operation: Operation
    metadata: Metadata | None = None
    layout_version: LayoutVersion | None = None
    remove: tuple[tuple[str, int], ...] = ()
    add: tuple[FileEntry, ...] = ()
    batch: AbsorbedBatch | None = None
    plan: tuple[int, str] | None = None
    #: The plans an upgraded store had applied before (an upgrade only).
    applied_plans: tuple[tuple[int, str], ...] = ()
    #: Whether the change was computed from the state it changes (a general store's write: read, combine,
    #: write), so that another write to the same channel in between would be lost. Not in the document.
    reads_state: bool = False

    def stamped(self, entry: FileEntry, generation: int) -> FileEntry:
        """``entry`` as this change lists it at ``generation``: a batch's files get the generation as
        their ``seq`` (they are the newest rows); every other change keeps the ``seq`` its producer gave
        (a migration or compaction moves or folds rows without making them newer)."""
        return replace(entry, seq=generation) if self.operation == "write" else entry

    @property
    def sets_layout(self) -> bool:
        return self.metadata is not None or self.layout_version is not None

    def overlaps(self, winner: Change) -> str | None:
        """Why this change cannot go on after ``winner`` committed first (None: it can)."""
        if self.sets_layout or winner.sets_layout:
            return f"{'an' if winner.operation[0] in 'aeiou' else 'a'} {winner.operation} commit"
        if self.batch is not None and winner.batch is not None:
            return f"a commit that absorbed batch {winner.batch.batch_id}"
        if self.reads_state and winner.operation == "write":
            shared = {entry.channel for entry in self.add} & {entry.channel for entry in winner.add}
            if shared:
                return f"a write to channel {min(shared)}, whose state this write read before it"
        removed = set(self.remove) & set(winner.remove)
        if removed:
            path, channel = sorted(removed)[0]
            return f"a {winner.operation} that removed file {path} of channel {channel} as well"
        return None

    def to_document(self, generation: int, parent: int, committed_at_ms: int) -> str:
        body: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "generation": generation,
            "parent": parent,
            "committed_at_ms": committed_at_ms,
            "operation": self.operation,
        }
        if self.metadata is not None:
            body["metadata"] = self.metadata.to_dict()
        if self.layout_version is not None:
            body["layout"] = self.layout_version.to_dict()
        if self.remove:
            body["remove"] = [list(identity) for identity in self.remove]
        if self.add:
            body["add"] = [self.stamped(entry, generation).to_dict() for entry in self.add]
        if self.batch is not None:
            body["batch"] = self.batch.to_dict()
        if self.plan is not None:
            body["plan"] = list(self.plan)
        if self.applied_plans:
            body["applied_plans"] = [list(pair) for pair in self.applied_plans]
        return _with_checksum(body)


@dataclass(frozen=True)
class Commit:
    """A parsed commit document."""

    generation: int
    parent: int
    committed_at_ms: int
    change: Change

    @classmethod
    def from_document(cls, text: str, name: str) -> Commit:
        """Parse a commit document; Corrupt naming ``name`` when it is torn or invalid."""
        document = _checked_document(text, name, _COMMIT_FIELDS, _OPTIONAL_COMMIT_FIELDS)
        try:
            operation = document["operation"]
            if operation not in OPERATIONS:
                raise InvalidInput("operation", f"must be one of {list(OPERATIONS)}, got {operation!r}")
            metadata = document.get("metadata")
            layout = document.get("layout")
            batch = document.get("batch")
            plan = document.get("plan")
            change = Change(
                operation=operation,
                metadata=None if metadata is None else Metadata.from_dict(metadata),
                layout_version=None if layout is None else LayoutVersion.from_dict(layout),
                remove=tuple(
                    (_checked_path(path), require_int(channel, "remove.channel"))
                    for path, channel in (
                        require_row(row, "remove[]", ("path", "channel"))
                        for row in require_list(document.get("remove", []), "remove")
                    )
                ),
                add=tuple(
                    FileEntry.from_dict(entry, f"add[{index}]")
                    for index, entry in enumerate(require_list(document.get("add", []), "add"))
                ),
                batch=None if batch is None else AbsorbedBatch.from_dict(batch),
                plan=None if plan is None else applied_plans_of([plan])[0],
                applied_plans=applied_plans_of(document.get("applied_plans", [])),
            )
            generation = require_int(document["generation"], "generation")
            parent = require_int(document["parent"], "parent", -1, generation - 1)
            return cls(
                generation, parent, require_int(document["committed_at_ms"], "committed_at_ms"), change
            )
        except (ValueError, TypeError, pa.ArrowException) as error:
            raise Corrupt(f"not a valid commit document: {error}", path=name) from None


def applied(base: Generation | None, commit: Commit) -> Generation:
    """The generation ``commit`` makes of ``base`` (None before the store's first commit); Corrupt
    when its actions do not fit (an entry removed that is not there, one added twice)."""
    name = commit_path(commit.generation)
    change = commit.change
    if base is None:
        if change.metadata is None or change.layout_version is None:
            raise Corrupt("the store's first commit must set its metadata and layout", path=name)
        files: dict[tuple[str, int], FileEntry] = {}
        metadata, layout_version, plans, batch = (
            change.metadata,
            change.layout_version,
            change.applied_plans,
            None,
        )
    else:
        files = {entry.identity: entry for entry in base.files}
        metadata = change.metadata or base.metadata
        layout_version = change.layout_version or base.layout_version
        plans, batch = base.applied_plans, base.batch
    for identity in change.remove:
        if files.pop(identity, None) is None:
            raise Corrupt(
                f"the commit removes file {identity[0]} of channel {identity[1]}, which is not listed",
                path=name,
            )
    for entry in change.add:
        if entry.identity in files:
            raise Corrupt(f"the commit adds file {entry.path} of channel {entry.channel} twice", path=name)
        files[entry.identity] = entry
    ordered = tuple(sorted(files.values(), key=_entry_order))
    try:
        check_files(ordered, metadata.layout, layout_version.n_channels)
    except InvalidInput as error:
        raise Corrupt(f"the commit leaves an invalid listing: {error}", path=name) from None
    return Generation(
        generation=commit.generation,
        metadata=metadata,
        layout_version=layout_version,
        applied_plans=plans if change.plan is None else (*plans, change.plan),
        files=ordered,
        batch=batch if change.batch is None else change.batch,
        committed_at_ms=commit.committed_at_ms,
    )


def check_files(files: Sequence[FileEntry], layout: Layout, n_channels: int) -> None:
    """InvalidInput unless every entry's channel, slot group and filter fit the layout."""
    for index, entry in enumerate(files):
        name = f"files[{index}]"
        require_int(entry.channel, f"{name}.channel", 0, n_channels - 1)
        if entry.slot_group is not None:
            require_int(entry.slot_group, f"{name}.slot_group", 0, layout.slot_groups - 1)
        if entry.filter is not None:
            entry.filter.check_within(*layout.slot_range(entry.slot_group), f"{name}.filter")


@dataclass
class Log:
    """The commit log of the store whose objects are ``objects`` (module docstring)."""

    objects: Objects
    checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL
    #: Every commit document read, by generation (torn ones as None), for this handle's lifetime.
    _read: dict[int, Commit | None] = field(default_factory=dict)

    def newest(self) -> Generation:
        """The store's newest generation; NotFound when there is no store."""
        start = self._start()
        generation, _ = self._replayed(start)
        if generation is None:
            raise NotFound(f"no state store at {self.objects.url}: it has no commit log; create one")
        return generation

    def exists(self) -> bool:
        """Whether the log holds a document (a store), not only a killed writer's temporaries."""
        return any(not is_temporary(info.path) for info in self.objects.listing(LOG_PREFIX))

    def commit(self, base: Generation | None, change: Change) -> Generation:
        """Commit ``change`` on top of ``base`` (None: the first commit) and return the new generation
        (module docstring). The generation it makes is built and checked before its document is
        created, so a change that does not fit is refused with nothing written: InvalidInput when it
        does not fit ``base`` (an entry added twice, or removed that is not listed), Conflict when it
        stops fitting after a rebase or a commit that overlaps it won the race. A create whose outcome
        is unknown (the object store did not answer) is read back: if the document is there, it
        committed."""
        number = -1 if base is None else base.generation
        prepared_on = number
        for _ in range(_MAX_REBASES):
            # Rebase on whatever committed after ``base`` first (commits this writer did not see, or that
            # won the last create), so that the next document never skips a good commit.
            winners, highest = self._commits_after(number, writing=True)
            for winner in winners:
                reason = change.overlaps(winner.change)
                if reason is not None:
                    raise Conflict(
                        f"the state store at {self.objects.url} moved on to generation {winner.generation} "
                        f"through {reason} while this {change.operation} was prepared on generation "
                        f"{prepared_on}; open the store again and retry"
                    )
                base = applied(base, winner)
                number = winner.generation
            target = highest + 1
            document = change.to_document(target, number, int(time.time() * 1000))
            commit = Commit.from_document(document, commit_path(target))
            try:
                new = applied(base, commit)
            except Corrupt as misfit:
                reason = str(misfit).split(": ", 1)[-1]
                if number != prepared_on:
                    raise Conflict(
                        f"the state store at {self.objects.url} moved on to generation {number}, where this "
                        f"{change.operation} no longer fits ({reason}); open the store again and retry"
                    ) from None
                raise InvalidInput("change", f"must fit the store's generation {number}: {reason}") from None
            if self._created(commit_path(target), document.encode("utf-8")):
                self._read[target] = commit
                self._after_commit(new)
                return new
        raise Conflict(f"the state store at {self.objects.url} kept moving on; retry later")

    def _created(self, path: str, data: bytes) -> bool:
        """Create ``path`` only if absent; when the store did not answer, whether our document is there."""
        try:
            return self.objects.create(path, data)
        except Unavailable:
            try:
                found = self.objects.read(path)
            except (FileNotFoundError, Unavailable):
                raise Unavailable(
                    f"the state store at {self.objects.url} did not answer while {path} was created, and "
                    "whether it was is unknown: open the store again, and retry what is not in it"
                ) from None
            return found == data

    def commits_after(self, number: int) -> list[Commit]:
        """The commits after generation ``number`` that the newest one builds on, in order."""
        commits, _ = self._commits_after(number)
        return commits

    def checkpoint_at_or_before(self, number: int) -> Generation | None:
        """The newest readable checkpoint at or before generation ``number``, None when there is none."""
        found = sorted(
            (
                _number_of(info.path)
                for info in self.objects.listing(LOG_PREFIX)
                if info.path.endswith(".checkpoint.json")
            ),
            reverse=True,
        )
        for checkpoint in found:
            if checkpoint <= number:
                loaded = self._checkpoint(checkpoint)
                if loaded is not None:
                    return loaded
        return None

    def _after_commit(self, generation: Generation) -> None:
        """The checkpoint when one is due, then the hint, both best effort: readers do without them,
        so a failure to write one does not make the commit, which happened, look failed."""
        try:
            self._write_checkpoint_and_hint(generation)
        except (OSError, RepartError) as error:
            _LOG.warning("the commit of generation %s stands, but its checkpoint or hint was not written: %s",
                         generation.generation, error)  # fmt: skip

    def _write_checkpoint_and_hint(self, generation: Generation) -> None:
        checkpoint = None
        if generation.generation % self.checkpoint_interval == 0:
            self.objects.write(
                checkpoint_path(generation.generation), generation.to_checkpoint().encode("utf-8")
            )
            checkpoint = generation.generation
        hint = {"generation": generation.generation}
        if checkpoint is not None:
            hint["checkpoint"] = checkpoint
        else:
            previous = self._hint()
            if previous is not None and previous.get("checkpoint") is not None:
                hint["checkpoint"] = previous["checkpoint"]
        self.objects.write(HINT, canonical_json(hint).encode("utf-8"))

    def _hint(self) -> dict[str, int] | None:
        try:
            document = parse_json(self.objects.read(HINT).decode("utf-8"), "hint")
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return None
        if not isinstance(document, dict) or not all(
            isinstance(value, int) and value >= 0 for value in document.values()
        ):
            return None
        return document

    def _start(self) -> Generation | None:
        """The newest checkpoint that can be read (from the hint, else from a listing); None: replay
        from the first commit."""
        hint = self._hint()
        if hint is not None and "checkpoint" in hint:
            loaded = self._checkpoint(hint["checkpoint"])
            if loaded is not None:
                return loaded
        newest = max((_number_of(info.path) for info in self.objects.listing(LOG_PREFIX)), default=-1)
        return self.checkpoint_at_or_before(newest)

    def _checkpoint(self, number: int) -> Generation | None:
        """Checkpoint ``number``, or None when it is missing or damaged (it is derived data: the
        commits it sums up are read instead)."""
        try:
            text = self.objects.read(checkpoint_path(number)).decode("utf-8")
            return Generation.from_checkpoint(text, checkpoint_path(number))
        except (FileNotFoundError, UnicodeDecodeError, Corrupt):
            return None

    def _replayed(self, start: Generation | None) -> tuple[Generation | None, int]:
        """``start`` with every commit after it applied, and the highest commit number seen."""
        number = -1 if start is None else start.generation
        commits, highest = self._commits_after(number)
        generation = start
        for commit in commits:
            generation = applied(generation, commit)
        return generation, highest

    def _numbers_after(self, number: int) -> list[int]:
        after = None if number < 0 else commit_path(number)
        return sorted(
            _number_of(info.path)
            for info in self.objects.listing(LOG_PREFIX, after=after)
            if _is_commit_name(info.path)
        )

    def _commits_after(self, number: int, *, writing: bool = False) -> tuple[list[Commit], int]:
        """The chain of commits after generation ``number`` that the newest good commit builds on, in
        order, and the highest commit number found (torn ones included: the next commit goes past).
        A commit of the chain that is gone is Corrupt, or for a writer (``writing``) whose generation
        is so old that vacuum deleted the commits after it, Conflict: it must open the store again."""
        numbers = self._numbers_after(number)
        if not numbers:
            return [], number
        for found in numbers:
            if found not in self._read:
                self._read[found] = self._commit_or_torn(found)
        good = [found for found in numbers if self._read[found] is not None]
        chain: list[Commit] = []
        at = good[-1] if good else None
        listed = set(numbers)
        while at is not None and at > number:
            if writing and at not in listed:
                raise Conflict(
                    f"the state store at {self.objects.url} moved on from generation {number} and vacuum "
                    f"deleted the commits after it (commit {at} is gone); open the store again and retry"
                )
            commit = self._read.get(at)
            if commit is None:
                if at not in self._read:
                    self._read[at] = self._commit_or_torn(at)
                    commit = self._read[at]
                if commit is None:
                    raise Corrupt(
                        "a commit document that later commits build on is damaged (its checksum fails or it "
                        "does not parse); restore it from a backup",
                        path=commit_path(at),
                    )
            chain.append(commit)
            at = commit.parent
        if at is not None and at != number and at >= 0:
            raise Corrupt(
                f"the commit chain does not reach generation {number}: commit {chain[-1].generation} builds "
                f"on {at}",
                path=commit_path(chain[-1].generation),
            )
        return list(reversed(chain)), numbers[-1]

    def _commit_or_torn(self, number: int) -> Commit | None:
        """Commit ``number``, or None when it is torn (module docstring)."""
        name = commit_path(number)
        try:
            text = self.objects.read(name).decode("utf-8")
        except FileNotFoundError:
            raise Corrupt("a commit document disappeared while the log was read", path=name) from None
        except UnicodeDecodeError:
            return None
        try:
            commit = Commit.from_document(text, name)
        except Torn:
            return None
        if commit.generation != number:
            raise Corrupt(
                f"the commit document holds generation {commit.generation}, not {number}", path=name
            )
        return commit


def is_temporary(path: str) -> bool:
    """Whether ``path`` is a local writer's hidden temporary (``.<name>.<random>``), which a writer
    killed before its link or rename leaves behind: not part of any store."""
    return path.rsplit("/", 1)[-1].startswith(".")


def _number_of(path: str) -> int:
    """The generation a log object (commit or checkpoint) is named by; -1 for the hint."""
    digits = path[len(LOG_PREFIX) : len(LOG_PREFIX) + _DIGITS]
    return int(digits) if digits.isdigit() else -1


def log_number(path: str) -> int | None:
    """The generation a log object is named by, None for another object (the hint)."""
    number = _number_of(path)
    return None if number < 0 else number


def _is_commit_name(path: str) -> bool:
    name = path[len(LOG_PREFIX) :]
    return (
        path.startswith(LOG_PREFIX)
        and len(name) == _DIGITS + 5
        and name[:_DIGITS].isdigit()
        and name.endswith(".json")
    )


def _identities(generation: Generation | None) -> set[tuple[str, int]]:
    return set() if generation is None else {entry.identity for entry in generation.files}


def _entry_order(entry: FileEntry) -> tuple[int, int, int, str]:
    group = -1 if entry.slot_group is None else entry.slot_group
    return entry.channel, group, entry.seq, entry.path


def _with_checksum(body: dict[str, Any]) -> str:
    """``body`` as canonical JSON with a ``checksum`` field: the SHA-256 of the JSON without it."""
    return canonical_json({**body, "checksum": sha256_hex(canonical_json(body))})


class Torn(Corrupt):
    """A log document that does not parse as JSON or whose checksum fails: an aborted or damaged write.
    A document that parses and whose checksum holds but whose content is invalid (a later format, a bad
    entry) is plain ``Corrupt``: it was written whole, by something that is not this version of repart."""


def _checked_document(
    text: str, name: str, fields: tuple[str, ...], optional: tuple[str, ...]
) -> dict[str, Any]:
    """A document whose checksum holds and whose format is 3; Torn or Corrupt naming ``name`` otherwise."""
    try:
        document = parse_json(text, name)
    except InvalidInput as error:
        raise Torn(f"not a valid log document: {error}", path=name) from None
    checksum = document.get("checksum") if isinstance(document, dict) else None
    body = {key: value for key, value in document.items() if key != "checksum"} if checksum else None
    if body is None or sha256_hex(canonical_json(body)) != checksum:
        raise Torn("the document's checksum fails: it is torn or was modified", path=name)
    if document.get("format") != FORMAT_VERSION:
        raise Corrupt(
            f"the document is in format {document.get('format')!r}, which this version of repart does not "
            f"read (it reads format {FORMAT_VERSION}): open the store with the repart that wrote it",
            path=name,
        )
    try:
        document = require_object(document, "document", fields, optional)
    except InvalidInput as error:
        raise Corrupt(f"not a valid log document: {error}", path=name) from None
    return document


def applied_plans_of(rows: object) -> tuple[tuple[int, str], ...]:
    """A document's ``[[plan id, digest], ...]`` list, checked (InvalidInput naming the field)."""
    return tuple(
        (require_int(plan_id, "applied_plans.id"), checked_digest(digest, "applied_plans.digest"))
        for plan_id, digest in (
            require_row(row, "applied_plans[]", ("id", "digest"))
            for row in require_list(rows, "applied_plans")
        )
    )


def _checked_path(path: object) -> str:
    FileEntry.from_dict(
        {"path": path, "channel": 0, "slot_group": None, "rows": 1, "bytes": 1, "checksum": "0" * 16},
        "remove[]",
    )
    return str(path)


def checked_region(region: object) -> str:
    return str(check("region", region, REGION_NAME))


def checked_digest(digest: object, name: str) -> str:
    import re

    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise InvalidInput(name, f"must be a SHA-256 digest (64 lowercase hex digits), got {digest!r}")
    return digest
