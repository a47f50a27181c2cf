"""How trials and numbers are written for people: one place so the report, the terminal
table and the comparison name things the same way."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def load_text(row: Any) -> str:
    """'rate 50/s', 'conc 8', 'search', or '' — the load level with its kind."""
    kind, level = _get(row, "load_kind"), _get(row, "load_level")
    if missing(level):
        return "" if missing(kind) else str(kind)
    level_text = f"{level:g}"
    if kind == "rate":
        return f"rate {level_text}/s"
    if kind == "concurrency":
        return f"conc {level_text}"
    return f"{kind or 'load'} {level_text}"


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


def ms(seconds: Any, digits: int = 1) -> str:
    """Seconds shown as milliseconds (files stay in seconds; people read ms)."""
    if missing(seconds):
        return "–"
    value = float(seconds) * 1e3
    if value != 0 and abs(value) < 10 ** (-digits):
        return f"{value:.2g}"
    return f"{value:,.{digits}f}"


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
