"""The norm x MLP study's kinds, each decided alone with Holm over its own parts, as its rules were: ``Versus``, ``Interaction``, ``ProfilePair``, ``EndProbe``, ``AllAlike`` and ``Diminishing``.
"""

from __future__ import annotations

import dataclasses
import math

from research import claims
from research import curves
from research import stats
from research.kind_base import (
    Claim, Data, guards, highest, learn_guard, lowest, named, NAN, p_beyond, probe_ratio, QUANTITIES,
    Section)
from research.kind_zloss import models, Pairs
from research.kind_choice import plot_profiles


# ----------------------------------------------------------------------------- norm_mlp
#
# The norm x MLP study's kinds (experiments/studies/norm_mlp.py): Versus, Interaction,
# ProfilePair, EndProbe, AllAlike, Diminishing; its report items RateTable and BestCurves.
# Each is decided alone by default (``family=None``), Holm over its own parts, a part's
# outcome that of ``stats.outcomes``: decisively within a margin counts against a claim and
# never for it. ``p_for`` and ``p_against`` are the claim's tests, so that its family of one
# decides exactly as its rule states.


def outcome_ps(effects: list[stats.Effect], predict: str) -> list[tuple[float, float]]:
  """Per part, ``(p for, p against)`` a prediction ``higher`` or ``lower``, Holm over the
  parts (for the difference and, apart, for the TOST): for, the adjusted p when the estimate
  points that way and the part is not decisively within its margin (else 1); against, the
  smaller of the adjusted TOST p and the adjusted p when it points the other way."""
  ps, same = stats.holm([e.p for e in effects]), stats.holm([e.p_same for e in effects])
  out = []
  for e, p, s in zip(effects, ps, same):
    if not math.isfinite(p):
      out.append((NAN, s if math.isfinite(s) else NAN))
      continue
    toward = e.diff > 0 if predict == "higher" else e.diff < 0
    within = math.isfinite(s) and s < stats.ALPHA
    away = e.diff != 0 and not toward
    out.append((p if toward and not within else 1.0, min(s if math.isfinite(s) else 1.0, p if away else 1.0)))
  return out


def per_seed_values(data: Data, arm: str, quantity: str, other: str = "") -> dict[int, float]:
  """``quantity`` of ``arm`` per seed; the sensitivity over the base rates it shares with
  ``other`` (the same grid for both sides of a comparison)."""
  runs = data.runs(arm)
  if quantity == "sensitivity" and other:
    return curves.sensitivity(runs, curves.base_rates(runs, data.runs(other)))
  return QUANTITIES[quantity][1](runs)


@dataclasses.dataclass(frozen=True)
class Versus(Claim):
  """``arm - reference`` of a per-seed quantity, paired by seed (Welch when they share fewer
  than two): reproduced when decisively ``predict`` (higher or lower) of 0 and not within
  ``+-margin``; not reproduced when decisively the other way, within ``+-margin`` (TOST: too
  small to matter), or, with a finite ``against``, when it lies decisively on the far side
  of that bound (an effect smaller than its literature's); inconclusive otherwise. Its
  ``guard``: ``learns`` (both arms must learn), ``edge`` (no learning arm's optimum at the
  grid's edge)."""
  family: str | None = None  # decided alone, Holm over its own parts
  arm: str = ""
  reference: str = ""
  predict: str = "lower"
  quantity: str = "best_loss"
  margin: float = NAN
  against: float = NAN
  guard: tuple[str, ...] = ("learns", "edge")

  def needs(self) -> tuple[str, ...]:
    return (self.arm, self.reference)

  def quantity_text(self) -> str:
    return f"{self.arm} - {self.reference}: {QUANTITIES[self.quantity][0]}"

  def rule(self) -> str:
    far = "below" if self.predict == "higher" else "above"
    return (f"paired by seed, {self.quantity_text()}; reproduced when decisively {self.predict}"
            + (f" and not within ±{self.margin:g} (TOST)" if math.isfinite(self.margin) else "")
            + "; not reproduced when decisively the other way"
            + (f" or within ±{self.margin:g}" if math.isfinite(self.margin) else "")
            + (f" or decisively {far} {self.against:+g}" if math.isfinite(self.against) else "")
            + "; inconclusive otherwise" + "".join(
                {"learns": ", or when an arm does not learn",
                 "edge": ", or when a learning arm has a seed's optimum at the grid's edge"}[g]
                for g in self.guard) + ".")

  def test(self, data: Data) -> claims.Test:
    a = per_seed_values(data, self.arm, self.quantity, self.reference)
    b = per_seed_values(data, self.reference, self.quantity, self.arm)
    if not a or not b:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"{QUANTITIES[self.quantity][0]} of {self.arm} and {self.reference}", self.rule()))
    named = {self.arm: data.runs(self.arm), self.reference: data.runs(self.reference)}
    e = stats.compare(a, b, self.margin)
    (p_for, p_against), = outcome_ps([e], self.predict)
    if math.isfinite(self.against):
      p_against = lowest([p_against, p_beyond(e, self.against, "above" if self.predict == "lower" else "below")])
    lines = [f"{self.arm}: {curves.describe(named[self.arm])}; {self.reference}: "
             f"{curves.describe(named[self.reference])}."]
    guards = {"learns": learn_guard(named), "edge": claims.edge_guard(named)}
    return claims.Test(self.key, self.claim, self.rule(), lines, e, self.quantity_text(), p_for,
                       p_against, [guards[g] for g in self.guard], tuple(sorted(set(a) & set(b))))


