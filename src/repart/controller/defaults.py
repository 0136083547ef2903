"""The daemon's defaults, in a module without imports, so that ``repart run --help`` shows them without
loading the daemon (a responsive CLI)."""

DEFAULT_INTERVAL_SECONDS = 10.0
"""Seconds between two sweeps, so between two ticks of a region."""

DEFAULT_LEASE_TTL_SECONDS = 30.0
"""Seconds a region's lease lasts without renewal: three intervals, so one slow sweep does not lose it."""

DEFAULT_WORKERS = 4
"""Tick threads: ticks are mostly Python (GIL-bound builds, ORM), so more threads than cores add waiting,
not throughput; four overlap one tick's database round trips with another's computing."""

MIN_IDLE_TRANSACTION_SECONDS = 5.0
"""The least time PostgreSQL lets a daemon's transaction sit idle before ending its session (the lease's
length when that is longer; see ``DaemonConfig.idle_transaction_seconds``)."""

DEFAULT_MAX_BACKOFF_SECONDS = 600.0
"""The longest wait before a region whose ticks keep failing is ticked again (its backoff doubles the
interval per failure up to this; ``repart.controller.backoff``)."""
