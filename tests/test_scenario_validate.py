"""Scenario files: every problem names file, line, YAML path, value and expectation."""

from pathlib import Path

import pytest
from scenario_checks import DENSE_SPEC, problems, write
from typer.testing import CliRunner

from servebench.cli import app
from servebench.netem import BUILTIN_PROFILES, profiles
from servebench.scenario.plan import expand
from servebench.scenario.runner import ScenarioRunner, scenario_hash
from servebench.scenario.validate import ScenarioError, load_scenario

GOOD = """\
name: study
models:
  grid:
    types: [dense, conv]
    depths: [1, 2]
    widths: [16]
servers:
  - name: triton
    api: triton
    settings:
      dynamic_batching: [false, true]
      instance_count: [1, 2]
      max_batch_size: 8
workload:
  rates: [50, 100]
  batch_sizes: [1, 4]
  duration_s: 2
  warmup_s: 0.5
links: [direct, lte]
slo: {percentile: 99, latency_ms: 50}
"""


# (replace this, with that) -> the one problem line expected, as "<line> <path>: <text>"
BAD = [
    ("rates: [50, 100]", "rates: [50, -5]", "15 workload.rates[1]: -5 — must be > 0"),
    (
        "rates: [50, 100]",
        "rates: [50, 50]",
        "15 workload.rates: [50, 50] — must not repeat a value",
    ),
    (
        "types: [dense, conv]",
        "types: [dense, cnn]",
        "4 models.grid.types[1]: 'cnn' — must be one of",
    ),
    ("depths: [1, 2]", "depths: [0, 2]", "5 models.grid.depths[0]: 0 — must be > 0"),
    ("widths: [16]", "widths: []", "6 models.grid.widths: [] — must have at least 1 item"),
    (
        "duration_s: 2",
        "duration_s: 2\n  colour: red",
        "18 workload.colour: 'red' — unknown key (allowed: mode,",
    ),
    (
        "api: triton",
        "api: torchserve",
        "9 servers[0].api: 'torchserve' — must be one of 'triton' or 'tfs'",
    ),
    # The old name of `api` is still read, and blamed as written.
    (
        "api: triton",
        "kind: torchserve",
        "9 servers[0].kind: 'torchserve' — must be one of 'triton' or 'tfs'",
    ),
    ("api: triton", "api: triton\n    kind: triton", "10 servers[0].kind: 'triton' — unknown key"),
    (
        "instance_count: [1, 2]",
        "instance_cnt: 2",
        "12 servers[0].settings.instance_cnt: 2 — unknown key",
    ),
    (
        "instance_count: [1, 2]",
        "instance_count: [1, -2]",
        "12 servers[0].settings.instance_count[1]: -2 — must be > 0",
    ),
    (
        "max_batch_size: 8",
        "max_batch_size: 2",
        "16 workload.batch_sizes[1]: 4 — batch 4 > max_batch_size 2 of server 'triton'",
    ),
    ("links: [direct, lte]", "links: [direct, 5g]", "19 links[1]: '5g' — not a built-in link"),
    (
        "links: [direct, lte]",
        "links: [direct, {name: x, rtt_s: -1}]",
        "19 links[1].rtt_s: -1 — must be >= 0",
    ),
    ("latency_ms: 50", "latency_ms: fast", "20 slo.latency_ms: 'fast' — must be a number"),
    ("percentile: 99", "percentile: 120", "20 slo.percentile: 120 — must be <= 100"),
    (
        "  rates: [50, 100]\n",
        "  mode: closed\n  rates: [50, 100]\n",
        "16 workload.rates: [50, 100] — only for mode open",
    ),
    (
        "  rates: [50, 100]\n",
        "  mode: closed\n  concurrency: [0]\n",
        "16 workload.concurrency[0]: 0 — must be > 0",
    ),
    (
        "  rates: [50, 100]\n",
        "",
        "14 workload.rates: open loop needs rates, a trace or search: max_rate",
    ),
    ("name: study", "name: my study", "1 name: 'my study' — must be letters, digits"),
    ("api: triton\n", "api: tfs\n", "8 servers[0].launch: TF Serving has no local launcher"),
    (
        "    api: triton\n",
        "    api: triton\n    launch: remote\n",
        "8 servers[0].url: a remote server needs its HTTP/REST address",
    ),
    (
        "    api: triton\n",
        "    api: triton\n    launch: remote\n    protocol: grpc\n    url: http://127.0.0.1:8000\n",
        "8 servers[0].grpc_url: a remote grpc server needs its gRPC address",
    ),
    ("warmup_s: 0.5", "warmup_s: -1", "18 workload.warmup_s: -1 — must be >= 0"),
    (
        "slo: {percentile: 99, latency_ms: 50}\n",
        "slo: {percentile: 99, latency_ms: 50}\ncost: {instance: m9.huge}\n",
        "21 cost.instance: 'm9.huge' — not in the price table",
    ),
    (
        "models:\n",
        "models:\n  resnet: true\n",
        "3 models.resnet: True — unknown key (allowed: specs, grid, mutate, resnet50, repository, files)",
    ),
]


