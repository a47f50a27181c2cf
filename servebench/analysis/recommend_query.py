"""What a `recommend` question asks of the runs, checked before anything is ranked: the
instance type each run stands for (`--as-instance RUN=TYPE`), the instance types to rank,
and that the model, batch size and link it names were measured.

Each refusal is a `RecommendError` naming the option, so the command says it in one line
and the ranking never answers a question the runs cannot (a "no trial over link direct"
would blame another option than the one at fault).
"""

from __future__ import annotations

from pathlib import Path

from servebench.analysis.loader import RunData
from servebench.analysis.recommend import DIRECT, Query, RecommendError


def instance_mapping(pairs: list[str], paths: list[Path], runs: list[RunData]) -> dict[int, str]:
    """--as-instance RUN=TYPE, by the run's index: RUN is the path as given, the folder's
    name or the run id."""
    mapping: dict[int, str] = {}
    for pair in pairs:
        key, sep, instance = pair.partition("=")
        if not sep or not key or not instance:
            raise RecommendError(f"--as-instance {pair!r}: write RUN=TYPE, e.g. run-a=g4dn.xlarge")
        matches = [
            n
            for n, (path, run) in enumerate(zip(paths, runs, strict=True))
            if key in (str(path), str(path).rstrip("/"), path.name, run.run_id)
        ]
        if not matches:
            names = ", ".join(run.run_id for run in runs)
            raise RecommendError(f"--as-instance {pair!r}: {key} is none of the runs ({names})")
        for n in matches:
            mapping[n] = instance
    return mapping


def check_measured(runs: list[RunData], query: Query) -> None:
    """--model, --batch-size and --link name something the runs measured: otherwise no
    option is left, and the answer ("no trial over link direct") would blame another option."""
    ok = [run.ok_decisions for run in runs]
    models = sorted({str(m) for trials in ok for m in trials["model"].dropna()})
    if query.model is not None and not any(query.wants_model(m) for m in models):
        raise RecommendError(
            f"--model {query.model}: no run measured that model "
            f"(measured: {', '.join(models) or 'none'})"
        )
    if query.batch_size is not None:
        sizes = sorted({int(b) for trials in ok for b in trials["batch_size"].fillna(1)})
        if query.batch_size not in sizes:
            raise RecommendError(
                f"--batch-size {query.batch_size}: no run measured that batch size "
                f"(measured: {', '.join(map(str, sizes)) or 'none'})"
            )
    links = sorted({str(x) for trials in ok for x in trials["link"].dropna()})
    wanted = DIRECT if query.estimate else query.link
    if links and wanted not in links:
        hint = (
            f"; --link-model analytic estimates {query.link} from direct trials"
            if not query.estimate and DIRECT in links
            else ""
        )
        option = f"--link {query.link}" if not query.estimate else "--link-model analytic"
        raise RecommendError(
            f"{option}: no run measured a trial over link {wanted} "
            f"(measured: {', '.join(links)}){hint}"
        )


def instance_list(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise RecommendError(f"--instances {text!r}: name at least one instance type")
    return names
