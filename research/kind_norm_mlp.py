"""The norm x MLP study's kinds, ``ProfilePair`` and ``Diminishing``, each decided alone, Holm over its own parts.

A part's outcome is ``stats.outcomes``' (decisively within a margin: against, never for); ``p_for``
and ``p_against`` are the claim's tests, so its family of one decides as its rule states.
"""

from __future__ import annotations

import dataclasses
import math

from research import claims
from research import curves
from research import stats
from research.kind_base import _missing, Claim, Data, highest, lowest, NAN, p_beyond, QUANTITIES, Section
from research.kind_choice import plot_profiles
from research.kind_contrast import outcome_ps, Probe, ratio_text


@dataclasses.dataclass(frozen=True)
class ProfilePair(Claim):
  """A probe at init that grows with depth in ``grows`` and stays flat in ``flat`` (Xiong et al. 2020:
  post-LN's gradients grow toward the output, pre-LN's do not), per seed log(last layer / first).
  ``reported``: further (grows, flat) pairs shown, not judged."""
  family: str | None = None  # decided alone, Holm over its own parts
  grows: str = ""
  flat: str = ""
  probe: str = "grad_mlp"
  factor: float = 1.5
  reported: tuple[tuple[str, str], ...] = ()

  def needs(self) -> tuple[str, ...]:
    return (self.grows, self.flat, *(a for pair in self.reported for a in pair))

  def quantity_text(self) -> str:
    return f"log({self.probe} last layer / first) at initialisation, {self.grows} and {self.flat}"

  def rule(self) -> str:
    return (f"per seed, {self.quantity_text()}, a t interval over seeds each: reproduced when "
            f"{self.grows}'s lies above log {self.factor:g} and {self.flat}'s within ±log "
            f"{self.factor:g}; not reproduced when {self.grows}'s lies below log {self.factor:g} "
            f"or {self.flat}'s wholly outside that band; inconclusive otherwise"
            + (f" ({', '.join(f'{g} against {f}' for g, f in self.reported)}: reported, not judged)"
               if self.reported else "") + ".")

  def test(self, data: Data) -> claims.Test:
    per = {a: Probe(self.probe, "init", 0).per_seed(data, a) for a in self.needs()}
    up, level = (stats.one_sample(list(per[a].values())) for a in (self.grows, self.flat))
    if not up.n or not level.n:
      return _missing(self, f"step-0 {self.probe} profiles of {self.grows} and {self.flat}")
    lines = [f"{self.probe} last layer / first (geometric mean): {self.grows} {ratio_text(per[self.grows])}, "
             f"{self.flat} {ratio_text(per[self.flat])}."]
    lines += [f"{g}: {ratio_text(per[g])}, {f}: {ratio_text(per[f])} (reported, not judged)."
              for g, f in self.reported]
    g = math.log(self.factor)
    p_for = highest([p_beyond(up, g, "above"), p_beyond(level, g, "below"), p_beyond(level, -g, "above")])
    p_against = lowest([p_beyond(up, g, "below"), p_beyond(level, g, "above"), p_beyond(level, -g, "below")])
    return claims.Test(self.key, self.claim, self.rule(), lines, up, f"{self.grows} log(last/first)",
                       p_for, p_against, [], ())

  def section(self, data: Data, out: str) -> Section:
    """A figure: the arms' per-layer gradient norms and residual stream at initialisation."""
    panels = tuple(dict.fromkeys((p, "init") for p in ("grad_attn", self.probe, "residual_norm")))
    return Section([], [plot_profiles(data, self.needs(), panels, out, "init_profiles.png")])


@dataclasses.dataclass(frozen=True)
class Diminishing(Claim):
  """Along ``arms`` in order (three with runs at least, e.g. MLP ratios 1, 2, 4, 8), each step lowers the
  best loss with diminishing returns: each step and each later gain against the first, paired."""
  family: str | None = None  # decided alone, Holm over its own parts
  arms: tuple[str, ...] = ()

  def needs(self) -> tuple[str, ...]:
    return self.arms

  def quantity_text(self) -> str:
    return f"the steps along {', '.join(self.arms)}: {QUANTITIES['best_loss'][0]}"

  def rule(self) -> str:
    return (f"{self.quantity_text()}, each step and each later gain against the first paired by "
            f"seed (Holm over all): reproduced when the first step is decisively lower and no "
            f"part decisively the other way; not reproduced when a step is decisively higher or "
            f"a later gain decisively larger than the first; inconclusive otherwise, or when a "
            f"learning arm has a seed's optimum at the grid's edge.")

  def test(self, data: Data) -> claims.Test:
    named = {a: data.runs(a) for a in self.arms if data.runs(a)}
    if len(named) < 3:
      return _missing(self, f"three of {', '.join(self.arms)}")
    keys = list(named)
    q = {a: curves.best_losses(rs) for a, rs in named.items()}
    gain = lambda a, b: {s: q[a][s] - q[b][s] for s in set(q[a]) & set(q[b])}
    steps = [stats.compare(q[b], q[a]) for a, b in zip(keys, keys[1:])]
    growth = [stats.compare(gain(a, b), gain(keys[0], keys[1])) for a, b in zip(keys[1:], keys[2:])]
    ps = outcome_ps(steps + growth, "lower")
    lines = ["; ".join(f"{a}: {curves.describe(rs)}" for a, rs in named.items()) + ".",
             "Steps: " + "; ".join(f"{a} -> {b} {e.text()}" for a, b, e in zip(keys, keys[1:], steps)) + ".",
             "Later gains minus the first: " + "; ".join(
                 f"{a} -> {b} {e.text()}" for a, b, e in zip(keys[1:], keys[2:], growth)) + "."]
    p_against = lowest([p if e.diff > 0 else NAN for e, p in zip(steps + growth, stats.holm([e.p for e in steps + growth]))])
    p_for = ps[0][0] if not p_against < stats.ALPHA else 1.0
    return claims.Test(self.key, self.claim, self.rule(), lines, steps[0], f"First step {keys[0]} -> {keys[1]}",
                       p_for, p_against, [claims.edge_guard(named)], ())