@pytest.mark.parametrize(("old", "new", "expected"), BAD, ids=[b[2].split(":")[0] for b in BAD])
def test_bad_scenarios_name_file_line_field_and_reason(tmp_path: Path, old, new, expected):
    assert old in GOOD
    found = problems(tmp_path, GOOD.replace(old, new, 1))
    assert any(p.startswith(f"{tmp_path / 's.yaml'}:{expected}") for p in found), found


def test_the_old_name_kind_reads_as_api_with_a_one_line_warning(tmp_path: Path):
    old = tmp_path / "old.yaml"
    old.write_text(GOOD.replace("api: triton", "kind: triton"))
    new = write(tmp_path, GOOD)
    scenario = load_scenario(old)
    assert scenario.servers[0].api == "triton"
    assert scenario.notes == [
        f"{old}:9 servers[0].kind: now called api (the old name still works, for now)"
    ]
    assert load_scenario(new).notes == []
    # The same study: an earlier run of it resumes, its trials keep their ids.
    assert scenario_hash(scenario) == scenario_hash(load_scenario(new))
    assert [t.id for t in expand(scenario).trials] == [
        t.id for t in expand(load_scenario(new)).trials
    ]
    shown = CliRunner().invoke(app, ["scenario", "validate", str(old)])
    assert shown.exit_code == 0, shown.output
    assert f"warning: {old}:9 servers[0].kind: now called api" in shown.output
    # A run (a cluster job's too, which no one watches) keeps it in run.json.
    directory = ScenarioRunner(old, output=tmp_path / "results")._directory()
    assert directory.run["warnings"] == scenario.notes


def test_every_problem_is_reported_at_once(tmp_path: Path):
    text = GOOD.replace("rates: [50, 100]", "rates: [-1]").replace("lte]", "5g]")
    found = problems(tmp_path, text)
    assert len(found) == 2


SIX_ERRORS = f"""\
name: six
models:
  specs:
    - {DENSE_SPEC}
servers:
  - name: a
    api: triton
    settings: {{instance_count: [1, 0]}}
  - name: b
    api: triton
    settings: {{max_batch_size: 8}}
workload:
  rates: [50, -5]
  think_time_s: 1
  batch_sizes: [1, 64]
links: [direct, 5g]
cost: {{instance: m9.huge}}
"""


def test_six_independent_errors_are_all_reported_in_one_pass(tmp_path: Path):
    # A field error, a rule in the same section, a settings matrix, a batch size against
    # another server's matrix, a link and the price table: once they came in three rounds.
    found = problems(tmp_path, SIX_ERRORS)
    path = tmp_path / "s.yaml"
    assert found == [
        f"{path}:8 servers[0].settings.instance_count[1]: 0 — must be > 0",
        f"{path}:13 workload.rates[1]: -5 — must be > 0",
        f"{path}:14 workload.think_time_s: 1 — only for mode closed",
        f"{path}:15 workload.batch_sizes[1]: 64 — batch 64 > max_batch_size 8 of server 'b'",
        found[4],
        found[5],
    ], found
    assert found[4].startswith(f"{path}:16 links[1]: '5g' — not a built-in link")
    assert found[5].startswith(f"{path}:17 cost.instance: 'm9.huge' — not in the price table")
    result = CliRunner().invoke(app, ["scenario", "validate", str(path)])
    assert result.exit_code == 2
    assert result.output.count("error:") == 6, result.output


