"""The controller: measure, analyze, plan, activate for every region (Gedik §4.5).

``window`` merges the last ``x - 1`` tumbling snapshots into the sliding frequency estimate;
``policy`` decides the next channel count and whether to rebalance. The package
re-exports nothing, so that importing one of its modules loads only that module (the CLI imports
them when a command runs).
"""
