"""The proxies study's claims: each rule comes out reproduced, not reproduced or inconclusive; and the predicted rate.

Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer training
instabilities") and Yang et al. 2022 (Tensor Programs V, muTransfer), judged on a width
ladder: the same depth, data and steps at every width, each width over one grid of peak
learning rates, three seeds that set the initialisation and the batch order alike in every
arm (so arms are compared by per-seed differences).

The rules see only ``Row`` records (a ``curves.Run`` with its arm and width), so they are
tested on synthetic numbers (tests/test_proxies_rules.py) and re-judge a committed study
without retraining. One model's numbers, one arm's optimum and its learning-rate
sensitivity are ``research/curves.py``'s (a diverged model counts at the loss at
initialisation; each seed's optimum is the vertex of a parabola in log(rate) through its
best rate and the two beside it, unbracketed at the grid's edge; sensitivity is Wortsman
et al.'s mean over the grid of ``min(final, initial) - best``); the statistics are
``research/stats.py``'s (t intervals for the degrees of freedom, Holm over a claim's
comparisons, TOST for equivalence); the verdict skeleton (guards, decision,
leave-one-seed-out) ``research/claims.py``'s. Every constant below was fixed before the
study ran.

The claims (each reproduced, not reproduced or inconclusive):

- ``claim_qk_norm``: qk-LayerNorm lowers the learning-rate sensitivity, judged at the
  largest width (where Wortsman et al. see it; the smaller widths are the Holm family's
  other members and are reported);
- ``claim_z_loss``: the same for z-loss (their other intervention, against output-logit
  divergence);
- ``claim_growth``: without qk-norm the sensitivity grows with width (the per-seed slope
  against log2(width));
- ``claim_transfer``: under muP the optimal rate moves less across the ladder than under the
  standard parametrisation (per seed, the slope of log(optimal rate) against log2(width)).

``predict`` extrapolates each parametrisation's optimum to andrea120m's width.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Iterable

import numpy as np

from research import claims
from research import curves
from research import stats
from research.claims import INCONCLUSIVE, Verdict
from research.curves import RATE_FACTOR, SENSITIVITY_MARGIN
from research.stats import Effect

# The arms of the study (``grid.py``): pre-LN under the standard
# parametrisation is the reference; each other arm changes one thing.
REFERENCE = "pre"
QK, Z, POST, MUP = "pre+qk", "pre+z", "post", "pre+mup"
ARMS = (REFERENCE, QK, Z, POST, MUP)
# andrea120m's d_model: the width the ladder's optimum is extrapolated to.
TARGET_WIDTH = 768
# Equivalence margins, fixed before the run: every study's (``curves.SENSITIVITY_MARGIN``,
# 0.05 nats between sensitivities; ``curves.RATE_FACTOR``, a factor 1.5 between optimal
# rates); a slope across the ladder is "flat" when it moves its quantity by less than the
# margin over the ladder's whole span.
# Fewest widths a per-seed slope is fitted through.
MIN_WIDTHS = 3


@dataclasses.dataclass(frozen=True)
class Row:
  """One trained model as the proxy rules see it."""
  run: curves.Run  # learning rate, seed, final and initial loss, divergence, unigram baseline
  arm: str  # one of ARMS
  width: int  # d_model
  # The largest attention logit at the last probe, the max over layers (nan if none).
  attn_logit_max: float = float("nan")
  log_z: float = float("nan")  # the mean log Z of the output softmax at the last probe
  n_params: int = 0  # non-embedding parameters

  @property
  def seed(self) -> int:
    return self.run.seed


def ladder(rows: Iterable[Row], arm: str) -> dict[int, list[curves.Run]]:
  """``{width: that width's runs}`` of one arm, by increasing width."""
  out = defaultdict(list)
  for row in rows:
    if row.arm == arm:
      out[row.width].append(row.run)
  return dict(sorted(out.items()))


def _span(widths) -> float:
  """Doublings the ladder spans (log2 of its widest over its narrowest width)."""
  return math.log2(max(widths) / min(widths)) if widths else float("nan")


def _slope(x: list[float], y: list[float]) -> tuple[float, float]:
  """Least-squares ``(slope, intercept)`` of y on x."""
  slope, intercept = np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)
  return float(slope), float(intercept)


# ----------------------------------------------------------------------------- sensitivity


