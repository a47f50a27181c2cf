"""How trials and numbers are written for people: one place so the report, the terminal
table and the comparison name things the same way."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from servebench.common.readable import missing

# How a load level reads, by its kind: in labels, and compact (the terminal table's narrow
# column: an open-loop rate, closed-loop clients).
_LOAD_FORMATS = {"rate": ("rate {}/s", "{}/s"), "concurrency": ("conc {}", "c{}")}


def load_text(row: Any, *, compact: bool = False) -> str:
    """'rate 50/s', 'conc 8' (compact: '50/s', 'c8'), 'search', or '' — the load level
    with its kind."""
    kind, level = _get(row, "load_kind"), _get(row, "load_level")
    if missing(level):
        return "" if missing(kind) else str(kind)
    formats = _LOAD_FORMATS.get(kind)
    if formats is None:
        return f"{kind or 'load'} {level:g}"
    return formats[compact].format(f"{level:g}")


def trial_label(row: Any) -> str:
    """Setting · model · batch · link · load, leaving out what the row does not have."""
    parts = [
        _get(row, "setting") or _get(row, "server"),
        _get(row, "model"),
        None if missing(_get(row, "batch_size")) else f"b{int(_get(row, 'batch_size'))}",
        _get(row, "link"),
        load_text(row) or None,
    ]
    return " · ".join(str(p) for p in parts if not missing(p) and p != "")


def number(value: Any, digits: int = 1) -> str:
    if missing(value):
        return "–"
    return f"{float(value):,.{digits}f}"


def si(value: Any, unit: str = "") -> str:
    """1.2 G, 350 M ... for FLOP/s and bytes."""
    if missing(value):
        return "–"
    value = float(value)
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def money(value: Any) -> str:
    if missing(value):
        return "–"
    value = float(value)
    return f"${value:,.2f}" if value >= 1 else f"${value:.4f}"


def _get(row: Any, name: str) -> Any:
    if isinstance(row, dict):
        return row.get(name)
    if isinstance(row, pd.Series):
        return row.get(name)
    return getattr(row, name, None)


LABEL_FIELDS = ("setting", "model", "batch_size", "link", "load_level")


def varying_labels(rows: pd.DataFrame, fields: tuple[str, ...] = LABEL_FIELDS) -> list[str]:
    """Labels naming only what differs between `rows`, so legends stay short.

    A run with one model does not repeat the model's name in every legend entry; a field
    that does vary keeps the full `trial_label` wording.
    """
    present = [f for f in fields if f in rows.columns]
    varying = {f for f in present if rows[f].astype(object).nunique(dropna=False) > 1}
    if not varying:
        varying = set(present[:1])
    blank = {f: None for f in LABEL_FIELDS if f not in varying}
    if "load_level" in blank:
        blank["load_kind"] = None
    if "setting" in blank:
        blank["server"] = None
    return [trial_label({**row, **blank}) for row in rows.to_dict("records")]


# Short names of server settings for narrow tables: `triton[dynamic_batching=off,
# instance_count=1]` reads as `b-off i1`, and a legend printed once says what b and i are.
SETTING_ABBREVIATIONS = {
    "dynamic_batching": "b",
    "enable_batching": "b",
    "instance_count": "i",
    "instance_kind": "k",
    "max_batch_size": "mb",
    "max_queue_delay_us": "qd",
    "preferred_batch_sizes": "pb",
    "batch_timeout_us": "bt",
    "num_batch_threads": "nt",
    "max_enqueued_batches": "eb",
    "rest_api_num_threads": "rt",
    "intra_op_threads": "ia",
    "inter_op_threads": "ie",
}
_SETTING = re.compile(r"^(?P<server>[^\[]+)\[(?P<values>.*)\]$")
_PAIR_START = re.compile(r",(?=\w+=)")


def parse_setting(setting: str) -> tuple[str, dict[str, str]]:
    """`triton[dynamic_batching=off,instance_count=1]` → ('triton', {...: 'off', ...: '1'}).

    The runner names a setting by its server and the values that vary between the run's
    settings (scenario/plan.py); a value may itself hold commas (`[4, 8]`), so pairs are
    split only before the next `key=`.
    """
    match = _SETTING.match(setting)
    if not match:
        return setting, {}
    pairs = [p.split("=", 1) for p in _PAIR_START.split(match["values"]) if "=" in p]
    return match["server"], {k: v for k, v in pairs}


def short_settings(settings: list[str]) -> tuple[dict[str, str], list[str]]:
    """Short labels of `settings` and the legend lines that explain their letters.

    The server's name is kept only when the run has more than one server; a key no
    table knows is abbreviated by its words' initials, or kept whole if that would
    collide with another key's letters.
    """
    parsed = {s: parse_setting(s) for s in dict.fromkeys(settings)}
    servers = {server for server, _ in parsed.values()}
    keys = list(dict.fromkeys(k for _, values in parsed.values() for k in values))
    # Known keys keep their table letters (Triton's dynamic_batching and TF Serving's
    # enable_batching are both `b`: the server's name tells them apart); another key
    # gets its initials, or stays whole where the initials are already someone's.
    abbreviation = {k: SETTING_ABBREVIATIONS[k] for k in keys if k in SETTING_ABBREVIATIONS}
    for key in keys:
        if key not in abbreviation:
            short = "".join(w[0] for w in key.split("_") if w)
            abbreviation[key] = key if short in abbreviation.values() else short
    labels = {}
    for setting, (server, values) in parsed.items():
        parts = [_short_value(abbreviation[k], v) for k, v in values.items()]
        if len(servers) > 1 or not parts:
            parts.insert(0, server)
        labels[setting] = " ".join(parts)
    meaning: dict[str, list[str]] = {}
    for key in keys:
        if abbreviation[key] != key:
            meaning.setdefault(abbreviation[key], []).append(key)
    legend = [f"{short} = {' / '.join(names)}" for short, names in meaning.items()]
    return labels, legend


def _short_value(abbreviation: str, value: str) -> str:
    """`b` + `off` → `b-off`; `i` + `2` → `i2`; `pb` + `[4, 8]` → `pb4+8`."""
    if value.startswith("[") and value.endswith("]"):
        value = "+".join(v.strip() for v in value[1:-1].split(",") if v.strip()) or "none"
    if value[:1].isdigit():
        return f"{abbreviation}{value}"
    return f"{abbreviation}-{value.lower().removeprefix('kind_')}"
