"""The memory a task adds to its Python worker at its peak.

Linux keeps a process's peak resident set (``VmHWM`` in ``/proc/self/status``) and resets it to the
current resident set when ``5`` is written to ``/proc/self/clear_refs``. A task resets it when it
starts and reads it when it ends: the peak above the resident set it started with is what the task's
rows, the state it read and the files it wrote held at once, whatever allocated them (Arrow's pool,
the buffers Spark's Arrow stream hands over, Python objects), also in a Python worker that Spark
reuses for task after task. Elsewhere nothing is measured (None).
"""

from __future__ import annotations

from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_RESET_PEAK = "5"


def _kib(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status``, in bytes."""
    for line in _STATUS.read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"{_STATUS} has no {field}")


class TaskMemory:
    """The peak memory added since ``start()`` (module docstring); ``peak()`` is None where the
    process's peak resident set cannot be reset and read."""

    def __init__(self, resident_at_start: int | None) -> None:
        self._resident_at_start = resident_at_start

    @classmethod
    def start(cls) -> TaskMemory:
        try:
            _CLEAR_REFS.write_text(_RESET_PEAK)
            return cls(_kib("VmRSS"))
        except OSError:
            return cls(None)

    def peak(self) -> int | None:
        """Bytes the peak resident set stood above the resident set at ``start()``."""
        if self._resident_at_start is None:
            return None
        try:
            return max(0, _kib("VmHWM") - self._resident_at_start)
        except OSError:
            return None