def width_sensitivity(runs_a: list[curves.Run], runs_b: list[curves.Run] | None = None) -> dict[int, float]:
  """Per seed, the sensitivity of ``runs_a`` over the base grid it shares with ``runs_b``."""
  rates = curves.base_rates(runs_a, runs_b) if runs_b else curves.base_rates(runs_a)
  return curves.sensitivity(runs_a, rates)


def sensitivity_gaps(rows: list[Row], arm: str) -> tuple[list[int], list[Effect], dict[int, list[str]]]:
  """Per width both arms have, ``sens(REFERENCE) - sens(arm)`` paired by seed over their
  shared base grid: the widths, the effects, and per width the arms that do not learn."""
  ref, other = ladder(rows, REFERENCE), ladder(rows, arm)
  widths = sorted(set(ref) & set(other))
  effects, quiet = [], {}
  for w in widths:
    effects.append(stats.compare(width_sensitivity(ref[w], other[w]),
                                 width_sensitivity(other[w], ref[w]), SENSITIVITY_MARGIN))
    names = [n for n, rs in ((REFERENCE, ref[w]), (arm, other[w])) if not curves.learns(rs)]
    if names:
      quiet[w] = names
  return widths, effects, quiet


def _intervention_rule(arm: str, what: str) -> str:
  return (f"per width, the learning-rate sensitivity (Wortsman et al. 2023) per seed over the "
          f"base grid both arms share, {REFERENCE} - {arm} paired by seed, Holm over the "
          f"widths. The verdict is the largest width's (fixed before the run: the literature "
          f"sees {what} at scale): reproduced when it is decisively positive and no width is "
          f"decisively negative; not reproduced when it is decisively negative or equivalent "
          f"within {SENSITIVITY_MARGIN} nats (TOST); inconclusive otherwise, or when either arm "
          f"does not learn at the largest width (an arm on the plateau at every rate scores "
          f"near zero). The smaller widths are reported.")


def _intervention(rows: list[Row], arm: str, claim: str, what: str) -> Verdict:
  rule = _intervention_rule(arm, what)
  widths, effects, quiet = sensitivity_gaps(rows, arm)
  largest = max(set(ladder(rows, REFERENCE)) | set(ladder(rows, arm)), default=None)
  if not widths or widths[-1] != largest:
    return claims.missing(claim, f"the {REFERENCE} and {arm} arms at the largest width", rule)
  outs = stats.outcomes(effects)
  lines = [f"Per width, {REFERENCE} - {arm}: " + "; ".join(
      f"d{w} {e.text()} ({o})" for w, e, o in zip(widths, effects, outs)) + "."]
  lines += [f"d{w}: {' and '.join(names)} does not learn." for w, names in quiet.items()]
  effect, top = effects[-1], outs[-1]
  verdict = claims.decide(lines, [(largest in quiet, "")],
                          reproduced=top == "higher" and "lower" not in outs,
                          not_reproduced=top in ("lower", "same"))
  return Verdict(claim, verdict, lines, rule, effect,
                 f"Sensitivity {REFERENCE} - {arm} at d{largest}")


def claim_qk_norm(rows: list[Row]) -> Verdict:
  return _intervention(rows, QK, "qk-LayerNorm lowers the learning-rate sensitivity",
                       "attention-logit growth")


def claim_z_loss(rows: list[Row]) -> Verdict:
  return _intervention(rows, Z, "z-loss lowers the learning-rate sensitivity",
                       "output-logit divergence")


def sensitivity_slopes(rows: list[Row], arm: str) -> tuple[dict[int, float], list[str]]:
  """Per seed, the slope of the arm's sensitivity against log2(width) (nats per doubling),
  over one base grid shared by all its widths; widths where the arm does not learn are left
  out (and named), and a seed needs ``MIN_WIDTHS`` widths."""
  lad = ladder(rows, arm)
  notes = [f"d{w}: {arm} does not learn, left out" for w, rs in lad.items() if not curves.learns(rs)]
  learning = {w: rs for w, rs in lad.items() if curves.learns(rs)}
  rates = curves.base_rates(*learning.values()) if learning else []
  per_seed = defaultdict(dict)
  for w, rs in learning.items():
    for seed, s in curves.sensitivity(rs, rates).items():
      per_seed[seed][w] = s
  slopes = {seed: _slope([math.log2(w) for w in by_w], list(by_w.values()))[0]
            for seed, by_w in per_seed.items() if len(by_w) >= MIN_WIDTHS}
  return slopes, notes


