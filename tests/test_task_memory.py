"""A task's peak memory: the peak resident set above the one at its start, reset at every start (a
freed block that malloc hands out again is resident already, hence the bounds a little below the sizes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from repart.spark import task_memory
from repart.spark.task_memory import TaskMemory

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="the peak resident set is reset through Linux's /proc"
)

MIB = 2**20


def touched(megabytes: int) -> np.ndarray:
    """``megabytes`` MiB, every page written (so that it is resident)."""
    block = np.empty(megabytes * MIB, dtype=np.uint8)
    block[::4096] = 1
    return block


def test_a_task_peak_counts_what_it_held_at_once_and_not_what_an_earlier_task_held() -> None:
    first = TaskMemory.start()
    block = touched(96)
    del block
    peak = first.peak()
    assert peak is not None and 90 * MIB <= peak < 128 * MIB
    second = TaskMemory.start()  # the earlier 96 MiB peak is forgotten
    block = touched(32)
    del block
    later = second.peak()
    assert later is not None and 28 * MIB <= later < 64 * MIB


def test_arrow_memory_an_earlier_task_freed_is_counted_again() -> None:
    """Arrow's pool keeps what it freed; a task hands it back first, so each of two equal tasks in one
    worker counts its own 64 MiB."""
    peaks = []
    for _ in range(2):
        memory = TaskMemory.start()
        block = pa.allocate_buffer(64 * MIB)
        np.frombuffer(block, dtype=np.uint8)[::4096] = 1
        del block
        peaks.append(memory.peak())
    assert all(peak is not None and peak >= 0.9 * 64 * MIB for peak in peaks), peaks


def test_heap_memory_an_earlier_task_freed_is_counted_again() -> None:
    """glibc keeps freed heap memory below a live block resident; a task trims it first, so each of two
    equal tasks of 1,000 blocks of 48 KiB (below the size glibc maps on its own) counts its own 47 MiB,
    with a long-lived 100 KiB block (a worker's own objects) allocated above them."""
    peaks, long_lived = [], []
    for _ in range(2):
        memory = TaskMemory.start()
        blocks = [bytearray(48 * 1024) for _ in range(1000)]  # zero-filled: every page written
        long_lived.append(bytearray(100 * 1024))
        del blocks
        peaks.append(memory.peak())
    assert all(peak is not None and peak >= 0.9 * 1000 * 48 * 1024 for peak in peaks), peaks


def test_nothing_is_measured_where_the_peak_cannot_be_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_memory, "_CLEAR_REFS", Path("/nonexistent/clear_refs"))
    assert TaskMemory.start().peak() is None
