"""Every pair of the load pipeline's features works together (issue 36): a model mix, a
gang of generators, an emulated link, stability windows, early stop and input data, on the
real local Triton.

`servebench load` drives each pair of the five it has (a link is a scenario's), and one
scenario trial drives all six at once, so every pair with the link too. What each feature
leaves is checked, never a timing: the mix's model column, the gang's generator column and
block, the windows or the early stop's reason, the link's floor under every latency, and
the input data's samples (one sample's expected output is wrong on purpose: exactly the
requests that sent it, in whichever part, are `wrong_answer`, so the samples were sent in
their global order and every answer checked).
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from servebench.cli import app

SAMPLES = 16
# A spec the scenario test uses too, and a second one for its mix.
A = {"layer_type": "dense", "depth": 1, "width": 8, "input_shape": [4], "num_outputs": 3}
B = {"layer_type": "dense", "depth": 2, "width": 16, "input_shape": [4], "num_outputs": 3}
FEATURES = ("mix", "gang", "stability", "early_stop", "input_data")


@pytest.fixture(scope="module")
def served(local_triton_module, tmp_path_factory):
    """Model A and its twin (the same network under another name, so one sample file's
    expected outputs hold for both), on one Triton; the samples with those outputs."""
    import torch

    from model_zoo.export import TritonSettings, export_triton
    from model_zoo.spec import parse_spec
    from model_zoo.torch_builder import build_torch

    spec = parse_spec(A)
    module = build_torch(spec, seed=0)
    out = tmp_path_factory.mktemp("pairs-export")
    export = export_triton(module, spec, out, TritonSettings(max_batch_size=8))
    repository = out / "triton-python"
    twin = f"{export.name}-twin"
    shutil.copytree(repository / export.name, repository / twin)
    config = repository / twin / "config.pbtxt"
    config.write_text(config.read_text().replace(f'"{export.name}"', f'"{twin}"'))
    server = local_triton_module(repository, load_models=[export.name, twin])
    x = np.random.default_rng(3).standard_normal((SAMPLES, 4)).astype(np.float32)
    with torch.no_grad():
        y = module(torch.from_numpy(x)).numpy()
    y[0] = y[0] + 1.0  # sample 0's expected answer is wrong: its requests must say so
    samples = out / "samples.npz"
    np.savez(samples, **{"input": x, "expected/output": y})
    return server.endpoints.http_url, export.name, twin, samples


def _options(feature: str, models: tuple[str, str], samples: Path) -> list[str]:
    a, twin = models
    return {
        "mix": ["--mix", f"{a}=3", "--mix", f"{twin}=1"],
        "gang": ["--generators", "2"],
        "stability": ["--stability", "--window", "0.5", "--stability-percentage", "90"],
        "early_stop": ["--early-stop-ms", "10000", "--min-duration", "0.3", "--min-requests", "50"],
        "input_data": ["--input-data", str(samples)],
    }[feature]


@pytest.mark.parametrize("pair", list(itertools.combinations(FEATURES, 2)), ids="+".join)
def test_servebench_load_runs_each_pair(served, tmp_path, pair):
    url, a, twin, samples = served
    out, records = tmp_path / "summary.json", tmp_path / "records.parquet"
    args = ["load", "--url", url, "--protocol", "triton-http", "--concurrency", "2"]
    args += ["--metrics-url", "", "--json", str(out), "--records", str(records)]
    if "mix" not in pair:
        args += ["--model", a]
    if "stability" not in pair:
        args += ["--duration", "20" if "early_stop" in pair else "1"]  # early stop: far sooner
    for feature in pair:
        args += _options(feature, (a, twin), samples)
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 3), result.output  # 3: INVALID (see input data below)
    summary = json.loads(out.read_text())
    table = pq.read_table(records).to_pandas()
    # Every measured request is in the records; stability's summary covers its last windows.
    assert 0 < summary["count"] <= len(table)
    assert summary["count"] == len(table) or summary["stable"] is not None
    if "mix" in pair:
        assert set(table.model) == {a, twin} and set(summary["mix"]) == {a, twin}
    else:
        assert table.model.isna().all() and summary["mix"] is None
    if "gang" in pair:
        assert set(table.generator) == {0, 1} and summary["gang"]["partial"] is False
    else:
        assert table.generator.isna().all() and summary["gang"] is None
    if "stability" in pair:
        assert summary["windows"]
        # Whichever decides first ends it: the windows agreeing, or the early stop.
        decided = (summary["stop_reason"] or "").startswith("SLO met")
        assert summary["stable"] is not None or ("early_stop" in pair and decided)
    if "early_stop" in pair:
        assert summary["slo_confidence_level"] is not None
        if "stability" not in pair:
            assert summary["stop_reason"].startswith("SLO met"), summary["stop_reason"]
    if "input_data" in pair:
        # Request seq sends sample seq % 16 (batch 1), over every part and model.
        wrong = table.error_kind == "wrong_answer"
        assert (wrong == (table.seq % SAMPLES == 0)).all()
        assert set(summary["errors_by_kind"]) == {"wrong_answer"}  # of the requests it covers
    else:
        assert summary["errors"] == 0, summary["errors_by_kind"]


LINK = "name: flat5\nrtt_s: 0.01\n"


def test_a_scenario_trial_runs_every_feature_at_once(tmp_path, triton_install):
    """A mix through a link, from a gang of two, with stability windows, early stop and
    input data: every pair of the six in one trial."""
    import pandas as pd

    from servebench.results import read_gang
    from servebench.scenario.runner import ScenarioRunner

    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "flat5.yaml").write_text(LINK)
    x = np.random.default_rng(5).standard_normal((SAMPLES, 4)).astype(np.float32)
    np.savez(tmp_path / "samples.npz", input=x)
    from model_zoo.spec import parse_spec

    a, b = parse_spec(A).id, parse_spec(B).id
    text = (
        "name: pairs\n"
        "seed: 5\n"
        "models:\n"
        "  specs:\n"
        f"    - {json.dumps(A)}\n"
        f"    - {json.dumps(B)}\n"
        "servers:\n"
        "  - {name: triton, api: triton, settings: {max_batch_size: 4}}\n"
        "links: [links/flat5.yaml]\n"
        "workload:\n"
        "  mode: closed\n"
        "  concurrency: [2]\n"
        "  warmup_s: 0.2\n"
        "  timeout_s: 5\n"
        "  inputs: samples.npz\n"
        "  generators: {count: 2}\n"
        "  stability: {window_s: 0.5, tolerance: 0.9, max_windows: 6}\n"
        "  stop: {min_duration_s: 0.3, min_requests: 50}\n"
        "  mix:\n"
        f"    - {{model: {a}, weight: 3}}\n"
        f"    - {{model: {b}, weight: 1}}\n"
        "slo: {percentile: 99, latency_ms: 10000}\n"
    )
    path = tmp_path / "pairs.yaml"
    path.write_text(text)
    outcome = ScenarioRunner(path, output=tmp_path / "results").run()
    assert outcome.status == "complete", outcome.reason
    run_dir = outcome.directory.path
    (row,) = pd.read_csv(run_dir / "trials.csv").itertuples()
    assert row.status == "ok" and row.link == "flat5" and row.errors == 0
    records = pq.read_table(run_dir / "records.parquet").to_pandas()
    assert 0 < row.count <= len(records)  # stability: the summary is its last windows
    assert set(records.model) == {a, b} and set(json.loads(row.mix_json)) == {a, b}
    assert set(records.generator) == {0, 1}
    assert records.latency.min() >= 0.01  # the link's round trip, in every part
    gang = read_gang(row.gang_json)
    assert gang is not None and gang.link is not None and gang.link.links == 2
    decided = isinstance(row.stop_reason, str) and row.stop_reason.startswith("SLO met")
    assert decided or row.stable in (True, False)
