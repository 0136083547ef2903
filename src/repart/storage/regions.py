"""Regions: a keyed, stateful pipeline stage and its controller configuration.

``RegionConfig`` validates a configuration with the partitioning package's own checks, so a region
that is stored can be built for; its ``settings`` are the controller's, checked by
``repart.controller.service`` (which every caller goes through), whose ``CheckedRegion`` is what
these functions store; the repository functions create, read, update and delete regions by
name. Every bad value raises ``InvalidInput`` naming the field (the dataclass field's name) and its
accepted values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sqlalchemy import bindparam, delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from repart.errors import Conflict, InvalidInput
from repart.partitioning.documents import require_int
from repart.partitioning.domain import (
    DEFAULT_METHOD,
    DEFAULT_SLOT_BITS,
    MAX_CHANNELS,
    METHODS,
    RESOURCE_CODES,
    SPLIT_SCHEMES,
    KeyType,
    check_sigma,
    check_slot_bits,
    check_utility,
)
from repart.protocol.merge import MergeSpec
from repart.storage import models
from repart.storage.jsontext import dump_object, load_object
from repart.storage.region_names import unknown_region
from repart.storage.tables import ENGINES
from repart.validation import BOOLEAN, NONE, REGION_NAME, Interval, Options, check

POLICIES = ("fixed", "target-utilization")
# α of a region: α = 1 tolerates no imbalance, so no function could be built for it (Eq. 15: θ = 0).
REGION_ALPHA = Interval(float, 1, None, closed="neither")
# Fields whose change would make stored snapshots and versions inconsistent with the region.
_FIXED_ONCE_USED = ("key_type", "slot_bits", "engine")


@dataclass(frozen=True)
class RegionConfig:
    """A region's configuration; defaults are Gedik's (resource code LCL, α = 1.2, σ = 0.1, U^APM).

    ``policy`` is the channel-count policy and ``settings`` its parameters (a JSON
    object). ``utility`` is normalised (``apm`` → ``APM``). ``split_scheme`` (one of ``SPLIT_SCHEMES``)
    puts the region in split mode, which needs ``merge`` (``repart.protocol.merge``;
    stored as its canonical text); the scheme's parameters are the ``split`` object of ``settings``.
    ``engine`` says who places the region's state: ``repart`` (its versions are partition functions)
    or ``spark-state`` (a Structured Streaming query's own state, placed by Spark over n state
    partitions: its versions are counts n, between ``min_channels`` and ``max_channels``; never in
    split mode). It cannot change once the region has snapshots or versions.
    """

    key_type: KeyType
    n_channels_initial: int
    resources: str = "LCL"
    alpha: float = 1.2
    sigma: float = 0.1
    algorithm: str = "auto"
    utility: str = "APM"
    policy: str = "fixed"
    min_channels: int = 1
    max_channels: int = MAX_CHANNELS
    tail_aware: bool = False
    slot_bits: int = DEFAULT_SLOT_BITS
    consistent_method: str = DEFAULT_METHOD
    split_scheme: str | None = None
    merge: str | None = None
    settings: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    engine: str = "repart"

    def __post_init__(self) -> None:
        # The builder (and every algorithm it imports) loads only when a configuration is checked: a
        # command that reads regions does not pay for it.
        from repart.partitioning.algorithms.builder import check_algorithm

        check("key_type", self.key_type, Options(("str", "int")))
        check("resources", self.resources, Options(RESOURCE_CODES))
        check("alpha", self.alpha, REGION_ALPHA)
        check_sigma(self.sigma)
        check_algorithm(self.algorithm)
        object.__setattr__(self, "utility", check_utility(self.utility))
        check("policy", self.policy, Options(POLICIES))
        require_int(self.min_channels, "min_channels", 1, MAX_CHANNELS)
        require_int(self.max_channels, "max_channels", self.min_channels, MAX_CHANNELS)
        require_int(self.n_channels_initial, "n_channels_initial", self.min_channels, self.max_channels)
        check("tail_aware", self.tail_aware, BOOLEAN)
        check_slot_bits(self.slot_bits)
        check("consistent_method", self.consistent_method, Options(METHODS))
        check("split_scheme", self.split_scheme, Options(SPLIT_SCHEMES), NONE)
        check("engine", self.engine, Options(ENGINES))
        if self.engine == "spark-state" and self.split_scheme is not None:
            raise InvalidInput(
                "split_scheme",
                "must be unset for a spark-state region: Spark places its state by key, and only a "
                f"region of repart's own splits keys, got {self.split_scheme!r}",
            )
        if self.merge is not None:
            object.__setattr__(self, "merge", MergeSpec.parse(self.merge).to_text())
        elif self.split_scheme is not None:
            raise InvalidInput(
                "merge",
                "is required in split mode: how a split key's partial state rows merge, as "
                "column=sum|min|max pairs (e.g. 'pv=sum,volume=sum')",
            )
        dump_object(self.settings, "settings")
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))

    @classmethod
    def from_row(cls, row: models.Region) -> RegionConfig:
        """The configuration stored in a region row."""
        values = {f.name: getattr(row, f.name) for f in dataclasses.fields(cls) if f.name != "settings"}
        return cls(**values, settings=load_object(row.settings_json))

    def columns(self) -> dict[str, Any]:
        """The region row's column values for this configuration."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "settings"}
        return {**values, "settings_json": dump_object(self.settings, "settings")}


