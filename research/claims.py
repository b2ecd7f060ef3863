"""The claim skeleton every study's rules use: a verdict, its guards, its decision and its leave-one-seed-out check.

A claim is a function of a study's records (``curves.Run`` or a study's own rows) that
returns a ``Verdict``: reproduced, not reproduced or inconclusive, with the effect it turns
on, its lines and its rule. Each study writes only its claims' tests; what every claim
shares is here, written once:

- ``missing``: too few runs to judge, an inconclusive verdict that says what is missing;
- the guards (``decide``): a claim is inconclusive, with the reason in its lines, when a
  guard holds (an arm that does not learn, ``not_learning``; a learning arm's optimum at the
  grid's edge, ``edge_guard``), whatever its tests say;
- the decision (``decide``, ``directed``): reproduced when the rule's test for it holds,
  not reproduced when the test against it holds (or the effect is equivalent to none),
  inconclusive otherwise: what the seeds cannot decide is never "not reproduced";
- ``robustness``: whether the verdict survives leaving out any one seed; ``judge_all`` runs a
  study's claims with it;
- ``decide_family``: a family of ``Test`` records decided together under Holm (for the
  claims and, apart, against them), for a study that judges its claims as one family (the
  z-loss study; the confirmatory norm x MLP study and the muTransfer ladder each wrote theirs
  in their own rules before this existed, and keep them as they were judged).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable, Sequence

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
  robustness: str = ""  # filled by ``judge_all``: does it survive leaving out any one seed?

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


def not_learning(named: dict[str, list[curves.Run]]) -> list[str]:
  """The named arms that do not learn (``curves.learns``)."""
  return [n for n, rs in named.items() if not curves.learns(rs)]


def edge_guard(named: dict[str, list[curves.Run]]) -> tuple[bool, str]:
  """The guard on optima at the grid's edge: whether a learning arm has a seed whose optimum
  is not bracketed (it may lie off the grid), and the line that names those arms."""
  edge = [n for n, rs in named.items() if curves.learns(rs) and not curves.bracketed(rs)]
  return bool(edge), f"Optimum at the grid's edge for a seed of: {', '.join(edge)}."


# The outcome opposite to each direction a claim can predict (``stats.outcome`` gives
# higher/lower/same/unclear, ``stats.beyond`` above/below/unclear).
OPPOSITE = {"higher": "lower", "lower": "higher", "above": "below", "below": "above"}


def directed(outcome: str, reproduced: str = "higher") -> tuple[bool, bool]:
  """``(for, against)`` a claim that predicts ``reproduced``: for when the outcome is that
  direction, against when it is the opposite one or equivalent to none (``same``)."""
  return outcome == reproduced, outcome in (OPPOSITE[reproduced], "same")


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


def robustness(claim, runs: list, verdict: str) -> str:
  """Whether ``claim`` gives ``verdict`` again with any one seed left out."""
  seeds = sorted({r.seed for r in runs})
  if len(seeds) < 2:
    return "Leave-one-seed-out: not applicable (one seed)."
  flips = []
  for s in seeds:
    other = claim([r for r in runs if r.seed != s]).verdict
    if other != verdict:
      flips.append(f"without seed {s}: {other.lower()}")
  if not flips:
    return "Leave-one-seed-out: the verdict survives leaving out any one seed."
  return "Leave-one-seed-out: it does not survive (" + "; ".join(flips) + ")."


def judge_all(claims: Sequence[Callable[[list], Verdict]], runs: list, robust: bool = True) -> list[Verdict]:
  """Each claim's verdict on ``runs``, with its leave-one-seed-out check when ``robust``."""
  out = []
  for claim in claims:
    v = claim(runs)
    if robust:
      v.robustness = robustness(claim, runs, v.verdict)
    out.append(v)
  return out


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
