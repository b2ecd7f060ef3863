"""What a study's page holds and the kinds' figure helpers: the report's lowest layer, so it must not import the kinds."""

from __future__ import annotations

import dataclasses
import os
from typing import Any


@dataclasses.dataclass
class Page:
  """What a study puts into its report."""
  verdicts: list  # claims.Verdict, in the order shown
  method: str  # the paragraph under "## Verdicts": how the claims are judged
  sections: list[str]  # markdown lines after the verdicts (the study's tables, ...)
  plots: list[str | None]  # the PNGs written into ``out`` (None: nothing to draw)
  results: dict[str, Any]  # results.json's body (dataclasses allowed)
  notes: list[str] = dataclasses.field(default_factory=list)  # lines above "## Verdicts"
  headline: list[str] = dataclasses.field(default_factory=list)  # the answer, under the title
  opens: list[str] = dataclasses.field(default_factory=list)  # lines above the answer (a table)


def figure(*args, **kwargs):
  # A bare Figure, not pyplot: no global state in the caller's process or notebook.
  from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel
  return Figure(*args, **kwargs)


def save(fig, out: str, name: str) -> str:
  fig.tight_layout()
  fig.savefig(os.path.join(out, name), dpi=100)
  return name


def interval_text(x: float | None, ci, fmt: str) -> str:
  if x is None:
    return "—"
  return format(x, fmt) + ("" if ci is None else " [" + ", ".join(format(c, fmt) for c in ci) + "]")
