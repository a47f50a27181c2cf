"""Bad numbers, missing files and huge expansions are refused at validate time.

Issue 10 items 3 and 4: every number finite and bounded (hard ceilings, `limits:` where a
real study may need more), expansions counted before they are built, and what a run would
trip over later (files, addresses, request and model sizes) checked up front.
"""

import time
from pathlib import Path

import pytest
from scenario_checks import DENSE_SPEC, problems, write
from typer.testing import CliRunner

from servebench.cli import app
from servebench.scenario.plan import expand
from servebench.scenario.validate import load_scenario

BASE = f"""\
name: limits
models:
  specs:
    - {DENSE_SPEC}
servers:
  - name: t
    api: triton
workload:
  rates: [10]
  duration_s: 2
links: [direct]
"""


def edit(old: str, new: str) -> str:
    assert old in BASE
    return BASE.replace(old, new, 1)


# (edit of BASE) -> "<line> <yaml path>: <start of what is expected>"
REFUSED = [
    # item 3: no upper or finite bounds
    (("duration_s: 2", "duration_s: 1e400"), "10 workload.duration_s: '1e400' — must be a finite"),
    (("duration_s: 2", "duration_s: .inf"), "10 workload.duration_s: inf — must be a finite"),
    (
        ("duration_s: 2", "duration_s: 2\n  warmup_s: 1e300"),
        "11 workload.warmup_s: '1e300' — must be <= 86,400; raise limits.max_trial_s",
    ),
    (
        ("rates: [10]", "mode: closed\n  concurrency: [100000000000000000000000000]"),
        "10 workload.concurrency[0]: 100000000000000000000000000 — must be <= 10,000; "
        "raise limits.max_concurrency",
    ),
    (
        ("rates: [10]", "mode: closed\n  concurrency: [1e26]"),
        "10 workload.concurrency[0]: '1e26' — must be an integer",
    ),
    (
        (
            "  specs:",
            f"  mutate: {{base: {DENSE_SPEC}, count: 100000000}}\n  specs:",
        ),
        "3 models.mutate.count: 100000000 — must be <= 1,000; raise limits.max_models",
    ),
    (("rates: [10]", "rates: [1000000000]"), "9 workload.rates[0]: 1000000000 — must be <="),
    (("rates: [10]", "rates: [0.00001]"), "9 workload.rates[0]: 1e-05 — must be >= 0.001"),
    (("duration_s: 2", "duration_s: 2\n  requests: 100000000000"), "11 workload.requests:"),
    (("duration_s: 2", "duration_s: 2\n  timeout_s: 1.0e+5"), "11 workload.timeout_s: 100000.0"),
    (("rates: [10]", "rates: [10]\n  batch_sizes: [1000000]"), "10 workload.batch_sizes[0]:"),
    (("name: limits", "name: limits\nseed: -1"), "2 seed: -1 — must be >= 0"),
    (
        ("links: [direct]", "limits: {max_concurrency: 1.0e+12}\nlinks: [direct]"),
        "11 limits.max_concurrency: 1000000000000.0 — must be <=",
    ),
    (
        ("api: triton", "api: triton\n    settings: {max_queue_delay_us: 1.0e+12}"),
        "8 servers[0].settings.max_queue_delay_us: 1000000000000.0 — must be <= 60000000",
    ),
    # item 4: "valid", then the run fails
    (("rates: [10]", "rates: [.inf]"), "9 workload.rates[0]: inf — must be a finite number"),
    (
        ("input_shape: [4]", "input_shape: [100000000000]"),
        "4 models.specs[0].input_shape[0]: 100000000000 — must be <= 67108864",
    ),
    (
        ("links: [direct]", "links: [direct, missing.yaml]"),
        "11 links[1]: 'missing.yaml' — ",
    ),
    (
        ("duration_s: 2", "duration_s: 2\n  trace: missing.txt"),
        "11 workload.trace: 'missing.txt' — ",
    ),
    (
        ("api: triton", "api: triton\n    launch: remote\n    url: 'not a url'"),
        "9 servers[0].url: 'not a url' — host 'not a url' is not a host name or IP address",
    ),
    (
        (
            "api: triton",
            "api: triton\n    launch: remote\n    url: http://h:8000\n"
            "    protocol: grpc\n    grpc_url: nope",
        ),
        "11 servers[0].grpc_url: 'nope' — a gRPC address is host:port",
    ),
    (
        ("api: triton", "api: triton\n    launch: remote\n    url: 'http://h:0'"),
        "9 servers[0].url: 'http://h:0' — port 0",
    ),
    (("  specs:", "  repository: no-such-dir\n  specs:"), "3 models.repository: 'no-such-dir'"),
    (
        ("links: [direct]", "links: [{name: x, down_mbps: .inf}]"),
        "11 links[0].down_mbps: inf — must be a finite number",
    ),
    (
        ("input_shape: [4]", "input_shape: [10000000]"),
        "4 models.specs[0]: dense input [10000000] x batch 8 is 305 MiB per request; "
        "must be <= 256 MiB; raise limits.max_request_mb",
    ),
    (
        ("  specs:", "  grid: {types: [attention], depths: [1], widths: [32, 30]}\n  specs:"),
        "3 models.grid.widths[1]: 30 — attention needs widths divisible by heads (4)",
    ),
    (
        (
            "  specs:",
            "  grid: {types: [conv], depths: [1], widths: [8], input_shapes: {conv: [5]}}\n  specs:",
        ),
        "3 models.grid.input_shapes.conv: [5] — conv takes (height, width, channels), got 1 dims",
    ),
    (
        ("api: triton", "api: triton\n    settings: {max_batch_size: []}"),
        "8 servers[0].settings.max_batch_size: [] — must have at least 1 item",
    ),
    (
        ("  specs:", "  grid: {types: [dense], depths: [64], widths: [65536]}\n  specs:"),
        "3 models.grid: dense depth 64 width 65536 has 1,032,227 MiB of weights; "
        "must be <= 4,096 MiB; raise limits.max_model_mb",
    ),
]


