"""The best in-band share any channel-count sequence can reach on a trace: an upper bound for a policy.

A policy chooses the channel count of each batch from the batches before it. Knowing every batch's load
in advance, ``in_band_bound`` finds, by dynamic programming over the channel count of each batch, the
largest number of batches whose utilization can lie inside the band, over every sequence of counts that
keeps the rules a policy is judged by (``repart.controller.replay.summarize`` counts them the same way):

- the first batch runs at the start count, every count lies in ``[min_channels, max_channels]``;
- no change of N is followed by an opposite change within ``reversal_window`` batches (a change is
  between batch ``i`` and ``i + 1``; the next change, between ``j`` and ``j + 1``, reverses it when it
  goes the other way and ``j - i <= reversal_window``);
- at most ``max_changes`` changes (None: no limit);
- at most ``max_over_in_a_row`` batches in a row over their budget (utilization above 1);
- with ``unforeseen``, the batches marked run at the count of the batch before them and count as out
  of band (the *reactive* variant below).

**The utilization model.** Batch ``t`` at ``n`` channels can run at any utilization in
``[low[t, n], high[t, n]]``: ``best_balance_utilization`` gives the best key-preserving balance
``max(rows / n, hottest key's rows) · cost per row / budget`` as the low end, and ``imbalance`` times it as
the high end (the busiest channel of a function within the tolerance α carries at most α times the
least loaded one, so at most α times the mean). A batch counts as in band when the band meets that
interval, and as over budget only when even its low end is above 1: both in the policy's favour, so no
policy that keeps its functions within α can do better, however it chooses N.

**The reactive variant.** A policy decides the count of a batch before it sees it, so the first batch
of a burst runs at the count chosen on the batch before, sized for a load without the burst.
``unforeseen`` marks such batches: the bound keeps their count at the previous batch's and counts
them out of band. This is exact as stated, but it is a reference for what reacting costs rather than
a proof: a policy whose count happens to hold a burst's first batch in band can beat it there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from repart.errors import InvalidInput
from repart.protocol.snapshot import Snapshot
from repart.validation import NON_NEGATIVE_INT, POSITIVE_INT, Interval, check

_INFEASIBLE = -1


@dataclass(frozen=True)
class InBandBound:
    """The bound: the most batches in band (``in_band``) out of ``batches``, their ``share``, and one
    sequence of channel counts that reaches it (``n_over_time``, one count per batch)."""

    in_band: int
    batches: int
    n_over_time: tuple[int, ...]

    @property
    def share(self) -> float:
        """``in_band / batches``."""
        return self.in_band / self.batches


def best_balance_utilization(
    snapshots: Sequence[Snapshot],
    costs_per_row: Sequence[float],
    budgets: Sequence[float],
    max_channels: int,
) -> np.ndarray:
    """``u[t, n - 1]``: the busiest channel's utilization of batch ``t`` at ``n`` channels (1 to
    ``max_channels``) under its best key-preserving balance, ``max(rows / n, hottest key's rows) ·
    cost per row / budget`` (the replay's oracle model)."""
    check("max_channels", max_channels, POSITIVE_INT)
    n = np.arange(1, max_channels + 1, dtype=np.float64)
    rows = []
    for snapshot, cost, budget in zip(snapshots, costs_per_row, budgets, strict=True):
        counts = snapshot.item_columns.counts
        hottest = float(counts.max()) if len(counts) else 0.0
        rows.append(np.maximum(snapshot.tuples / n, hottest) * cost / budget)
    return np.array(rows, dtype=np.float64).reshape(len(rows), max_channels)


def in_band_bound(
    low: np.ndarray,
    high: np.ndarray,
    band: tuple[float, float],
    start: int,
    *,
    min_channels: int = 1,
    max_changes: int | None = None,
    reversal_window: int = 3,
    max_over_in_a_row: int = 2,
    unforeseen: Sequence[bool] | None = None,
) -> InBandBound:
    """The best in-band count over every channel-count sequence within the rules (module docstring).

    ``low`` and ``high`` are ``(batches, max_channels)`` arrays: column ``n - 1`` holds the lowest and
    highest utilization batch ``t`` can run at on ``n`` channels. ``InvalidInput`` naming the field
    when the shapes differ, ``start`` is outside ``[min_channels, max_channels]``, or no sequence keeps
    the rules (the start count alone runs more than ``max_over_in_a_row`` batches over budget).
    """
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    if low.ndim != 2 or low.shape != high.shape or low.shape[0] == 0:
        raise InvalidInput(
            "high", f"must have the shape of low, (batches >= 1, max_channels), got {high.shape}"
        )
    batches, max_channels = low.shape
    check("min_channels", min_channels, Interval(int, 1, max_channels))
    check("start", start, Interval(int, min_channels, max_channels))
    window = check("reversal_window", reversal_window, NON_NEGATIVE_INT)
    over_limit = check("max_over_in_a_row", max_over_in_a_row, NON_NEGATIVE_INT)
    changes = 0 if max_changes is None else check("max_changes", max_changes, NON_NEGATIVE_INT)
    held = np.zeros(batches, dtype=bool) if unforeseen is None else np.asarray(unforeseen, dtype=bool)
    if held.shape != (batches,):
        raise InvalidInput("unforeseen", f"must hold one flag per batch ({batches}), got {held.shape}")
    in_band = (low <= band[1]) & (high >= band[0]) & ~held[:, None]
    over = low > 1
    allowed = np.zeros(max_channels, dtype=bool)
    allowed[min_channels - 1 :] = True

    # State (n - 1, r, c, o): r = 0 no change within the window, 1..W the last change was up r batches
    # ago, W+1..2W down r - W batches ago; c changes so far (always 0 without a limit); o batches in a
    # row over budget. The value is the most batches in band so far, _INFEASIBLE where unreachable.
    shape = (max_channels, 2 * window + 1, changes + 1, over_limit + 1)
    values = np.full(shape, _INFEASIBLE, dtype=np.int64)
    first_over = int(over[0, start - 1])
    if first_over > over_limit:
        raise InvalidInput(
            "low", f"runs batch 0 over budget at the start count {start}, with no batch allowed"
        )
    values[start - 1, 0, 0, first_over] = int(in_band[0, start - 1])
    history = [values]
    for t in range(1, batches):
        values = _step(values, window, max_changes is not None, bool(held[t]))
        values = _arrive(values, in_band[t], over[t], allowed)
        history.append(values)
    best = int(values.max())
    if best == _INFEASIBLE:
        raise InvalidInput("low", f"leaves no channel-count sequence within {over_limit} batches over budget")
    path = _backtrack(history, in_band, over, window, max_changes is not None, held)
    return InBandBound(best, batches, path)


def _advance(values: np.ndarray, window: int) -> np.ndarray:
    """Values after one batch without a change: every r counts one batch more, past W it is free."""
    moved = np.full_like(values, _INFEASIBLE)
    moved[:, 0] = values[:, 0]
    for offset in (0, window):  # up, then down
        for since in range(1, window + 1):
            r = offset + since
            target = 0 if since == window else r + 1
            moved[:, target] = np.maximum(moved[:, target], values[:, r])
    return moved


def _step(values: np.ndarray, window: int, counted: bool, frozen: bool) -> np.ndarray:
    """The best value of every state on arrival at the next batch, before its own figures: staying,
    scaling up from a smaller count or down from a larger one, within the reversal rule."""
    result = _advance(values, window)
    if frozen:
        return result
    up_from = values[:, [0, *range(1, window + 1)]].max(axis=1)  # (n, c, o)
    down_from = values[:, [0, *range(window + 1, 2 * window + 1)]].max(axis=1)
    # the best over every strictly smaller (larger) count
    up = np.full_like(up_from, _INFEASIBLE)
    up[1:] = np.maximum.accumulate(up_from, axis=0)[:-1]
    down = np.full_like(down_from, _INFEASIBLE)
    down[:-1] = np.maximum.accumulate(down_from[::-1], axis=0)[::-1][1:]
    up_state = 1 if window else 0
    down_state = window + 1 if window else 0
    for moved, state in ((up, up_state), (down, down_state)):
        if counted:  # one change more: c -> c + 1
            shifted = np.full_like(moved, _INFEASIBLE)
            shifted[:, 1:] = moved[:, :-1]
            moved = shifted
        result[:, state] = np.maximum(result[:, state], moved)
    return result


def _arrive(values: np.ndarray, in_band: np.ndarray, over: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The batch's own figures: its run over budget (o + 1 when over, else 0) and its in-band count."""
    result = np.full_like(values, _INFEASIBLE)
    runs = values.shape[3]
    for n in np.flatnonzero(allowed):
        if over[n]:
            result[n, :, :, 1:] = values[n, :, :, : runs - 1]
        else:
            result[n, :, :, 0] = values[n].max(axis=2)
    reachable = result != _INFEASIBLE
    result[reachable] += np.broadcast_to(in_band[:, None, None, None], result.shape)[reachable]
    return result


def _backtrack(
    history: list[np.ndarray],
    in_band: np.ndarray,
    over: np.ndarray,
    window: int,
    counted: bool,
    frozen: np.ndarray,
) -> tuple[int, ...]:
    """One sequence of counts reaching the best value: from the best final state, back through a
    predecessor whose value plus the batch's in-band count gives the state's value."""
    state = tuple(int(i) for i in np.unravel_index(int(history[-1].argmax()), history[-1].shape))
    path = [state[0] + 1]
    for t in range(len(history) - 1, 0, -1):
        previous, wanted = history[t - 1], history[t][state] - int(in_band[t, state[0]])
        for candidate in zip(*np.nonzero(previous == wanted), strict=True):
            before = tuple(int(i) for i in candidate)
            if (
                _successor(before, state[0], window, counted, bool(frozen[t]), bool(over[t, state[0]]))
                == state
            ):
                state = before
                break
        path.append(state[0] + 1)
    return tuple(reversed(path))


def _successor(
    state: tuple[int, ...], n_next: int, window: int, counted: bool, frozen: bool, over_next: bool
) -> tuple[int, ...] | None:
    """The state one batch after ``state`` at count index ``n_next`` (None when the rules forbid it);
    the run over budget is checked against its limit by the caller's values."""
    n, r, c, o = state
    o_next = o + 1 if over_next else 0
    if n_next == n:
        since = 0 if r == 0 else (r if r <= window else r - window)
        r_next = 0 if r == 0 or since == window else r + 1
        return (n, r_next, c, o_next)
    if frozen:
        return None
    up = n_next > n
    if r and (r <= window) != up:
        return None
    r_next = 0 if window == 0 else (1 if up else window + 1)
    return (n_next, r_next, c + int(counted), o_next)
