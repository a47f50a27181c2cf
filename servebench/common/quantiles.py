"""The one definition of a percentile in servebench: nearest rank.

The p-th percentile of n values is the smallest value with at least p % of the values at
or below it: the value of rank ceil(p / 100 × n) in rising order (numpy's
`method="inverted_cdf"`, definition 1 of Hyndman & Fan). It is what MLPerf LoadGen and
HdrHistogram report, and it is always a latency some request had, never one between two
requests: a row's p99 and the SLO verdict taken from it cannot disagree, and the
empirical CDF drawn from it is the step function the requests make.

Every quantile the project computes comes from here — records' summaries, trials.csv's
`latency_p50 … latency_p99_9` and `slo_latency_s`, SLO search steps, stability windows,
Locust rows, the report's CDF curves and its bootstrap of p50/p99, and the quartiles and
intervals of `servebench overhead` — so that one number has one meaning wherever it is
shown (tests/test_one_percentile.py keeps other percentile calls out of servebench).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

METHOD = "inverted_cdf"


def percentile(values: np.ndarray | Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile (q in [0, 100]) of `values`; NaN when empty."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return float("nan")
    return float(np.percentile(array, q, method=METHOD))


def percentiles(
    values: np.ndarray | Sequence[float], qs: Sequence[float] | np.ndarray, *, axis: int = -1
) -> np.ndarray:
    """Several nearest-rank percentiles at once, along `axis` of a 1-D or 2-D array.

    The result has the percentiles first (shape `(len(qs), …)`), as numpy gives them; an
    empty axis gives NaN for each.
    """
    array = np.asarray(values, dtype=np.float64)
    q = np.asarray(qs, dtype=np.float64)
    if array.shape[axis] == 0:
        shape = (*q.shape, *np.delete(array.shape, axis % array.ndim))
        return np.full(shape, np.nan)
    return np.percentile(array, q, axis=axis, method=METHOD)
