"""A gang's live figures (its generators' merged latency sketches) and its graceful stop
(issue 24), on a real Dask LocalCluster against real HTTP servers in other processes.

What is checked: the sketch merge is the sketch of all samples; the live callback comes
during the run with growing counts; the last figures hold every record and their
percentiles are within the sketch's relative accuracy of the records' own (plus one rank:
the sketch ranks q(n-1), the records' nearest rank is ceil(qn)); a stop from a caller, or
SIGINT at the terminal (to the whole process group, as Ctrl-C is), keeps every record
measured, and the summary says the run stopped early. No timing is asserted.
"""

from __future__ import annotations

import numpy as np

from servebench.load.live import (
    RELATIVE_ACCURACY,
    GeneratorSketch,
    LiveMerge,
    decode,
    new_sketch,
)


def test_merged_generator_sketches_are_the_sketch_of_all_samples():
    """Two generators' sketches (each fed by batches, through its protobuf encoding) merged
    give the very bins, so the very quantiles, of one sketch fed every sample singly."""
    rng = np.random.default_rng(3)
    latency = rng.lognormal(-6, 1.5, 20_000)
    ok = rng.random(latency.size) > 0.05
    whole = new_sketch()
    for value in latency[ok].tolist():
        whole.add(value)
    merge = LiveMerge(2)
    for index, part in enumerate((slice(0, 12_345), slice(12_345, None))):
        sketch = GeneratorSketch()
        for chunk in np.array_split(np.arange(latency.size)[part], 7):
            sketch.add(latency[chunk], ok[chunk])
        snapshot = sketch.snapshot(in_flight=index)
        assert decode(snapshot["sketch"]).count == ok[part].sum()
        merge.update(index, snapshot)
    figures = merge.figures(elapsed=2.0)
    assert figures.completed == latency.size and figures.errors == (~ok).sum()
    assert figures.sent == latency.size + 1
    assert figures.by_generator == (12_345, latency.size - 12_345)
    assert figures.rate == 0.0  # no earlier figures to take a rate from
    for q, value in ((0.5, figures.p50), (0.9, figures.p90), (0.99, figures.p99)):
        assert value == whole.get_quantile_value(q)
        exact = np.quantile(latency[ok], q, method="lower")
        assert abs(value - exact) <= RELATIVE_ACCURACY * exact
    assert merge.figures(elapsed=4.0).rate == 0.0  # nothing more completed