@pytest.mark.parametrize(
    ("change", "expected"), REFUSED, ids=[r[1].split(" — ")[0] for r in REFUSED]
)
def test_refused_with_file_line_field_and_limit(tmp_path: Path, change, expected):
    text = edit(*change)
    if "x batch 8" in expected:
        text = text.replace("rates: [10]", "rates: [10]\n  batch_sizes: [1, 8]")
    found = problems(tmp_path, text)
    assert any(p.startswith(f"{tmp_path / 's.yaml'}:{expected}") for p in found), found


def test_files_that_exist_but_do_not_parse(tmp_path: Path):
    write(tmp_path, "rtt_s: fast\n", "slow.yaml")
    write(tmp_path, "100\nsoon\n", "trace.txt")
    text = edit("links: [direct]", "links: [direct, slow.yaml]").replace(
        "duration_s: 2", "duration_s: 2\n  trace: trace.txt\n  rates: []"
    )
    text = text.replace("  rates: [10]\n", "")
    found = problems(tmp_path, text)
    assert any("links[1]: 'slow.yaml' — " in p and "rtt_s" in p for p in found), found
    assert any("workload.trace: 'trace.txt' — " in p and "line 2" in p for p in found), found


def test_files_relative_to_the_scenario_are_found(tmp_path: Path):
    write(tmp_path, "rtt_s: 0.01\n", "slow.yaml")
    write(tmp_path, "1000\n2000\n", "trace.txt")
    text = edit("links: [direct]", "links: [direct, slow.yaml]")
    text = text.replace("  rates: [10]\n", "  trace: trace.txt\n")
    scenario = load_scenario(write(tmp_path, text))
    assert scenario.workload.trace == Path("trace.txt")


def test_a_huge_grid_is_refused_before_any_model_is_built(tmp_path: Path, monkeypatch):
    import model_zoo.mutate

    def never(*args, **kwargs):
        raise AssertionError("a spec was built")

    monkeypatch.setattr(model_zoo.mutate, "parse_spec", never)
    values = ", ".join(str(i) for i in range(1, 201))
    grid = f"  grid: {{types: [dense, conv, lstm, gru, attention], depths: [{values}], "
    grid += f"widths: [{values}]}}\n  specs:"
    found = problems(tmp_path, edit("  specs:", grid))  # `never`: no spec was built
    assert any(
        "3 models.grid: 5 types x 200 depths x 200 widths = 200,000 models; must be <= 1,000; "
        "raise limits.max_models" in p
        for p in found
    ), found


