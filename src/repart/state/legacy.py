"""Reading state stores written before format 3, so that nobody's existing state is stranded.

Formats 1 and 2 kept a store in a local directory: data files under ``channel=<c>/``, one JSON document
per generation under ``generations/<gen:08d>.json`` (format 2 entries may carry slot filters), and a
``MANIFEST`` (``{"format", "generation", "sha256"}``) naming the current generation and the SHA-256 of
its document, replaced atomically under a ``flock``. ``read_legacy`` turns the current generation into
a format-3 ``Generation`` (every file a base file of ``seq`` 0, in a general store: those formats had
no mergeable state) without writing anything; ``StateStore`` upgrades it by one verified commit that
lists the same files, so upgrading copies no data file.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pyarrow as pa

from repart.errors import Corrupt, InvalidInput, NotFound
from repart.partitioning.consistent import check_n_channels
from repart.partitioning.documents import (
    parse_json,
    require_int,
    require_list,
    require_object,
    sha256_hex,
)
from repart.state.batches import AbsorbedBatch
from repart.state.files import FileEntry, checked_layout
from repart.state.log import (
    Generation,
    LayoutVersion,
    Metadata,
    applied_plans_of,
    check_files,
    checked_digest,
    checked_region,
)
from repart.validation import Options, check

MANIFEST = "MANIFEST"
GENERATIONS = "generations"
#: The formats this module reads.
LEGACY_FORMATS = (1, 2)
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


def is_legacy(root: Path) -> bool:
    """Whether ``root`` holds a store of format 1 or 2 (or its remains: generation documents, channel
    directories)."""
    return (
        (root / MANIFEST).exists()
        or any(root.glob(f"{GENERATIONS}/[0-9]*.json"))
        or any(root.glob("channel=*"))
    )


def read_legacy(root: Path) -> Generation:
    """The current generation of the format-1 or format-2 store in ``root`` (module docstring).
    NotFound without one; Corrupt naming the file when the manifest is missing from a store that has
    generations or data, is unreadable, names a later format, or does not match its document."""
    manifest = root / MANIFEST
    try:
        text = manifest.read_text(encoding="utf-8")
    except FileNotFoundError:
        names = sorted(
            path.relative_to(root).as_posix()
            for path in (*root.glob(f"{GENERATIONS}/[0-9]*.json"), *root.glob("channel=*"))
        )
        if names:
            raise Corrupt(
                f"the manifest is missing, but the directory holds a state store ({len(names)} generation "
                f"documents and channel directories, such as {names[-1]!r}); restore it from a backup",
                path=MANIFEST,
            ) from None
        raise NotFound(f"no state store at {str(root)!r}: it has no commit log; create one") from None
    except (OSError, UnicodeDecodeError) as error:
        raise Corrupt(f"the manifest cannot be read: {error}", path=MANIFEST) from None
    try:
        document = require_object(parse_json(text, "manifest"), "manifest", _MANIFEST_FIELDS)
        _check_format(document["format"], MANIFEST)
        number = require_int(document["generation"], "generation")
        digest = checked_digest(document["sha256"], "sha256")
    except InvalidInput as error:
        raise Corrupt(f"the manifest is corrupt: {error}", path=MANIFEST) from None
    name = f"{GENERATIONS}/{number:08d}.json"
    path = root / name
    try:
        generation_text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise Corrupt(
            f"the generation file named by the manifest cannot be read: {error}", path=name
        ) from None
    if sha256_hex(generation_text) != digest:
        raise Corrupt(
            "the generation file does not match the SHA-256 recorded in the manifest: it was modified "
            "or is incomplete",
            path=name,
        )
    return _parsed(generation_text, name, number)


def _parsed(text: str, name: str, number: int) -> Generation:
    try:
        document = require_object(parse_json(text, name), "generation", _GENERATION_FIELDS, ("batch",))
        _check_format(document["format"], name)
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(document["schema"], validate=True)))
        layout = checked_layout(
            document["key_col"], document["key_type"], document["slot_bits"], document["slot_groups"], schema
        )
        n_channels = check_n_channels(document["n_channels"])
        files = tuple(
            FileEntry.from_dict(entry, f"files[{index}]")
            for index, entry in enumerate(require_list(document["files"], "files"))
        )
        check_files(files, layout, n_channels)
        plans = applied_plans_of(document["applied_plans"])
        batch = document.get("batch")
        generation = require_int(document["generation"], "generation")
        if generation != number:
            raise Corrupt(f"the generation file holds generation {generation}, not {number}", path=name)
        return Generation(
            generation=generation,
            metadata=Metadata(checked_region(document["region"]), layout),
            layout_version=LayoutVersion(
                require_int(document["version"], "version"),
                checked_digest(document["function_digest"], "function_digest"),
                n_channels,
            ),
            applied_plans=plans,
            files=files,
            batch=None if batch is None else AbsorbedBatch.from_dict(batch),
            committed_at_ms=0,
        )
    except (ValueError, TypeError, pa.ArrowException) as error:  # InvalidInput is a ValueError
        raise Corrupt(f"not a valid generation document: {error}", path=name) from None


def _check_format(value: object, path: str) -> None:
    """InvalidInput ``format`` unless ``value`` is 1 or 2; a later one is Corrupt naming it."""
    if isinstance(value, int) and not isinstance(value, bool) and value > max(LEGACY_FORMATS):
        raise Corrupt(
            f"the document is in format {value}, which this version of repart does not read in a manifest "
            "(format 3 stores keep a commit log under _log/): open the store with the repart that wrote it",
            path=path,
        )
    check("format", value, Options(LEGACY_FORMATS))
