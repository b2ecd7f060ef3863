"""The claim skeleton every kind uses: a verdict, its test, its guards and the family's decision.

A kind (``research/kinds.py``) turns data into a ``Test``; ``decide_family`` decides a family
under Holm (for and, apart, against). A guard that holds makes a claim inconclusive; what
the seeds cannot decide is never "not reproduced". Leave-one-seed-out is ``Study.judge``'s.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

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
  robustness: str = ""  # leave-one-seed-out, filled by ``Study.judge``
  unit: str = ""  # the effect's unit, the claim's (``Claim.unit``), filled by ``study.decide``

  def estimate(self) -> str:
    """The effect with its unit and interval (``stats.Effect.text``)."""
    if not self.unit:
      raise ValueError(f"claim {self.claim!r}: its verdict has an effect but no unit; set Verdict.unit "
                       f"to its claim's unit()")
    return self.effect.text(self.unit)

  def markdown(self) -> list[str]:
    head = f"**{self.verdict}.** "
    if self.effect is not None:
      head += f"{self.effect_name}: {self.estimate()}. "
    return [head + " ".join(self.lines) + (f" {self.robustness}" if self.robustness else ""),
            "", f"Rule: {self.rule}"]


@dataclasses.dataclass
class Test:
  """One claim's test, before the family is decided (``decide_family``)."""
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
  """``(holds, reason)``: a learning arm has a seed whose optimum is not bracketed."""
  edge = [n for n, rs in named.items() if curves.learns(rs) and not curves.bracketed(rs)]
  return bool(edge), f"Optimum at the grid's edge for a seed of: {', '.join(edge)}."


def decide_family(tests: Sequence[Test]) -> list[tuple[Test, Verdict]]:
  """Each test with its verdict. Tests with ``missing`` or a holding guard (inconclusive, the first
  holding guard's reason appended) are outside the family; the rest get Holm over ``p_for`` and,
  apart, ``p_against`` at ``stats.ALPHA``: reproduced, else not reproduced, else inconclusive."""
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
    guard = next((reason for holds, reason in t.guards if holds), None)
    if guard is not None:
      lines += [guard] if guard else []
      verdict = INCONCLUSIVE
    else:
      verdict = REPRODUCED if pf < stats.ALPHA else NOT_REPRODUCED if pa < stats.ALPHA else INCONCLUSIVE
    if math.isfinite(pf):  # in the family, with a p
      lines.append(f"Holm over the family of {len(live)} tests: adjusted p for {pf:.3g}, "
                   f"against {pa:.3g}.")
    out.append((t, Verdict(t.claim, verdict, lines, t.rule, t.effect, t.effect_name)))
  return out