def test_a_huge_settings_matrix_is_refused_before_it_is_listed(tmp_path: Path):
    delays = ", ".join(str(i) for i in range(1000))
    counts = ", ".join(str(i) for i in range(1, 201))
    settings = f"api: triton\n    settings: {{max_queue_delay_us: [{delays}], "
    settings += f"instance_count: [{counts}]}}"
    started = time.perf_counter()
    found = problems(tmp_path, edit("api: triton", settings))
    assert time.perf_counter() - started < 5
    assert any("servers[0].settings: 200,000 combinations; must be <=" in p for p in found), found


def test_too_many_trials_are_refused(tmp_path: Path):
    text = edit("rates: [10]", "rates: [1, 2, 3, 4]\n  batch_sizes: [1, 2, 4, 8]")
    text += "limits: {max_trials: 10}\n"
    found = problems(tmp_path, text)
    assert any(
        p.startswith(f"{tmp_path / 's.yaml'}:1 (top level): up to 16 trials; must be <= 10")
        for p in found
    ), found


def test_size_problems_come_with_the_schema_problems_of_the_same_file(tmp_path: Path):
    """Every problem in one pass (issue 33): a schema error elsewhere in the file no longer
    hides the trial count over its limit, nor a model over the byte caps."""
    text = edit("rates: [10]", "rates: [1, 2, 3, 4]\n  batch_sizes: [1, 2, 4, 8]\n  warmup_s: -1")
    text = text.replace("depth: 1, width: 8", "depth: 2, width: 4096")
    text += "limits: {max_trials: 10, max_model_mb: 1}\n"
    found = problems(tmp_path, text)
    assert any("workload.warmup_s: -1 — must be >= 0" in p for p in found), found
    assert any("(top level): up to 16 trials; must be <= 10" in p for p in found), found
    assert any("MiB of weights; must be <= 1 MiB" in p for p in found), found
    out = CliRunner().invoke(app, ["scenario", "validate", str(tmp_path / "s.yaml")])
    assert out.exit_code == 2 and "up to 16 trials" in out.output and "warmup_s" in out.output


def test_limits_can_be_raised_where_a_study_needs_more(tmp_path: Path):
    text = edit("rates: [10]", "mode: closed\n  concurrency: [20000]\n  warmup_s: 100000")
    assert problems(tmp_path, text)
    text += "limits: {max_concurrency: 50000, max_trial_s: 200000}\n"
    scenario = load_scenario(write(tmp_path, text))
    assert scenario.workload.concurrency == [20000]
    assert scenario.limits.max_concurrency == 50000


def test_plan_warns_past_the_trial_and_hour_thresholds(tmp_path: Path):
    small = expand(load_scenario(write(tmp_path, BASE)), tmp_path)
    assert small.warnings() == []
    long = edit("duration_s: 2", "duration_s: 3600").replace("rates: [10]", "rates: [1, 2]")
    long += "limits: {warn_trials: 1, warn_hours: 1}\n"
    plan = expand(load_scenario(write(tmp_path, long, "long.yaml")), tmp_path)
    warnings = plan.warnings()
    assert any(w.startswith("2 trials, more than limits.warn_trials (1)") for w in warnings)
    assert any(
        w.startswith("estimated 2.0 hours, more than limits.warn_hours (1)") for w in warnings
    )
    for command in ("validate", "plan"):
        result = CliRunner().invoke(app, ["scenario", command, str(tmp_path / "long.yaml")])
        assert result.exit_code == 0, result.output
        assert "warning:" in result.output and "limits.warn_hours" in result.output


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_cli_refuses_infinite_numbers_with_exit_2_and_no_traceback(tmp_path: Path, command):
    path = write(tmp_path, edit("duration_s: 2", "duration_s: 1e400"))
    result = CliRunner().invoke(app, ["scenario", command, str(path)])
    assert result.exit_code == 2, result.output
    assert "workload.duration_s" in result.output and "finite" in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