@dataclasses.dataclass(frozen=True)
class Interaction(Claim):
  """Per seed, ``(a - b) - (c - d)`` of a quantity over ``arms = (a, b, c, d)`` (a difference
  of differences: post-LN's warmup penalty minus pre-LN's, or the post - pre gap's growth
  with depth), a t interval over seeds: reproduced when decisively ``predict`` (with
  ``and_first``, ``a - b`` too, Holm over the two); not reproduced when decisively the other
  way or within ``+-margin`` (TOST); inconclusive otherwise, when an arm of ``learn`` does
  not learn, or when a learning arm has a seed's optimum at the grid's edge."""
  family: str | None = None  # decided alone, Holm over its own parts
  arms: tuple[str, ...] = ()
  predict: str = "higher"
  quantity: str = "best_loss"
  margin: float = NAN
  and_first: bool = False
  learn: tuple[str, ...] = ()

  def needs(self) -> tuple[str, ...]:
    return tuple(self.arms)

  def quantity_text(self) -> str:
    a, b, c, d = self.arms
    return f"({a} - {b}) - ({c} - {d}): {QUANTITIES[self.quantity][0]}"

  def rule(self) -> str:
    a, b = self.arms[:2]
    return (f"per seed, {self.quantity_text()}, a t interval over seeds; reproduced when "
            f"decisively {self.predict}" + (f", and {a} - {b} too (Holm over the two)" if self.and_first else "")
            + f"; not reproduced when the interaction is decisively the other way"
            + (f" or within ±{self.margin:g} (TOST)" if math.isfinite(self.margin) else "")
            + "; inconclusive otherwise" + (f", when {', '.join(self.learn)} does not learn" if self.learn else "")
            + ", or when a learning arm has a seed's optimum at the grid's edge.")

  def test(self, data: Data) -> claims.Test:
    named = {a: data.runs(a) for a in self.arms}
    if not all(named.values()):
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"runs of {', '.join(self.arms)}", self.rule()))
    q = {a: QUANTITIES[self.quantity][1](rs) for a, rs in named.items()}
    a, b, c, d = self.arms
    seeds = sorted(set.intersection(*(set(v) for v in q.values())))
    e = dataclasses.replace(stats.one_sample(
        [(q[a][s] - q[b][s]) - (q[c][s] - q[d][s]) for s in seeds], self.margin), kind="paired")
    parts = [e] + ([stats.paired(q[a], q[b])] if self.and_first else [])
    ps = outcome_ps(parts, self.predict)
    lines = [f"{arm}: {curves.describe(rs)}." for arm, rs in named.items()]
    if self.and_first:
      lines.append(f"{a} - {b}: {parts[1].text()}; {c} - {d}: {stats.paired(q[c], q[d]).text()}.")
    lines += self.at_rates(named)
    guards = [learn_guard({x: named[x] for x in self.learn}), claims.edge_guard(named)]
    return claims.Test(self.key, self.claim, self.rule(), lines, e, "Interaction " + self.quantity_text(),
                       highest(p for p, _ in ps), ps[0][1], guards, tuple(seeds))

  def at_rates(self, named: dict[str, list[curves.Run]]) -> list[str]:
    """The interaction of the clipped loss at each rate all four arms share (reported, not judged)."""
    a, b, c, d = self.arms
    at = []
    for lr in sorted(set.intersection(*(set(curves.by_rate(rs)) for rs in named.values()))):
      per = {k: {r.seed: r.clipped for r in rs if r.lr == lr} for k, rs in named.items()}
      seeds = set.intersection(*(set(p) for p in per.values()))
      at.append(f"{lr:.2g}: " + stats.one_sample(
          [per[a][s] - per[b][s] - per[c][s] + per[d][s] for s in seeds]).text())
    return ["The interaction at each shared rate (reported, not judged): " + "; ".join(at) + "."] if at else []


