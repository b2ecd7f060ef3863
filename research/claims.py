"""The claim skeleton every kind uses: a verdict, its test, its guards and the family's decision.

A claim kind (``research/kinds.py``) turns a study's data into a ``Test``; the study decides
the family and gives each claim a ``Verdict``: reproduced, not reproduced or inconclusive,
with the effect it turns on, its lines and its rule. What every claim shares is here:

- ``missing``: too few runs to judge, an inconclusive verdict that says what is missing;
- the guards (``decide``): a claim is inconclusive, with the reason in its lines, when a
  guard holds (an arm that does not learn, ``kinds.LEARNS``; a learning arm's optimum at the
  grid's edge, ``edge_guard``), whatever its tests say;
- the decision (``decide``): reproduced when the rule's test for it holds, not reproduced when
  the test against it holds (or the effect is equivalent to none), inconclusive otherwise:
  what the seeds cannot decide is never "not reproduced";
- ``decide_family``: a family of ``Test`` records decided together under Holm (for the
  claims and, apart, against them); the leave-one-seed-out check is the study's
  (``Study.judge``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Sequence

from research import curves
from research import stats
from research.stats import Effect

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "Reproduced", "Not reproduced", "Inconclusive"


@dataclasses.dataclass
class Verdict:
  claim: str
  verdict: str
  lines: list[str]
  rule: str
  effect: Effect | None = None  # the effect the verdict turns on, with its interval
  effect_name: str = ""
  robustness: str = ""  # filled by ``Study.judge``: does it survive leaving out any one seed?

  def markdown(self) -> list[str]:
    head = f"**{self.verdict}.** "
    if self.effect is not None:
      head += f"{self.effect_name}: {self.effect.text()}. "
    return [head + " ".join(self.lines) + (f" {self.robustness}" if self.robustness else ""),
            "", f"Rule: {self.rule}"]


@dataclasses.dataclass
class Test:
  """One claim's test before its study decides the family together (Holm over the claims' ``p_for``
  and, apart, ``p_against``): the confirmatory norm x MLP study and the muTransfer ladder."""
  key: str
  claim: str
  rule: str
  lines: list[str]
  effect: Effect | None = None
  effect_name: str = ""
  p_for: float = float("nan")
  p_against: float = float("nan")
  guards: list = dataclasses.field(default_factory=list)  # (holds, reason)
  seeds: tuple[int, ...] = ()
  missing: Verdict | None = None


def missing(claim: str, what: str, rule: str, notes: Sequence[str] = ()) -> Verdict:
  """Inconclusive for want of runs: ``what`` names them, ``notes`` say what kept others out."""
  return Verdict(claim, INCONCLUSIVE, [f"Not enough runs: {what}."] + [f"{n}." for n in notes], rule)


def edge_guard(named: dict[str, list[curves.Run]]) -> tuple[bool, str]:
  """The guard on optima at the grid's edge: whether a learning arm has a seed whose optimum
  is not bracketed (it may lie off the grid), and the line that names those arms."""
  edge = [n for n, rs in named.items() if curves.learns(rs) and not curves.bracketed(rs)]
  return bool(edge), f"Optimum at the grid's edge for a seed of: {', '.join(edge)}."


def decide(lines: list[str], guards: Iterable[tuple[bool, str]] = (), reproduced: bool = False,
           not_reproduced: bool = False) -> str:
  """The verdict: inconclusive when a guard ``(holds, reason)`` holds (the first one's reason
  joins ``lines``, an empty reason adds none); else reproduced or not reproduced by the
  rule's tests (which the claim makes exclusive); else inconclusive."""
  for holds, reason in guards:
    if holds:
      if reason:
        lines.append(reason)
      return INCONCLUSIVE
  if reproduced:
    return REPRODUCED
  if not_reproduced:
    return NOT_REPRODUCED
  return INCONCLUSIVE


def decide_family(tests: Sequence[Test]) -> list[tuple[Test, Verdict]]:
  """Each test with its verdict, the family decided together. A test with a ``missing``
  verdict keeps it and is out of the family; one whose guard holds is inconclusive
  (``decide``) and out of it; the rest are the family: Holm's step-down correction over their
  ``p_for`` and, apart, over their ``p_against``; reproduced when the adjusted p for lies below
  ``stats.ALPHA``, not reproduced when it does not and the adjusted p against does,
  inconclusive otherwise."""
  live = [t for t in tests if t.missing is None and not any(h for h, _ in t.guards)]
  p_for = dict(zip((t.key for t in live), stats.holm([t.p_for for t in live])))
  p_against = dict(zip((t.key for t in live), stats.holm([t.p_against for t in live])))
  out = []
  for t in tests:
    if t.missing is not None:
      out.append((t, t.missing))
      continue
    lines = list(t.lines)
    pf, pa = p_for.get(t.key, stats.NAN), p_against.get(t.key, stats.NAN)
    verdict = decide(lines, t.guards, reproduced=pf < stats.ALPHA,
                     not_reproduced=not pf < stats.ALPHA and pa < stats.ALPHA)
    if math.isfinite(pf):  # the test was in the family and had a p
      lines.append(f"Holm over the family of {len(live)} tests: adjusted p for {pf:.3g}, "
                   f"against {pa:.3g}.")
    out.append((t, Verdict(t.claim, verdict, lines, t.rule, t.effect, t.effect_name)))
  return out
