"""Migration plans between partition-function versions: moves, predicted cost, reverse (DESIGN §6)."""

from repart.migration.plan import FORMAT_VERSION, SLOT_MOVE_COLUMNS, ExplicitMove, MigrationPlan
from repart.migration.planner import DEFAULT_RESOURCES, plan_migration

__all__ = [
    "DEFAULT_RESOURCES",
    "FORMAT_VERSION",
    "SLOT_MOVE_COLUMNS",
    "ExplicitMove",
    "MigrationPlan",
    "plan_migration",
]