GROWTH_RULE = (
    f"per seed, the least-squares slope of {REFERENCE}'s learning-rate sensitivity against "
    f"log2(d_model), over one base grid shared by every width (at least {MIN_WIDTHS} widths "
    f"where the arm learns); a t interval over seeds. Reproduced when decisively positive "
    f"(Wortsman et al. 2023: without qk-norm the sensitivity grows with size); not reproduced "
    f"when decisively negative or equivalent to flat (TOST: less than {SENSITIVITY_MARGIN} "
    f"nats over the ladder's span); inconclusive otherwise. The other arms' slopes are "
    f"reported, not judged.")


def claim_growth(rows: list[Row]) -> Verdict:
  claim = "without qk-norm, the learning-rate sensitivity grows with width"
  slopes, notes = sensitivity_slopes(rows, REFERENCE)
  widths = [w for w, rs in ladder(rows, REFERENCE).items() if curves.learns(rs)]
  if len(slopes) < 2:
    return claims.missing(claim, f"{MIN_WIDTHS} widths where {REFERENCE} learns, for two seeds",
                    GROWTH_RULE, notes)
  margin = SENSITIVITY_MARGIN / _span(widths)
  effect = stats.one_sample(list(slopes.values()), margin)
  lines = [f"Slope per doubling of d_model (margin {margin:.3f}): {REFERENCE} {effect.text()}."]
  others = {arm: sensitivity_slopes(rows, arm)[0] for arm in ARMS if arm != REFERENCE}
  reported = [f"{arm} {stats.one_sample(list(s.values())).text()}" for arm, s in others.items() if s]
  if reported:
    lines.append("Reported, not judged: " + "; ".join(reported) + ".")
  lines += [f"{n}." for n in notes]
  verdict = claims.decide(lines, [], *claims.directed(stats.outcome(effect)))
  return Verdict(claim, verdict, lines, GROWTH_RULE, effect,
                 f"Slope of {REFERENCE}'s sensitivity (nats per doubling)")


# ----------------------------------------------------------------------------- optimal rates


@dataclasses.dataclass(frozen=True)
class Fit:
  """One seed's line through its optima: ``log(rate) = intercept + slope * log2(width)``."""
  slope: float
  intercept: float
  widths: tuple[int, ...]

  def log_rate(self, width: float) -> float:
    return self.intercept + self.slope * math.log2(width)


def optimum_fits(rows: list[Row], arm: str) -> tuple[dict[int, Fit], list[str]]:
  """Per seed, the line of log(fitted optimal rate) against log2(width); and what kept an
  optimum out: a width where the arm does not learn, or a seed's optimum at the grid's edge
  (not bracketed: it may lie off the grid, so it is not fitted). A seed gets a line over
  the widths it has (at least ``MIN_WIDTHS``)."""
  missing, points = [], defaultdict(dict)
  for w, rs in ladder(rows, arm).items():
    if not curves.learns(rs):
      missing.append(f"d{w}: {arm} does not learn")
      continue
    for seed, opt in curves.optima(rs).items():
      if opt.bracketed:
        points[seed][w] = math.log(opt.lr)
      else:
        missing.append(f"d{w} seed {seed}: {arm}'s optimum at the grid's edge ({opt.lr:.2g})")
  fits = {}
  for seed, by_w in sorted(points.items()):
    if len(by_w) >= MIN_WIDTHS:
      slope, intercept = _slope([math.log2(w) for w in by_w], list(by_w.values()))
      fits[seed] = Fit(slope, intercept, tuple(by_w))
  return fits, missing


TRANSFER_RULE = (
    f"per seed and width, the fitted optimal rate (the parabola's vertex in log(rate)); per "
    f"seed, the least-squares slope of log(optimal rate) against log2(d_model), for "
    f"{REFERENCE} (standard parametrisation) and {MUP}; the paired difference |slope sp| - "
    f"|slope muP| over seeds. Reproduced when decisively positive (Yang et al. 2022: under "
    f"muP the optimum stops moving with width); not reproduced when decisively negative or "
    f"equivalent within a factor {RATE_FACTOR} over the ladder's span (TOST); inconclusive "
    f"otherwise, or when any seed's optimum at any width of either arm lies at the grid's "
    f"edge or an arm does not learn at a width (the grid did not locate that optimum).")


