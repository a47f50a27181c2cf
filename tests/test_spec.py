"""ModelSpec: validation that names the field, stable ids, YAML/JSON round trips."""

from pathlib import Path

import pytest

from model_zoo.spec import ModelSpec, SpecError, load_specs, parse_spec, resnet50_spec, save_specs

GOOD = {"layer_type": "conv", "depth": 3, "width": 16, "input_shape": [8, 8, 3]}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"layer_type": "transformer"}, "layer_type"),
        ({"depth": 0}, "depth"),
        ({"width": -4}, "width"),
        ({"input_shape": [8, 8]}, "input_shape"),
        ({"input_shape": [8, 0, 3]}, "input_shape"),
        ({"num_outputs": 0}, "num_outputs"),
        ({"dtype": "int8"}, "dtype"),
        ({"kernel_size": 4}, "kernel_size"),
        ({"heads": 2}, "heads"),
        ({"seq_len": 10}, "seq_len"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_conv_spec_names_the_field(change, field):
    with pytest.raises(SpecError, match=rf"^models\.yaml\[0\] {field}(\.\d+)?: "):
        parse_spec({**GOOD, **change}, where="models.yaml[0] ")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"layer_type": "lstm", "depth": 1, "width": 8, "input_shape": [32, 32, 3]}, "input_shape"),
        ({"layer_type": "dense", "depth": 1, "width": 8, "input_shape": [4, 4]}, "input_shape"),
        (
            {"layer_type": "attention", "depth": 1, "width": 10, "input_shape": [4], "heads": 4},
            "heads",
        ),
        (
            {"layer_type": "gru", "depth": 1, "width": 8, "input_shape": [4], "kernel_size": 3},
            "kernel_size",
        ),
        (
            {"layer_type": "resnet50", "depth": 18, "width": 64, "input_shape": [224, 224, 3]},
            "depth",
        ),
        (
            {"layer_type": "lstm", "depth": 1, "width": 8, "input_shape": [4], "seq_len": 0},
            "seq_len",
        ),
    ],
)
def test_type_specific_rules_name_the_field(data, field):
    with pytest.raises(SpecError, match=rf"^{field}"):
        parse_spec(data)


def test_not_a_mapping_is_rejected():
    with pytest.raises(SpecError, match="must be a mapping"):
        parse_spec(["conv", 3])


def test_knob_defaults_are_filled_per_type():
    conv = parse_spec(GOOD)
    assert (conv.kernel_size, conv.residual, conv.heads, conv.seq_len) == (3, False, None, None)
    attention = parse_spec({"layer_type": "attention", "depth": 2, "width": 32, "input_shape": [8]})
    assert (attention.heads, attention.seq_len) == (4, 16)
    assert attention.served_input_shape == (16, 8)


def test_id_is_stable_and_content_derived():
    a = parse_spec(GOOD)
    b = parse_spec({**GOOD, "kernel_size": 3})  # the default, written out
    c = parse_spec({**GOOD, "width": 17})
    assert a.id == b.id
    assert a.id != c.id
    assert a.id.startswith("conv-d3-w16-") and len(a.id.split("-")[-1]) == 6
    assert resnet50_spec().id.startswith("resnet50-224-")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip(tmp_path: Path, suffix: str):
    specs = [
        parse_spec(GOOD),
        parse_spec({"layer_type": "gru", "depth": 2, "width": 8, "input_shape": [5], "seq_len": 7}),
        resnet50_spec(64, num_outputs=5),
    ]
    path = tmp_path / f"family{suffix}"
    save_specs(specs, path)
    loaded = load_specs(path)
    assert loaded == specs
    assert [s.id for s in loaded] == [s.id for s in specs]


def test_load_reports_file_and_index(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "- {layer_type: dense, depth: 1, width: 4, input_shape: [3]}\n"
        "- {layer_type: dense, depth: 1, width: 0, input_shape: [3]}\n"
    )
    with pytest.raises(SpecError, match=r"bad\.yaml\[1\] width: "):
        load_specs(path)


def test_replace_rederives_knobs_for_a_new_type():
    conv = parse_spec({**GOOD, "kernel_size": 5})
    dense = conv.replace(layer_type="dense", input_shape=[12])
    assert dense.kernel_size is None
    assert isinstance(dense, ModelSpec)


def test_every_problem_of_a_spec_is_reported_at_once():
    # A knob of another type, a field error and a rule: once, only the first came out.
    with pytest.raises(SpecError) as caught:
        parse_spec({**GOOD, "depth": 0, "heads": 2, "kernel_size": 4}, where="m.yaml[0] ")
    lines = str(caught.value).splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "m.yaml[0] depth",
        "m.yaml[0] heads",
        "m.yaml[0] kernel_size",
    ], lines


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"depth": 10**9}, "depth"),
        ({"width": 10**7}, "width"),
        ({"input_shape": [10**11, 8, 3]}, "input_shape.0"),
        ({"input_shape": [8192, 8192, 3]}, "input_shape"),  # each dim fine, the sample not
        ({"num_outputs": 10**9}, "num_outputs"),
        ({"kernel_size": 1001}, "kernel_size"),
    ],
)
def test_sizes_have_ceilings(change, field):
    with pytest.raises(SpecError, match=rf"^{field}: "):
        parse_spec({**GOOD, **change})


def test_a_long_sequence_counts_against_the_sample_size():
    data = {"layer_type": "lstm", "depth": 1, "width": 8, "input_shape": [2**20], "seq_len": 128}
    with pytest.raises(SpecError, match=r"^input_shape: 134,217,728 elements per sample"):
        parse_spec(data)
