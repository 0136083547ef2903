"""The memory a task adds to its Python worker at its peak.

Linux keeps a process's peak resident set (``VmHWM`` in ``/proc/self/status``) and resets it to the
current resident set when ``5`` is written to ``/proc/self/clear_refs``. A task first hands back to
the system what the worker's allocators keep unused (Arrow's pool, and glibc's heap by
``malloc_trim``), then resets the peak, and reads it when it ends: the peak above where it started is
what the task's rows, the state it read and the files it wrote took at once, whatever allocated them
(Arrow's pool, the buffers Spark's Arrow stream hands over, Python objects). In a worker that Spark
reuses for task after task, memory an allocator keeps without handing it back (Python's own small
object arenas, for one) is resident already and not counted again. Handing memory back costs the
task's start a fraction of a millisecond on a small heap and a few milliseconds after tens of MiB of
small frees, and the next allocations fault their pages in again. Where the peak cannot be reset (not
Linux, or a ``/proc`` without ``clear_refs``) nothing is handed back and nothing is measured (None).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_RESET_PEAK = "5"


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``int malloc_trim(size_t pad)``, where the C library has it."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


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
        if not _CLEAR_REFS.exists():
            return cls(None)
        pa.default_memory_pool().release_unused()
        if _TRIM is not None:
            _TRIM(0)
        try:
            _CLEAR_REFS.write_text(_RESET_PEAK)
            return cls(_kib("VmHWM"))  # the peak just reset: the resident set now
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
