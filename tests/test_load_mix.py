"""A weighted mix of models in one load, without a server: the seeded picker, and the engine
sending each request to the model it picks, with in-process clients.

Shares are checked against the weights within a stated binomial bound: a request goes to a
model of weight share p independently (a seeded draw), so the count of n requests that went
to it has standard deviation sqrt(n p (1 - p)); the tests allow 4.5 of those (a false alarm
about once in 150,000 runs for a fair draw; with the seeds fixed here, never).
"""

from __future__ import annotations

import dataclasses
import json
import math

import loads
import numpy as np
import pyarrow as pa
import pytest
from loads import Given
from test_load_engine import FakeClient

from servebench.load import LoadPlan, LoadSettings, MemoryRecordSink, Target, constant, run
from servebench.load.mix import BLOCK, Mix, MixTarget
from servebench.results import RECORD_SCHEMA, conform_records
from servebench.trial_row import TrialCoordinates, build_row

SIGMAS = 4.5


def picks_of(mix: Mix, start: int, count: int) -> np.ndarray:
    """The targets (indices) of requests start .. start + count - 1."""
    return mix.codes(np.arange(start, start + count, dtype=np.int64)) - 1


def within_binomial(count: int, n: int, p: float) -> bool:
    """`count` of `n` draws of probability `p` within SIGMAS standard deviations."""
    return abs(count - n * p) <= SIGMAS * math.sqrt(n * p * (1 - p))


def mix_of(weights: dict[str, float], seed: int = 7, delay: float = 0.001) -> Mix:
    targets = []
    for model, weight in weights.items():
        client = FakeClient(delay=delay)
        targets.append(MixTarget(model, weight, client, (client.encode(1, {}),)))
    return Mix(targets, seed)


def run_mix(mix: Mix, settings: LoadSettings, sink: MemoryRecordSink):
    """Run `mix`'s models (their weights, stand-in clients and seed) as one load plan."""
    settings = dataclasses.replace(settings, seed=mix.seed)
    source = Given(by_model={t.model: t.client for t in mix.targets})
    targets = [Target(t.model, t.weight) for t in mix.targets]
    plan = LoadPlan(settings, source, tuple(targets))
    return run(plan, records=sink, handle_signals=False, use_uvloop=False)


def test_picks_follow_the_weights():
    mix = mix_of({"a": 3, "b": 1})
    n = 200_000
    picks = picks_of(mix, 0, n)
    assert within_binomial(int((picks == 0).sum()), n, 0.75)
    assert set(np.unique(picks)) == {0, 1}


def test_picks_are_a_function_of_seq_and_seed():
    """The same seed picks the same sequence, one request at a time or in ranges, in any
    order and across block edges; another seed picks another."""
    one, again = mix_of({"a": 3, "b": 1}, seed=3), mix_of({"a": 3, "b": 1}, seed=3)
    seqs = [*range(0, 50), *range(BLOCK - 5, BLOCK + 5), 3 * BLOCK + 1, 7]
    index = {model: i for i, model in enumerate(one.models)}
    assert [index[one.target(s).model] for s in seqs] == [
        int(picks_of(again, s, 1)[0]) for s in seqs
    ]
    assert np.array_equal(picks_of(one, BLOCK - 10, 20), picks_of(again, BLOCK - 10, 20))
    # The records' codes, found again from seq off the hot path, are 1 + the same picks.
    shuffled = np.array(seqs[::-1], dtype=np.int64)
    assert list(one.codes(shuffled)) == [index[one.target(int(s)).model] + 1 for s in shuffled]
    other = mix_of({"a": 3, "b": 1}, seed=4)
    assert not np.array_equal(picks_of(one, 0, 1000), picks_of(other, 0, 1000))


