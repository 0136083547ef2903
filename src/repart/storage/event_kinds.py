"""The kinds of audit events repart writes, in a module of their own with no imports, so that
``repart events list --help`` names them without loading the database layer."""

# Every event kind repart writes (a test checks the kinds written in the source against it): the
# controller's decisions (``repart.controller.tick``), the operator's actions
# (``repart.controller.actions``, ``repart.storage.modes``, ``repart snapshot delete``, ``repart region
# delete``, ``repart resume`` ending a backoff, ``repart plans prune``), a job's report of a failed
# plan (``repart.storage.plan_reports``) and a call the HTTP API refused (``repart.api.app``).
EVENT_KINDS = (
    "initialized",
    "activated",
    "no-change",
    "recommended",
    "rollback",
    "scaled",
    "mode-changed",
    "plan-failed",
    "snapshot-deleted",
    "plan-pruned",
    "region-deleted",
    "access-refused",
    "backoff-ended",
)
