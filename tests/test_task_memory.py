"""A task's peak memory: the peak resident set above the one at its start, reset at every start (a
freed block that malloc hands out again is resident already, hence the bounds a little below the sizes)."""

from __future__ import annotations

import numpy as np

from repart.spark.task_memory import TaskMemory

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
