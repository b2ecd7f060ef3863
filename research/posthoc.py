"""Post-hoc readings of a committed study: exploratory figures from its committed cells, shown beside the frozen verdicts they qualify.

A study lists readings in ``POSTHOC``, outside ``STUDY`` and so outside the rules' identity;
each has ``read(study, data) -> Reading`` (and optionally ``plot``). The readings themselves
live in ``experiments/readings/``; this module is the frame and ``Note``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from research import kinds
from research import registry

TITLE = "Post-hoc reading (exploratory; not part of the frozen rules)"
ANCHOR = "post-hoc-reading-exploratory-not-part-of-the-frozen-rules"  # TITLE's markdown anchor
INTRO = ("Computed after the run from the committed cells (`experiments/readings/`, "
         "`research/posthoc.py`; the study file's `POSTHOC`, kept apart from `STUDY`, so the rules' "
         "hash and the verdicts above are those fixed before the run). Exploratory: nothing here "
         "is a verdict. Each reading qualifies a verdict or section whose label says more than its "
         "figures do (a referee's report, issue 45); a pointer under that verdict leads here.")


@dataclasses.dataclass
class Reading:
  """A reading's output; ``pointers`` are keyed by claim text or section title."""
  title: str
  lines: list[str]
  pointers: dict[str, str] = dataclasses.field(default_factory=dict)
  results: dict[str, Any] = dataclasses.field(default_factory=dict)
  plots: list[str] = dataclasses.field(default_factory=list)  # PNGs in the report's folder
  headline: list[str] = dataclasses.field(default_factory=list)  # lines the report opens with


def read(name: str, cells: list[dict], out: str | None = None) -> list[Reading]:
  """Study ``name``'s ``POSTHOC`` readings on its cells; with ``out``, drawing readings plot there."""
  readings = registry.outside(name, "POSTHOC")
  study = registry.study(name)
  data = study.data(cells) if readings else None
  out_readings = []
  for r in readings:
    reading = r.read(study, data)
    drawn = r.plot(study, data, out) if out and hasattr(r, "plot") else None
    out_readings.append(dataclasses.replace(reading, plots=[drawn]) if drawn else reading)
  return out_readings


def section_lines(readings: list[Reading]) -> list[str]:
  out = [f"## {TITLE}", "", INTRO, ""] if readings else []
  for r in readings:
    out += [f"### {r.title}", "", *r.lines, "", *[x for p in r.plots for x in (f"![{p}]({p})", "")]]
  return out


def pointers(readings: list[Reading]) -> dict[str, list[str]]:
  """Pointer lines per claim or section title."""
  out: dict[str, list[str]] = {}
  for r in readings:
    for key, text in r.pointers.items():
      out.setdefault(key, []).append(f"> *Post-hoc (exploratory, not a verdict):* {text} "
                                     f"([{r.title}](#{ANCHOR}))")
  return out


# ----------------------------------------------------------------------------- the readings

@dataclasses.dataclass(frozen=True)
class Note:
  """A correction in words, pointed to from ``claims`` by ``pointer`` (default: ``text``)."""
  title: str
  text: str
  claims: tuple[str, ...] = ()
  pointer: str = ""

  def read(self, study, data: kinds.Data) -> Reading:
    del study, data
    return Reading(self.title, [self.text], {c: self.pointer or self.text for c in self.claims})