def claim_transfer(rows: list[Row]) -> Verdict:
  claim = "under muP the optimal learning rate moves less with width than under sp"
  sp, sp_missing = optimum_fits(rows, REFERENCE)
  mup, mup_missing = optimum_fits(rows, MUP)
  widths = sorted(set(ladder(rows, REFERENCE)) | set(ladder(rows, MUP)))
  missing = sp_missing + mup_missing
  if len(set(sp) & set(mup)) < 2:
    return Verdict(claim, INCONCLUSIVE, [f"Not enough fitted optima: {MIN_WIDTHS} bracketed "
                                         f"widths for two seeds of both {REFERENCE} and {MUP}."]
                   + [f"{m}." for m in missing], TRANSFER_RULE)
  margin = math.log(RATE_FACTOR) / _span(widths)
  effect = stats.compare({s: abs(f.slope) for s, f in sp.items()},
                         {s: abs(f.slope) for s, f in mup.items()}, margin)
  lines = [f"Slope of log(optimal rate) per doubling of d_model (the rate's factor per "
           f"doubling in brackets): {REFERENCE} {_slope_text(sp)}; {MUP} {_slope_text(mup)}.",
           f"Margin {margin:.3f} per doubling."]
  verdict = claims.decide(lines, [(bool(missing), "Not located, so no verdict: " + "; ".join(missing) + ".")],
                          *claims.directed(stats.outcome(effect)))
  return Verdict(claim, verdict, lines, TRANSFER_RULE, effect, "|slope sp| - |slope muP|")


def _slope_text(fits: dict[int, Fit]) -> str:
  """``-0.69 [95 % CI -0.80, -0.58] (x0.50 [0.45, 0.56])``: the slope and its factor per doubling."""
  e = stats.one_sample([f.slope for f in fits.values()])
  if not e.defined:
    return f"{e.diff:+.2f} (x{math.exp(e.diff):.2f}; n = {e.n}: no interval)"
  return (f"{e.diff:+.2f} [95 % CI {e.lo:+.2f}, {e.hi:+.2f}] (x{math.exp(e.diff):.2f} "
          f"[{math.exp(e.lo):.2f}, {math.exp(e.hi):.2f}]; n = {e.n})")


# ----------------------------------------------------------------------------- the prediction


@dataclasses.dataclass(frozen=True)
class Prediction:
  """The peak learning rate the ladder predicts for one arm at ``width``, with its interval."""
  arm: str
  width: int
  lr: float | None
  interval: tuple[float, float] | None
  seeds: int
  widest: int | None  # the widest width fitted (how far the line is extrapolated)
  missing: tuple[str, ...] = ()

  def text(self) -> str:
    if self.lr is None:
      return "no prediction (" + ("; ".join(self.missing) if self.missing else "no fitted optima") + ")"
    ci = ("no interval" if self.interval is None else
          "95 % t interval over seeds {:.2g} .. {:.2g}".format(*self.interval))
    far = f", extrapolated x{self.width / self.widest:.1f} beyond d{self.widest}" if (
        self.widest and self.width > self.widest) else ""
    note = ("; with optima not located: " + "; ".join(self.missing)) if self.missing else ""
    return f"{self.lr:.2g} ({ci}; {self.seeds} seeds{far}{note})"


PREDICTION_METHOD = (
    "each seed's line of log(fitted optimal rate) against log2(d_model) is extrapolated to "
    "the target width, and the mean of the seeds' log rates is given with its t interval "
    "over seeds (3 seeds: the t quantile 4.30). Per seed rather than one pooled regression: "
    "a seed's widths share its initialisation and batch order, so the pooled residuals are "
    "not independent, while the seeds are; the spread of the seeds' extrapolations carries "
    "each line's own fitting error.")


def predict(rows: list[Row], arm: str, width: int = TARGET_WIDTH) -> Prediction:
  fits, missing = optimum_fits(rows, arm)
  if not fits:
    return Prediction(arm, width, None, None, 0, None, tuple(missing))
  e = stats.one_sample([f.log_rate(width) for f in fits.values()])
  interval = (math.exp(e.lo), math.exp(e.hi)) if e.defined else None
  widest = max(w for f in fits.values() for w in f.widths)
  return Prediction(arm, width, math.exp(e.diff), interval, e.n, widest, tuple(missing))


# ----------------------------------------------------------------------------- all of them


CLAIMS = (claim_qk_norm, claim_z_loss, claim_growth, claim_transfer)


def judge(rows: list[Row], robust: bool = True) -> list[Verdict]:
  """The study's verdicts (``claims.judge_all`` over ``CLAIMS``)."""
  return claims.judge_all(CLAIMS, rows, robust)


# What "the rules" of this study are (``research/identity.py``): the definitions these reach.
RULE_ROOTS = ("judge", "predict")