def log_mean(values: dict[int, float]) -> stats.Effect:
  return stats.one_sample([math.log(v) for v in values.values()])


def exp_text(e: stats.Effect) -> str:
  if not math.isfinite(e.diff):
    return "none"
  ci = f" [95 % CI {math.exp(e.lo):.2f}, {math.exp(e.hi):.2f}]" if e.defined else ""
  return f"{math.exp(e.diff):.2f}{ci} ({e.n} seeds)"


@dataclasses.dataclass(frozen=True)
class ProfilePair(Claim):
  """A probe at initialisation that grows with depth in one arm and stays flat in another
  (Xiong et al. 2020: post-LN's gradients grow toward the output, pre-LN's do not): per seed
  the log of its last layer over its first, a t interval over seeds for each arm; reproduced
  when ``grows``' lies above ``log(factor)`` and ``flat``'s within ``+-log(factor)``; not
  reproduced when ``grows``' lies below ``log(factor)`` or ``flat``'s wholly outside the
  band; inconclusive otherwise. ``reported``: further (grows, flat) pairs shown, not judged."""
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

  def per_seed(self, data: Data, arm: str) -> dict[int, float]:
    """One ratio per seed (a seed's cells share its initialisation): the first finite one."""
    out: dict[int, float] = {}
    for rec in data.records(arm):
      v = probe_ratio(rec, "init", self.probe)
      if math.isfinite(v) and v > 0:
        out.setdefault(int(rec["seed"]), v)
    return out

  def test(self, data: Data) -> claims.Test:
    lines = []
    for grows, flat in self.reported:
      lines.append(f"{grows}: {exp_text(log_mean(self.per_seed(data, grows)))}, {flat}: "
                   f"{exp_text(log_mean(self.per_seed(data, flat)))} (reported, not judged).")
    up, level = log_mean(self.per_seed(data, self.grows)), log_mean(self.per_seed(data, self.flat))
    if not up.n or not level.n:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"step-0 {self.probe} profiles of {self.grows} and {self.flat}", self.rule()))
    lines.insert(0, f"{self.probe} last layer / first (geometric mean): {self.grows} "
                    f"{exp_text(up)}, {self.flat} {exp_text(level)}.")
    g = math.log(self.factor)
    p_for = highest([p_beyond(up, g, "above"), p_beyond(level, g, "below"), p_beyond(level, -g, "above")])
    p_against = lowest([p_beyond(up, g, "below"), p_beyond(level, g, "above"), p_beyond(level, -g, "below")])
    return claims.Test(self.key, self.claim, self.rule(), lines, up, f"{self.grows} log(last/first)",
                       p_for, p_against, [], ())

  def section(self, data: Data, out: str) -> Section:
    """A figure: the arms' per-layer gradient norms and residual stream at initialisation."""
    arms = (self.grows, self.flat, *(a for pair in self.reported for a in pair))
    panels = tuple(dict.fromkeys((p, "init") for p in ("grad_attn", self.probe, "residual_norm")))
    return Section([], [plot_profiles(data, arms, panels, out, "init_profiles.png")])