@dataclass(frozen=True)
class CheckedRegion:
    """A region's configuration that the controller accepted in full, its settings included: what the
    functions below store. ``repart.controller.service.checked_config`` makes one."""

    config: RegionConfig


def create_region(session: Session, name: str, checked: CheckedRegion) -> models.Region:
    """Add a region with a checked configuration; Conflict if the name is taken."""
    config = checked.config
    check("region", name, REGION_NAME)
    if session.scalar(select(models.Region.id).where(models.Region.name == name)) is not None:
        raise Conflict(f"region {name!r} already exists")
    row = models.Region(name=name, **config.columns())
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        raise Conflict(f"region {name!r} already exists (created concurrently)") from None
    return row


def region_by_name(session: Session, name: str, *, lock: bool = False) -> models.Region:
    """The region called ``name``; NotFound naming the known regions if there is none. With ``lock``,
    its row is read as committed now and locked until the transaction ends (``SELECT … FOR UPDATE``),
    in one statement."""
    query = select(models.Region).where(models.Region.name == name)
    if lock:
        query = query.with_for_update().execution_options(populate_existing=True)
    row = session.scalar(query)
    if row is None:
        raise unknown_region(session, name)
    return row


REGION_SETTINGS = select(models.Region.settings_json).where(models.Region.name == bindparam("name"))
"""The settings of the region named by parameter ``name`` (built once)."""


def region_settings(session: Session, name: str) -> dict[str, Any]:
    """The stored settings (a JSON object) of region ``name``, read alone; NotFound naming the known
    regions if there is none."""
    settings_json = session.scalar(REGION_SETTINGS, {"name": name})
    if settings_json is None:
        raise unknown_region(session, name)
    return load_object(settings_json)


def list_regions(session: Session) -> list[models.Region]:
    """All regions, by name."""
    return list(session.scalars(select(models.Region).order_by(models.Region.name)))


def update_region(session: Session, name: str, checked: CheckedRegion) -> models.Region:
    """Replace a region's configuration with a checked one.

    ``key_type``, ``slot_bits`` and ``engine`` cannot change once the region has snapshots or versions
    (Conflict): the stored keys and slot counts would no longer fit it.
    """
    row = region_by_name(session, name)
    old, new = RegionConfig.from_row(row), checked.config
    fixed = [f for f in _FIXED_ONCE_USED if getattr(new, f) != getattr(old, f)]
    if fixed and _has_data(session, row.id):
        raise Conflict(f"region {name!r} has snapshots or versions; {', '.join(fixed)} can no longer change")
    for column, value in new.columns().items():
        setattr(row, column, value)
    session.flush()
    return row


@dataclass(frozen=True)
class DeletedRegion:
    """How many versions, plans and snapshots ``delete_region`` removed with a region."""

    versions: int
    plans: int
    snapshots: int


def delete_region(session: Session, name: str, *, force: bool = False) -> DeletedRegion:
    """Delete a region with its snapshots, versions, plans, reports and lease; its events stay (with
    no region).

    A region with versions (its partition functions and the plans between them, which jobs route and
    migrate state by) is deleted only with ``force``: Conflict naming the counts otherwise. The
    children go by the foreign keys' ``ON DELETE CASCADE`` (SQLite connections enable foreign keys,
    ``repart.storage.engine``). NotFound for an unknown region.
    """
    row = region_by_name(session, name, lock=True)
    counts = DeletedRegion(
        *(
            session.scalar(select(func.count()).select_from(table).where(table.region_id == row.id)) or 0
            for table in (models.Version, models.Plan, models.Snapshot)
        )
    )
    if counts.versions and not force:
        raise Conflict(
            f"region {name!r} has {counts.versions} version(s) and {counts.plans} plan(s), which jobs "
            "route and migrate state by; deleting it anyway needs force "
            f"(`repart region delete {name} --force`)"
        )
    session.execute(delete(models.Region).where(models.Region.id == row.id))
    session.expunge(row)
    return counts


def _has_data(session: Session, region_id: int) -> bool:
    snapshot = select(models.Snapshot.id).where(models.Snapshot.region_id == region_id).limit(1)
    version = select(models.Version.id).where(models.Version.region_id == region_id).limit(1)
    return session.scalar(snapshot) is not None or session.scalar(version) is not None
