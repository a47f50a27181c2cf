"""Matplotlib figures as inline SVG for a report that opens with no network.

Figures are built on `matplotlib.figure.Figure` directly (no pyplot): no global state, no
GUI backend, safe from a worker thread. Text stays text (`svg.fonttype: none`), which
keeps each plot a few tens of kB and searchable; the XML prolog, DOCTYPE (it names a
remote DTD) and the metadata block are dropped because an SVG inlined in HTML needs none
of them.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable

import matplotlib
from matplotlib.figure import Figure

from servebench.analysis.errors import AnalysisError

RC = {
    "svg.fonttype": "none",
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 7,
    "legend.frameon": False,
}

_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)


class NoData(AnalysisError):
    """A plot with nothing to show; the message is the sentence the report prints."""


def render(draw: Callable[[Figure], None], width: float = 8.0, height: float = 4.0) -> str:
    """Run `draw` on a fresh figure under the report's style and return the SVG text.

    Style settings are read when axes and texts are created, so the whole drawing (not
    just the save) runs inside the rc context.
    """
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height), layout="constrained")
        draw(fig)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg")
    text = _METADATA.sub("", _PROLOG.sub("", buffer.getvalue(), count=1), count=1)
    return text.strip()