def test_three_models_and_tiny_weights():
    mix = mix_of({"a": 1, "b": 1e-9, "c": 2})
    n = 3 * BLOCK
    picks = picks_of(mix, 0, n)
    for index, p in ((0, 1 / 3), (2, 2 / 3)):
        assert within_binomial(int((picks == index).sum()), n, p)
    assert (picks <= 2).all()


@pytest.mark.parametrize(
    "weights, message",
    [
        ({"a": 0.0, "b": 1.0}, "weight 0.0"),
        ({"a": float("nan"), "b": 1.0}, "weight nan"),
        ({"a": -1.0, "b": 1.0}, "weight -1.0"),
        ({"a": float("inf"), "b": 1.0}, "weight inf"),
        ({}, "at least one model"),
    ],
)
def test_bad_weights_are_refused(weights, message):
    with pytest.raises(ValueError, match=message):
        mix_of(weights)


def test_engine_sends_each_request_to_its_model_and_records_it():
    """Open loop: one schedule over two clients; each record names its model, the picks
    are the mix's own, each client got exactly its requests, and the summary's per-model
    figures add up to the whole."""
    mix = mix_of({"a": 3, "b": 1}, seed=11)
    sink = MemoryRecordSink()
    settings = LoadSettings(arrivals=constant(2000), count=2000, trial_id="t-mix")
    summary = run_mix(mix, settings, sink)
    table = sink.table()
    assert table.schema == RECORD_SCHEMA
    seq = table["seq"].to_numpy()
    models = table["model"].to_pylist()
    expected = [mix.models[i] for i in picks_of(mix, 0, int(seq.max()) + 1)]
    assert models == [expected[s] for s in seq]
    assert within_binomial(models.count("a"), len(models), 0.75)
    assert [t.client.calls for t in mix.targets] == [
        expected.count("a"),
        expected.count("b"),
    ]  # warm-up none: every request sent is a measured one
    assert summary.mix is not None and set(summary.mix) == {"a", "b"}
    a, b = summary.mix["a"], summary.mix["b"]
    assert a["count"] + b["count"] == summary.count == 2000
    assert a["share"] == pytest.approx(a["count"] / 2000)
    assert a["weight"] == 3.0 and a["errors"] == 0 and a["ok"] == a["count"]
    assert a["latency_p50"] <= a["latency_p99"]
    row = build_row(_where(), summary)
    assert json.loads(row.mix_json)["b"]["count"] == b["count"]


def test_closed_loop_mix():
    mix = mix_of({"a": 1, "b": 1}, seed=5)
    sink = MemoryRecordSink()
    settings = LoadSettings(concurrency=4, count=1000, trial_id="t-mix")
    summary = run_mix(mix, settings, sink)
    models = sink.table()["model"].to_pylist()
    assert len(models) == 1000 and set(models) == {"a", "b"}
    assert within_binomial(models.count("a"), 1000, 0.5)
    assert summary.mix is not None and summary.mix["a"]["count"] == models.count("a")


def test_one_model_leaves_the_model_column_null_and_the_row_empty():
    sink = MemoryRecordSink()
    settings = LoadSettings(arrivals=constant(1000), count=50)
    summary = loads.load(FakeClient(), settings, records=sink)
    assert sink.table()["model"].null_count == 50
    assert summary.mix is None and build_row(_where(), summary).mix_json is None


def test_records_of_older_runs_read_the_model_as_null():
    old = pa.schema([f for f in RECORD_SCHEMA if f.name != "model"])
    table = pa.Table.from_pylist([], schema=old)
    conformed = conform_records(table, "old")
    assert conformed.schema.names == RECORD_SCHEMA.names
    assert conformed.schema.field("model").type == pa.string()


def _where() -> TrialCoordinates:
    return TrialCoordinates(
        trial_id="t-mix", index=0, server="s", api="triton", setting="s",
        model="mix(a*3+b*1)", batch_size=1, link="direct", load_kind="rate",
        load_level=2000.0, launch="local", protocol="http",
    )  # fmt: skip
