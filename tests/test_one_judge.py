"""One judge of "meets the SLO": no latency is compared with a bound outside it.

Read from the source (ast), as tests/test_one_percentile.py reads percentiles: a comparison
(`<`, `<=`, `>`, `>=`) with a latency or percentile on one side and a bound or SLO on the
other, anywhere in servebench/ but `common/slo_judge.py`, fails. A point value held
against the bound decides met or missed without saying how sure it is, and a second place
deciding is a second rule that drifts from the first; callers ask `slo_judge` instead.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "servebench" / "common" / "slo_judge.py"
# Words that name a latency or one of its percentiles, and words that name a bound.
LATENCY = re.compile(r"latenc(y|ies)|percentiles?|quantiles?|p\d{2,3}", re.IGNORECASE)
BOUND = re.compile(r"bound|slo", re.IGNORECASE)
# Files allowed a comparison of their own, and how many (none: analysis/ and recommend
# ask the judge through analysis/slo.py since issue 33's headlines).
KNOWN: dict[str, int] = {}


def _words(node: ast.AST) -> set[str]:
    """The words of the names in an expression: identifiers and attributes split at
    underscores, and string subscripts (`row["latency_p99"]`)."""
    words: set[str] = set()
    for part in ast.walk(node):
        name = None
        if isinstance(part, ast.Name):
            name = part.id
        elif isinstance(part, ast.Attribute):
            name = part.attr
        elif isinstance(part, ast.Constant) and isinstance(part.value, str):
            name = part.value
        if name:
            words.update(w for w in re.split(r"[_.\W]+", name) if w)
    return words


def _names(words: set[str], pattern: re.Pattern[str]) -> bool:
    return any(pattern.fullmatch(word) for word in words)


def latency_bound_comparisons(path: Path, root: Path = ROOT) -> list[str]:
    """Each comparison in `path` with a latency on one side and a bound on the other."""
    found = []
    compares = [
        n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, ast.Compare)
    ]
    for node in sorted(compares, key=lambda n: (n.lineno, n.col_offset)):
        if not all(isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in node.ops):
            continue
        sides = [_words(side) for side in (node.left, *node.comparators)]
        for left, right in itertools.pairwise(sides):
            if (_names(left, LATENCY) and _names(right, BOUND)) or (
                _names(left, BOUND) and _names(right, LATENCY)
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
                break
    return found


def test_no_latency_meets_a_bound_outside_the_judge() -> None:
    sources = [p for p in sorted((ROOT / "servebench").rglob("*.py")) if p != HOME]
    assert len(sources) > 100
    stray, known = [], {}
    for path in sources:
        hits = latency_bound_comparisons(path)
        relative = str(path.relative_to(ROOT))
        if relative in KNOWN:
            known[relative] = len(hits)
        else:
            stray += hits
    assert not stray, "decide it with servebench.common.slo_judge:\n" + "\n".join(stray)
    assert known == KNOWN, f"the known exceptions changed; update KNOWN: {known}"


def test_the_guard_sees_what_it_forbids(tmp_path: Path) -> None:
    probe = tmp_path / "x.py"
    probe.write_text(
        "met = valid and latency <= bound\n"
        "ok = p.latency_s <= slo_s\n"
        "over = (latencies > slo.bound_s).sum()\n"
        "fine = row['latency_p99_high'] <= row['slo_bound_s']\n"
        "a = rate <= max_rate\n"
        "b = latency < timeout\n"
        "c = high <= at_or_under\n"
        "d = latency == bound\n"
    )
    hits = [h.split(": ", 1)[1] for h in latency_bound_comparisons(probe, tmp_path)]
    assert hits == [
        "latency <= bound",
        "p.latency_s <= slo_s",
        "latencies > slo.bound_s",
        "row['latency_p99_high'] <= row['slo_bound_s']",
    ]
