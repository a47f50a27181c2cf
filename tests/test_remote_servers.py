"""Scenarios against servers someone else runs (`launch: remote`).

Such a server serves its own model configuration: Triton's official containers run model
control `none`, TF Serving reads its model config. servebench checks each model is ready and
never loads one unless told the Triton is in explicit mode; it has no cold start to time.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from servebench.analysis.report import write_report
from servebench.scenario.runner import ScenarioRunner

SCENARIO = """\
name: remote
models:
  specs:
    - {spec}
servers:
  - name: theirs
    api: {api}
    launch: remote
    protocol: {protocol}
    url: {url}
{extra}workload:
  rates: [30]
  duration_s: 1
  warmup_s: 0.2
links: [direct]
"""
BATCHING_SPEC = "{layer_type: dense, depth: 2, width: 32, input_shape: [16], num_outputs: 4}"


def run_remote(tmp_path: Path, *, api: str, url: str, spec: str, protocol="http", extra=""):
    path = tmp_path / "remote.yaml"
    path.write_text(SCENARIO.format(api=api, url=url, spec=spec, protocol=protocol, extra=extra))
    return ScenarioRunner(path, output=tmp_path / "results").run()


def cold_start_rows(run: Path) -> int:
    path = run / "cold_start.csv"
    return len(pd.read_csv(path)) if path.is_file() and path.stat().st_size > 1 else 0


def test_triton_in_model_control_none_is_measured_without_loading(
    local_triton, triton_batching_model, tmp_path: Path
) -> None:
    model = triton_batching_model
    theirs = local_triton(model.repository, extra_args=["--model-control-mode=none"])
    outcome = run_remote(tmp_path, api="triton", url=theirs.endpoints.http_url, spec=BATCHING_SPEC)
    assert outcome.status == "complete", outcome.reason
    trials = pd.read_csv(outcome.directory.path / "trials.csv")
    assert list(trials.status) == ["ok"] and trials["count"].iloc[0] > 0
    assert cold_start_rows(outcome.directory.path) == 0  # nothing that only looks measured
    report = write_report(outcome.directory.path).path.read_text()
    assert "Not measured: remote server" in report


def test_a_remote_model_that_is_not_ready_is_one_error_naming_url_and_model(
    local_triton, triton_batching_model, tmp_path: Path
) -> None:
    theirs = local_triton(triton_batching_model.repository)  # explicit mode, nothing loaded
    url = theirs.endpoints.http_url
    outcome = run_remote(
        tmp_path, api="triton", url=url, spec=BATCHING_SPEC, extra="    ready_timeout_s: 1\n"
    )
    assert outcome.status == "failed"
    (reason,) = set(pd.read_csv(outcome.directory.path / "trials.csv").reason)
    assert url in reason and triton_batching_model.name in reason
    # It waited for the model what was left of the 1 s asked for, not the default 30 s.
    (waited,) = re.findall(r"not ready within ([0-9.]+) s", reason)
    assert float(waited) <= 1
    assert "model_control: explicit" in reason  # says how to let servebench load it
    assert not theirs.is_model_ready(triton_batching_model.name)  # servebench loaded nothing


def test_model_control_explicit_lets_servebench_load_a_remote_triton(
    local_triton, triton_batching_model, tmp_path: Path
) -> None:
    theirs = local_triton(triton_batching_model.repository)
    outcome = run_remote(
        tmp_path,
        api="triton",
        url=theirs.endpoints.http_url,
        spec=BATCHING_SPEC,
        extra="    model_control: explicit\n",
    )
    assert outcome.status == "complete", outcome.reason
    assert theirs.is_model_ready(triton_batching_model.name)
    assert cold_start_rows(outcome.directory.path) == 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_remote_tf_serving_is_measured(tfs_family, tmp_path: Path, protocol: str) -> None:
    spec = "{layer_type: dense, depth: 2, width: 16, input_shape: [8], num_outputs: 4}"
    extra = f"    grpc_url: {tfs_family.double.grpc_address}\n" if protocol == "grpc" else ""
    outcome = run_remote(
        tmp_path,
        api="tfs",
        url=tfs_family.double.rest_url,
        spec=spec,
        protocol=protocol,
        extra=extra,
    )
    assert outcome.status == "complete", outcome.reason
    trials = pd.read_csv(outcome.directory.path / "trials.csv")
    assert list(trials.status) == ["ok"] and (trials.errors == 0).all()


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ("{name: t, api: triton, model_control: explicit}", "only for remote servers"),
        (
            "{name: t, api: tfs, launch: remote, url: 'http://127.0.0.1:1', "
            "model_control: explicit}",
            "explicit is Triton's mode",
        ),
    ],
)
def test_model_control_is_checked_by_validate(tmp_path: Path, server: str, message: str) -> None:
    from servebench.scenario.validate import ScenarioError, load_scenario

    path = tmp_path / "s.yaml"
    path.write_text(
        f"name: s\nmodels: {{specs: [{BATCHING_SPEC}]}}\nservers: [{server}]\n"
        "workload: {rates: [1]}\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert any("model_control" in p and message in p for p in caught.value.problems)
