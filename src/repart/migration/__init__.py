"""Migration plans between partition-function versions: moves, consolidations, predicted cost, reverse."""

from repart.migration.consolidation import Consolidation, SplitKey
from repart.migration.plan import FORMAT_VERSION, SLOT_MOVE_COLUMNS, ExplicitMove, MigrationPlan
from repart.migration.planner import DEFAULT_RESOURCES, plan_migration

__all__ = [
    "DEFAULT_RESOURCES",
    "FORMAT_VERSION",
    "SLOT_MOVE_COLUMNS",
    "Consolidation",
    "ExplicitMove",
    "MigrationPlan",
    "SplitKey",
    "plan_migration",
]