@dataclasses.dataclass(frozen=True)
class EndProbe(Claim):
  """A probe at the end of training of ``arm``, one model per seed (at the seed's best rate
  tried): per seed the log of the probe's last entry over its ``first`` (1: the first block,
  0 being the embedding), a t interval over seeds; reproduced when it lies above
  ``log(factor)``, not reproduced when below, inconclusive otherwise."""
  family: str | None = None  # decided alone, Holm over its own parts
  arm: str = ""
  probe: str = "residual_norm"
  first: int = 1
  factor: float = 1.5
  beside: tuple[str, ...] = ()  # arms drawn beside it in its figure

  def needs(self) -> tuple[str, ...]:
    return (self.arm,)

  def quantity_text(self) -> str:
    return f"{self.arm}: log({self.probe} last / entry {self.first}) at the end, at each seed's best rate"

  def rule(self) -> str:
    return (f"per seed, {self.quantity_text()}, a t interval over seeds: reproduced when it "
            f"lies above log {self.factor:g}, not reproduced when below; inconclusive otherwise.")

  def test(self, data: Data) -> claims.Test:
    rows = [(run, rec) for a, _, run, rec in data.rows if a == self.arm]
    opts = curves.optima([run for run, _ in rows])
    end, init = {}, {}
    for run, rec in rows:
      v = probe_ratio(rec, "end", self.probe, self.first)
      if run.seed in opts and run.lr == opts[run.seed].grid_lr and not run.diverged and math.isfinite(v) and v > 0:
        end[run.seed] = v
      v = probe_ratio(rec, "init", self.probe, self.first)
      if math.isfinite(v) and v > 0:
        init.setdefault(run.seed, v)
    if len(end) < 2:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"end-of-training probes of two seeds of {self.arm}", self.rule()))
    e = log_mean(end)
    lines = [f"{self.arm}, {self.probe} last / entry {self.first} at the end of training: "
             f"{exp_text(e)}" + (f"; at init {exp_text(log_mean(init))}" if init else "") + "."]
    g = math.log(self.factor)
    return claims.Test(self.key, self.claim, self.rule(), lines, e, "log(last/first) at the end",
                       p_beyond(e, g, "above"), p_beyond(e, g, "below"), [], tuple(sorted(end)))

  def section(self, data: Data, out: str) -> Section:
    """A figure: the probe per layer at initialisation and at the end (mean over models)."""
    panels = ((self.probe, "init"), (self.probe, "end"))
    return Section([], [plot_profiles(data, (self.arm, *self.beside), panels, out, f"{self.probe}.png")])


@dataclasses.dataclass(frozen=True)
class AllAlike(Claim):
  """Every pair of ``arms`` (those with runs) alike in a per-seed quantity, paired by seed,
  within ``margin`` (with ``relative``, that fraction of ``reference``'s mean): reproduced
  when every pair is equivalent (TOST, Holm over the pairs); not reproduced when some pair
  lies decisively outside the margin; inconclusive otherwise, or when a learning arm has a
  seed's optimum at the grid's edge."""
  family: str | None = None  # decided alone, Holm over its own parts
  arms: tuple[str, ...] = ()
  reference: str = ""
  quantity: str = "best_loss"
  margin: float = NAN
  relative: bool = True
  test_kind = "equivalent"

  def needs(self) -> tuple[str, ...]:
    return tuple(self.arms)

  def quantity_text(self) -> str:
    return f"every pair of {', '.join(self.arms)}: {QUANTITIES[self.quantity][0]}"

  def rule(self) -> str:
    within = f"{self.margin:.0%} of {self.reference}'s mean" if self.relative else f"±{self.margin:g}"
    return (f"{self.quantity_text()}, paired by seed: reproduced when every pair is equivalent "
            f"within {within} (TOST, Holm over the pairs); not reproduced when some pair lies "
            f"decisively outside that margin; inconclusive otherwise, or when a learning arm has "
            f"a seed's optimum at the grid's edge.")

  def test(self, data: Data) -> claims.Test:
    named = {a: data.runs(a) for a in self.arms if data.runs(a)}
    if len(named) < 2:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"two of {', '.join(self.arms)}", self.rule()))
    q = {a: QUANTITIES[self.quantity][1](rs) for a, rs in named.items()}
    ref = q.get(self.reference) or next(iter(q.values()))
    margin = self.margin * stats.one_sample(list(ref.values())).diff if self.relative else self.margin
    pairs = [(a, b) for i, a in enumerate(named) for b in list(named)[i + 1:]]
    effects = [stats.compare(q[a], q[b], margin) for a, b in pairs]
    same = stats.holm([e.p_same for e in effects])
    p_against = lowest([p for e in effects for p in (p_beyond(e, margin, "above"), p_beyond(e, -margin, "below"))])
    lines = ["; ".join(f"{a}: {curves.describe(rs)}" for a, rs in named.items()) + ".",
             f"Margin {margin:.3f}. Pairs: " + "; ".join(
                 f"{a} - {b} {e.text()}" for (a, b), e in zip(pairs, effects)) + "."]
    largest = max(effects, key=lambda e: abs(e.diff) if math.isfinite(e.diff) else -1)
    return claims.Test(self.key, self.claim, self.rule(), lines, largest, "Largest pairwise difference",
                       highest(same), p_against, [claims.edge_guard(named)], ())