def test_values_that_look_like_markup_are_printed_as_written(tmp_path: Path):
    path = write(tmp_path, GOOD.replace("name: study", 'name: "[/x] y"'))
    result = CliRunner().invoke(app, ["scenario", "validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "name: '[/x] y' — must be letters" in result.output


def test_rules_run_beside_the_field_errors_of_their_own_section(tmp_path: Path):
    text = GOOD.replace(
        "  rates: [50, 100]\n", "  mode: closed\n  rates: [50]\n  concurrency: [0]\n"
    )
    text = text.replace("latency_ms: 50", "latency_ms: -1")
    found = problems(tmp_path, text)
    assert any("workload.concurrency[0]: 0 — must be > 0" in p for p in found), found
    assert any("workload.rates: [50] — only for mode open" in p for p in found), found
    assert any("slo.latency_ms: -1 — must be > 0" in p for p in found), found
    assert len(found) == 3, found


def test_not_yaml_and_duplicate_keys(tmp_path: Path):
    assert problems(tmp_path, "name: [unclosed\n")[0].startswith(f"{tmp_path / 's.yaml'}:")
    found = problems(
        tmp_path, GOOD.replace("  duration_s: 2\n", "  duration_s: 2\n  duration_s: 3\n")
    )
    assert found == [f"{tmp_path / 's.yaml'}:18 workload.duration_s: duplicate key"]
    assert "a scenario must be a mapping" in problems(tmp_path, "- 1\n- 2\n")[0]


def test_unsafe_yaml_is_refused(tmp_path: Path):
    found = problems(tmp_path, "name: !!python/object/apply:os.system ['true']\n")
    assert "not valid YAML" in found[0]


def test_plan_counts_and_ids(tmp_path: Path):
    scenario = load_scenario(write(tmp_path, GOOD))
    plan = expand(scenario, tmp_path)
    # 4 settings x 4 models x 2 links x 2 batch sizes x 2 rates
    assert len(plan.settings) == 4 and len(plan.models) == 4
    assert len(plan.trials) == 4 * 4 * 2 * 2 * 2
    assert len({t.id for t in plan.trials}) == len(plan.trials)
    again = expand(load_scenario(write(tmp_path, GOOD, "copy.yaml")), tmp_path)
    assert [t.id for t in again.trials] == [t.id for t in plan.trials]
    assert plan.settings[0].id == "triton[dynamic_batching=off,instance_count=1]"
    per_trial = 0.5 + 2 + 1.0
    assert plan.trials[0].estimated_s == pytest.approx(per_trial)
    assert plan.estimated_s > len(plan.trials) * per_trial


def test_closed_loop_and_search_levels(tmp_path: Path):
    closed = GOOD.replace("  rates: [50, 100]\n", "  mode: closed\n  concurrency: [1, 2, 4]\n")
    assert len(expand(load_scenario(write(tmp_path, closed)), tmp_path).trials) == 4 * 4 * 2 * 2 * 3
    search = GOOD.replace("  rates: [50, 100]\n", "  search: max_rate\n")
    plan = expand(load_scenario(write(tmp_path, search, "search.yaml")), tmp_path)
    assert {t.level.kind for t in plan.trials} == {"search"}
    no_slo = search.replace("slo: {percentile: 99, latency_ms: 50}\n", "")
    assert any("slo: search: max_rate needs an slo" in p for p in problems(tmp_path, no_slo))


SCENARIOS = sorted((Path(__file__).parent.parent / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_every_shipped_scenario_validates_and_plans(path: Path):
    plan = expand(load_scenario(path), path.parent)
    assert plan.trials, path
    assert path.read_text().startswith("#"), "each scenario opens with the question it answers"


def test_quickstart_is_small_enough_for_a_fresh_machine():
    plan = expand(load_scenario(SCENARIOS[0].parent / "quickstart.yaml"))
    assert plan.estimated_s < 300  # its trials stop once decided: about 2 s direct, 10 s lte
    assert {s.values["dynamic_batching"] for s in plan.settings} == {False, True}
    assert {t.link.name for t in plan.trials} == {"direct", "wifi", "lte"}


def test_an_early_stopped_trial_is_estimated_until_its_slo_is_decided(tmp_path: Path):
    """With workload.stop a trial measures until the first of the engine's looks (one a
    second from min_duration_s) whose error-spending level its answers decide at — a
    closed loop's answers at its clients over the link's round trip — never past
    duration_s; `scenario plan` says so."""
    closed = "  mode: closed\n  concurrency: [4]\n  batch_sizes: [1]\n  duration_s: 10\n"
    text = GOOD.replace(
        "  rates: [50, 100]\n  batch_sizes: [1, 4]\n  duration_s: 2\n",
        closed + "  stop: {min_duration_s: 1, min_requests: 100}\n",
    )
    plan = expand(load_scenario(write(tmp_path, text, "stop.yaml")), tmp_path)
    by_link = {t.link.name: t.estimated_s for t in plan.trials}
    overhead = 0.5 + 1.0  # the warm-up, and a trial's fixed overhead
    # direct: thousands of answers by the first look, enough at its strict level.
    assert by_link["direct"] == pytest.approx(overhead + 1.0)
    # lte: ~56 answers a second; the 368 that decide a p99 at 95 % are not enough while
    # the looks may spend little of the error budget: a later look, before the end.
    lte = by_link["lte"] - overhead
    assert 368 / (4 / (0.070 + 0.001)) < lte < 10 and lte == pytest.approx(round(lte))
    slow = expand(load_scenario(write(tmp_path, text.replace("[4]", "[1]"), "s1.yaml")))
    assert {t.link.name: t.estimated_s for t in slow.trials}["lte"] == overhead + 10  # the end
    out = CliRunner().invoke(app, ["scenario", "plan", str(tmp_path / "stop.yaml")])
    assert "(workload.stop: each trial until its SLO is decided, at most duration_s)" in out.output


def test_settings_that_do_not_apply_collapse(tmp_path: Path):
    text = GOOD.replace("instance_count: [1, 2]", "max_queue_delay_us: [0, 100, 500]")
    plan = expand(load_scenario(write(tmp_path, text)), tmp_path)
    # batching off: one setting (the delay means nothing); on: one per delay
    assert len(plan.settings) == 1 + 3


def test_an_empty_list_for_a_number_or_list_setting_is_one_error(tmp_path):
    from servebench.scenario.validate import load_scenario

    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nmodels: {specs: [{layer_type: dense, depth: 1, width: 8, input_shape: [4]}]}\n"
        "servers: [{name: t, api: triton, settings: {instance_count: []}}]\n"
        "workload: {rates: [1]}\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert caught.value.problems == [
        f"{path}:3 servers[0].settings.instance_count: [] — must have at least 1 item(s)"
    ]


# -- links resolved once (issue 21, item 6) ------------------------------------------------

LINKS = GOOD.replace(
    "links: [direct, lte]",
    "links: [direct, profiles/slow.yaml, profiles/stemmed.yml, {name: inline-one, rtt_s: 0.02}]",
)


def _profiles(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "slow.yaml").write_text(
        "name: slow-office\ndown_mbps: 5\nup_mbps: 2\nrtt_s: 0.05\n"
    )
    (tmp_path / "profiles" / "stemmed.yml").write_text("rtt_s: 0.01\n")


def test_trials_carry_resolved_profiles_with_the_ids_of_earlier_runs(tmp_path: Path):
    _profiles(tmp_path)
    plan = expand(load_scenario(write(tmp_path, LINKS)), tmp_path)
    first = plan.trials[:16:4]  # per link: 2 batch sizes x 2 rates
    links = [t.link for t in first]
    assert [(p.name, p.rtt_s) for p in links] == [
        ("direct", 0.0), ("slow-office", 0.05), ("stemmed", 0.01), ("inline-one", 0.02),
    ]  # fmt: skip
    assert links[0] is BUILTIN_PROFILES["direct"]
    # The ids this scenario had before links were resolved at expansion (the id hashes a
    # file link's path as written), so `--resume` of an older run still matches.
    assert [t.id for t in first] == ["t0cd99e778c", "tc064e380d8", "t5c267810e7", "t28de76a896"]
    # trials.csv's `link` column is the profile's name, a file's too (not its path).
    assert [t.coordinates["link"] for t in first] == [p.name for p in links]


def test_validation_and_expansion_read_a_profile_file_once(tmp_path: Path, monkeypatch):
    _profiles(tmp_path)
    reads: list[Path] = []
    real = profiles.load_yaml

    def counting(path: Path):
        reads.append(Path(path).resolve())
        return real(path)

    monkeypatch.setattr(profiles, "load_yaml", counting)
    scenario = load_scenario(write(tmp_path, LINKS))
    assert sorted(p.name for p in reads) == ["slow.yaml", "stemmed.yml"]  # validation read them
    expand(scenario, tmp_path)
    expand(scenario, tmp_path)
    assert sorted(p.name for p in reads) == ["slow.yaml", "stemmed.yml"]  # and kept them


def test_link_profile_names_must_be_distinct(tmp_path: Path):
    _profiles(tmp_path)
    (tmp_path / "profiles" / "wifi.yaml").write_text("rtt_s: 0.03\n")  # named after its file
    text = LINKS.replace("links: [direct,", "links: [wifi, profiles/wifi.yaml, direct,")
    (found,) = problems(tmp_path, text)
    assert found.startswith(f"{tmp_path / 's.yaml'}:19 links: link profile names must be")
    assert "['wifi', 'wifi', 'direct', 'slow-office', 'stemmed', 'inline-one']" in found
