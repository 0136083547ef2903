"""The error for a name that names no region, listing the regions there are (the first 20 by name).

Every way of reading a region by name raises it: the ORM repository (``regions.region_by_name``), the
Core overview of ``repart status`` (``overview``), which loads no ORM and so cannot call the former,
and ``region_id_by_name``, for a write that needs only the region's id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Connection, bindparam, select

from repart.errors import NotFound
from repart.storage.tables import regions

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def unknown_region(reader: Connection | Session, name: str) -> NotFound:
    """NotFound for region ``name``, naming the known regions read through ``reader``."""
    known = reader.scalars(select(regions.c.name).order_by(regions.c.name).limit(20)).all()
    return NotFound(f"unknown region {name!r}; known regions: {', '.join(known) or '(none)'}")


REGION_ID = select(regions.c.id).where(regions.c.name == bindparam("name"))
"""The id of the region named by parameter ``name`` (built once: a statement is cheaper run than built)."""


def region_id_by_name(reader: Connection | Session, name: str) -> int:
    """The id of region ``name`` (one Core query, no ORM object); NotFound naming the known regions."""
    region_id = reader.scalar(REGION_ID, {"name": name})
    if region_id is None:
        raise unknown_region(reader, name)
    return int(region_id)