@dataclasses.dataclass(frozen=True)
class Diminishing(Claim):
  """Along ``arms`` in order (at least three with runs: e.g. MLP ratios 1, 2, 4, 8), each step
  lowers a per-seed quantity with diminishing returns: each step compared paired by seed,
  and each later gain against the first (Holm over all of them); reproduced when the first
  step is decisively lower and no part decisively the other way (a step up, a later gain
  larger than the first); not reproduced when some part is; inconclusive otherwise, or when
  a learning arm has a seed's optimum at the grid's edge."""
  family: str | None = None  # decided alone, Holm over its own parts
  arms: tuple[str, ...] = ()
  quantity: str = "best_loss"

  def needs(self) -> tuple[str, ...]:
    return tuple(self.arms)

  def quantity_text(self) -> str:
    return f"the steps along {', '.join(self.arms)}: {QUANTITIES[self.quantity][0]}"

  def rule(self) -> str:
    return (f"{self.quantity_text()}, each step and each later gain against the first paired by "
            f"seed (Holm over all): reproduced when the first step is decisively lower and no "
            f"part decisively the other way; not reproduced when a step is decisively higher or "
            f"a later gain decisively larger than the first; inconclusive otherwise, or when a "
            f"learning arm has a seed's optimum at the grid's edge.")

  def test(self, data: Data) -> claims.Test:
    named = {a: data.runs(a) for a in self.arms if data.runs(a)}
    if len(named) < 3:
      return claims.Test(self.key, self.claim, self.rule(), [], missing=claims.missing(
          self.claim, f"three of {', '.join(self.arms)}", self.rule()))
    keys = list(named)
    q = {a: QUANTITIES[self.quantity][1](rs) for a, rs in named.items()}
    gain = lambda a, b: {s: q[a][s] - q[b][s] for s in set(q[a]) & set(q[b])}
    steps = [stats.compare(q[b], q[a]) for a, b in zip(keys, keys[1:])]
    growth = [stats.compare(gain(a, b), gain(keys[0], keys[1])) for a, b in zip(keys[1:], keys[2:])]
    ps = outcome_ps(steps + growth, "lower")
    lines = ["; ".join(f"{a}: {curves.describe(rs)}" for a, rs in named.items()) + ".",
             "Steps: " + "; ".join(f"{a} -> {b} {e.text()}" for a, b, e in zip(keys, keys[1:], steps)) + ".",
             "Later gains minus the first: " + "; ".join(
                 f"{a} -> {b} {e.text()}" for a, b, e in zip(keys[1:], keys[2:], growth)) + "."]
    # Against: some part decisively higher (a step up, a later gain larger than the first).
    p_against = lowest([p if e.diff > 0 else NAN for e, p in zip(steps + growth, stats.holm([e.p for e in steps + growth]))])
    p_for = ps[0][0] if not p_against < stats.ALPHA else 1.0
    return claims.Test(self.key, self.claim, self.rule(), lines, steps[0], f"First step {keys[0]} -> {keys[1]}",
                       p_for, p_against, [claims.edge_guard(named)], ())
