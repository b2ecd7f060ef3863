"""The muTransfer ladder's claims, committed before it runs: one test per claim, Holm over the family, and the learning rates for andrea120m.

Yang et al. 2022 (Tensor Programs V) and Wortsman et al. 2023, judged on a width ladder
whose every arm carries the base multipliers the base stage chose at the base width
(``experiments/studies/mup_base/``). The rules see only ``proxies.rules.Row`` records (a
``curves.Run`` with its arm and width), so they are tested on synthetic numbers
(tests/test_mutransfer.py). Per seed and width, an optimum is the vertex of a parabola in
log(rate) (``curves.optima``); **an arm learns at a width** when every seed's best loss is
0.1 nats below the unigram plateau (``curves.learns_every_seed``: seeds that leave the
plateau at different steps pass); a diverged model counts at the loss at initialisation.

The claims, each reproduced, not reproduced or inconclusive, decided together: Holm over the
family of the claims' tests for them and, apart, against them (family-wise error 0.05):

- ``transfer``: under muP the optimal rate moves less with width than under sp: per seed,
  |slope of log(optimum) against log2(width)| of sp minus muP's, paired (Yang et al.);
- ``flat``: under muP the optimum moves by less than a factor ``FLAT_FACTOR`` over the
  ladder: muP's slope x the ladder's span within ±log(2) (TOST), against when beyond it;
- ``no_cost``: at every width muP's best loss is within ``COST_MARGIN`` nats of sp's or
  better: per width, muP - sp paired by seed, a one-sided test against the margin, the
  claim's test the largest of the widths' p (an intersection-union test), against the
  smallest of the widths' p for "above the margin" times the number of widths;
- ``wider``: under muP a wider model is not worse at a fixed rate: at the grid rate nearest
  muP's optimum at the base width, per seed the slope of the final loss against log2(width),
  below ``WIDER_MARGIN`` nats per doubling (one-sided), against when above it;
- ``qk``: qk-LayerNorm lowers the learning-rate sensitivity at the widest width it ran at
  (Wortsman et al.): sp - sp+qk paired by seed over their shared base grid, against when
  decisively negative or equivalent within ``curves.SENSITIVITY_MARGIN``.

A claim is inconclusive, whatever its test, when an arm it compares does not learn at a width
it uses or a seed's optimum it fits lies at the grid's edge (the grid did not locate it).
Leave-one-seed-out is reported where a claim has at least ``LOSO_MIN_SEEDS`` seeds.
``predictions`` gives andrea120m's rate under muP (the base optimum transferred) and under sp
(extrapolated, with the widest rung held out as a check).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import numpy as np

from research import claims
from research import curves
from research import stats
from research.claims import Test, Verdict
from research.stats import Effect
from experiments.studies.proxies.rules import Row, ladder

REFERENCE, MUP, QK = "pre", "pre+mup", "pre+qk"
ARMS = (REFERENCE, MUP, QK)
TARGET_WIDTH = 768
FLAT_FACTOR = 2.0  # Yang et al.: the optimum stays put; a factor 2 over 8x is "flat" here
# nats: 2 % of the loss (about 4 nats at the base), the margin of the norm x MLP study's
# matched-MLP claim (Kaplan et al.: a few percent). Yang et al. find muP at least as good. It
# was 0.05 (about 1 %) until the power plan (plan.py), made before the ladder ran, found that
# 0.05 needs 15-16 seeds of every sp and muP group (about 160 minutes): beyond any budget here.
COST_MARGIN = 0.08
WIDER_MARGIN = 0.01  # nats per doubling of d_model
MIN_WIDTHS = 3
LOSO_MIN_SEEDS = 5
# The claims the budget cannot decide, declared before the ladder runs by its power plan
# (``plan.py``, from the base stage's spread and the proxies study's; a test recomputes it):
# judged "not powered", their figures reported. qk needs 36-42 seeds at d128 for a 0.1-nat
# effect at the proxies ladder's spread.
NOT_POWERED: frozenset[str] = frozenset({"qk"})
NOT_POWERED_VERDICT = "Not powered"


def _span(widths) -> float:
  return math.log2(max(widths) / min(widths)) if widths else float("nan")


def _slope(x, y) -> float:
  return float(np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)[0])


def fitted_optima(rows: list[Row], arm: str) -> tuple[dict[int, dict[int, float]], list[str]]:
  """``{seed: {width: log(optimal rate)}}`` over the widths where the arm learns, and what
  was not located (a width where it does not learn, an optimum at the grid's edge).

  The proxies study's ``optimum_fits`` with this ladder's learning test
  (``curves.learns_every_seed``); that study's rules stay as they were judged.
  """
  missing, points = [], defaultdict(dict)
  for w, rs in ladder(rows, arm).items():
    if not curves.learns_every_seed(rs):
      missing.append(f"d{w}: {arm} does not learn")
      continue
    for seed, opt in curves.optima(rs).items():
      if opt.bracketed:
        points[seed][w] = math.log(opt.lr)
      else:
        missing.append(f"d{w} seed {seed}: {arm}'s optimum at the grid's edge ({opt.lr:.2g})")
  return dict(points), missing


def slopes(rows: list[Row], arm: str) -> tuple[dict[int, float], list[str], list[int]]:
  """Per seed, the slope of log(optimum) against log2(width) (at least ``MIN_WIDTHS``)."""
  points, missing = fitted_optima(rows, arm)
  out = {s: _slope([math.log2(w) for w in by_w], list(by_w.values()))
         for s, by_w in points.items() if len(by_w) >= MIN_WIDTHS}
  return out, missing, sorted(ladder(rows, arm))


def located(missing: list[str]) -> tuple[bool, str]:
  """The guard of a claim on fitted optima: it holds when one was not located."""
  return bool(missing), "Not located, so no verdict: " + "; ".join(missing) + "."


TRANSFER_RULE = ("per seed, the least-squares slope of log(fitted optimal rate) against "
                 "log2(d_model) for sp and muP; |slope sp| - |slope muP| paired by seed, "
                 "reproduced when decisively positive (Holm over the family), not reproduced "
                 "when decisively negative or equivalent within a factor 1.5 over the ladder "
                 "(TOST); inconclusive otherwise or when an optimum was not located.")


def check_transfer(rows) -> Test:
  sp, sp_missing, widths = slopes(rows, REFERENCE)
  mup, mup_missing, _ = slopes(rows, MUP)
  diff = {s: abs(sp[s]) - abs(mup[s]) for s in sorted(set(sp) & set(mup))}
  margin = math.log(curves.RATE_FACTOR) / _span(widths) if len(widths) > 1 else float("nan")
  e, pf, pa = stats.directed(list(diff.values()), "higher", margin)
  lines = [f"Slope of log(optimum) per doubling: sp {_mean_text(sp)}, muP {_mean_text(mup)}; "
           f"|sp| - |muP| {e.text('per doubling')} (margin {margin:.3f})."]
  missing = sp_missing + mup_missing
  return Test("transfer", "under muP the optimal rate moves less with width than under sp",
              TRANSFER_RULE, lines, e, "|slope sp| - |slope muP| per doubling", pf, pa,
              [located(missing)],
              tuple(diff))


FLAT_RULE = (f"per seed, muP's slope of log(optimal rate) against log2(d_model) times the "
             f"ladder's span (the log of the factor the optimum moves over the ladder): "
             f"reproduced when within ±log {FLAT_FACTOR:g} (TOST; Holm over the family), not "
             f"reproduced when decisively beyond it; inconclusive otherwise or when an optimum "
             f"was not located.")


def check_flat(rows) -> Test:
  mup, missing, widths = slopes(rows, MUP)
  span = _span(widths)
  moved = {s: v * span for s, v in mup.items()}
  e, pf, pa = stats.within(list(moved.values()), math.log(FLAT_FACTOR))
  lines = [f"muP's optimum moves by a factor {_factor_text(e)} over the ladder's {span:.0f} doublings."]
  return Test("flat", f"under muP the optimal rate moves by less than a factor {FLAT_FACTOR:g} over the ladder",
              FLAT_RULE, lines, e, "log factor the muP optimum moves over the ladder", pf, pa,
              [located(missing)],
              tuple(moved))


COST_RULE = (f"per width, muP's fitted best loss minus sp's, paired by seed; reproduced when at "
             f"every width it lies below +{COST_MARGIN} nats (one-sided; the largest p of the "
             f"widths, an intersection-union test; Holm over the family); not reproduced when at "
             f"some width it lies decisively above (the smallest p times the widths); "
             f"inconclusive otherwise or when an arm does not learn at a width.")


def check_no_cost(rows) -> Test:
  sp, mup = ladder(rows, REFERENCE), ladder(rows, MUP)
  widths = sorted(set(sp) & set(mup))
  results, lines, seeds, quiet = [], [], set(), []
  for w in widths:
    a, b = curves.best_losses(mup[w]), curves.best_losses(sp[w])
    d = {s: a[s] - b[s] for s in sorted(set(a) & set(b))}
    seeds |= set(d)
    results.append((w, *stats.below(list(d.values()), COST_MARGIN)))
    quiet += [f"d{w}: {n} does not learn" for n, rs in (("sp", sp[w]), ("muP", mup[w]))
              if not curves.learns_every_seed(rs)]
  if not results:
    return Test("no_cost", "at every width muP's best loss is within a margin of sp's", COST_RULE,
                ["No width with both arms."], guards=[(True, "")])
  pf = max(r[2] for r in results)
  pa = min(1.0, min(r[3] for r in results) * len(results))
  worst = max(results, key=lambda r: r[1].diff)
  lines.append("muP - sp best loss per width: " + "; ".join(f"d{w} {e.text()}" for w, e, _, _ in results) + ".")
  return Test("no_cost", f"at every width muP's best loss is within {COST_MARGIN} nats of sp's or better",
              COST_RULE, lines, worst[1], f"muP - sp at d{worst[0]} (the widest gap)", pf, pa,
              [(bool(quiet), "; ".join(quiet) + ".")], tuple(sorted(seeds)))


WIDER_RULE = (f"under muP, at the grid rate nearest muP's fitted optimum at the base (narrowest) "
              f"width, per seed the least-squares slope of the final loss (min(final, initial)) "
              f"against log2(d_model): reproduced when it lies below +{WIDER_MARGIN} nats per "
              f"doubling (one-sided; Holm over the family), not reproduced when decisively above; "
              f"inconclusive otherwise or when muP does not learn at the base width.")


def check_wider(rows) -> Test:
  lad = ladder(rows, MUP)
  claim = "under muP a wider model is not worse at a fixed rate"
  if len(lad) < MIN_WIDTHS:
    return Test("wider", claim, WIDER_RULE, [f"Fewer than {MIN_WIDTHS} widths of muP."], guards=[(True, "")])
  base = lad[min(lad)]
  opts = curves.optima(base)
  rates = sorted({r.lr for r in base})
  if not opts or not rates:
    return Test("wider", claim, WIDER_RULE, ["No optimum at the base width."], guards=[(True, "")])
  centre = sum(math.log(o.lr) for o in opts.values()) / len(opts)
  rate = min(rates, key=lambda r: abs(math.log(r) - centre))
  per_seed = defaultdict(dict)
  for w, rs in lad.items():
    for r in rs:
      if r.lr == rate:
        per_seed[r.seed][w] = r.clipped
  sl = {s: _slope([math.log2(w) for w in by_w], list(by_w.values()))
        for s, by_w in per_seed.items() if len(by_w) >= MIN_WIDTHS}
  e, pf, pa = stats.below(list(sl.values()), WIDER_MARGIN)
  lines = [f"At rate {rate:g}: slope of the final loss per doubling of d_model {e.text()}."]
  return Test("wider", claim, WIDER_RULE, lines, e, f"slope of the loss at {rate:g} (nats per doubling)",
              pf, pa, [(not curves.learns_every_seed(base), "muP does not learn at the base width.")],
              tuple(sl))


QK_RULE = ("at the widest width where both ran, the learning-rate sensitivity (Wortsman et al. "
           "2023) per seed over the base grid both share, sp - sp+qk paired by seed: reproduced "
           "when decisively positive (Holm over the family); not reproduced when decisively "
           f"negative or equivalent within {curves.SENSITIVITY_MARGIN} nats (TOST); inconclusive "
           "otherwise or when either arm does not learn there.")


def check_qk(rows) -> Test:
  sp, qk = ladder(rows, REFERENCE), ladder(rows, QK)
  claim = "qk-LayerNorm lowers the learning-rate sensitivity at the widest rung"
  widths = sorted(set(sp) & set(qk))
  if not widths:
    return Test("qk", claim, QK_RULE, ["No width with both sp and sp+qk."], guards=[(True, "")])
  w = widths[-1]
  rates = curves.base_rates(sp[w], qk[w])
  a, b = curves.sensitivity(sp[w], rates), curves.sensitivity(qk[w], rates)
  d = {s: a[s] - b[s] for s in sorted(set(a) & set(b))}
  e, pf, pa = stats.directed(list(d.values()), "higher", curves.SENSITIVITY_MARGIN)
  quiet = [n for n, rs in (("sp", sp[w]), ("sp+qk", qk[w])) if not curves.learns_every_seed(rs)]
  lines = [f"d{w}: sensitivity sp - sp+qk {e.text()} over rates {', '.join(f'{r:g}' for r in rates)}."]
  return Test("qk", claim, QK_RULE, lines, e, f"sensitivity sp - sp+qk at d{w}", pf, pa,
              [(bool(quiet), f"d{w}: {' and '.join(quiet)} does not learn.")], tuple(d))


CHECKS = (check_transfer, check_flat, check_no_cost, check_wider, check_qk)


def family(rows) -> list[tuple[Test, Verdict]]:
  """Every claim's test and verdict, decided together under Holm (guarded claims apart)."""
  tests = [c(rows) for c in CHECKS]
  live = [t for t in tests if not any(h for h, _ in t.guards) and t.key not in NOT_POWERED]
  p_for = dict(zip((t.key for t in live), stats.holm([t.p_for for t in live])))
  p_against = dict(zip((t.key for t in live), stats.holm([t.p_against for t in live])))
  out = []
  for t in tests:
    lines = list(t.lines)
    if t.key in NOT_POWERED:
      lines.append("Not powered: the plan, before the run, found that the budget cannot decide "
                   "it; the figures are reported, not judged.")
      out.append((t, Verdict(t.claim, NOT_POWERED_VERDICT, lines, t.rule, t.effect, t.effect_name)))
      continue
    pf, pa = p_for.get(t.key, float("nan")), p_against.get(t.key, float("nan"))
    verdict = claims.decide(lines, t.guards, reproduced=pf < stats.ALPHA,
                            not_reproduced=not pf < stats.ALPHA and pa < stats.ALPHA)
    if t.key in p_for and math.isfinite(pf):
      lines.append(f"Holm over the family of {len(live)} claims: adjusted p for {pf:.3g}, "
                   f"against {pa:.3g}.")
    out.append((t, Verdict(t.claim, verdict, lines, t.rule, t.effect, t.effect_name)))
  return out


def judge(rows: list[Row], robust: bool = True) -> list[Verdict]:
  """The verdicts, with leave-one-seed-out where a claim has ``LOSO_MIN_SEEDS`` seeds."""
  pairs = family(rows)
  if robust:
    for t, v in pairs:
      if v.verdict == NOT_POWERED_VERDICT:
        continue
      if len(t.seeds) < LOSO_MIN_SEEDS:
        v.robustness = f"Leave-one-seed-out: uninformative at {len(t.seeds)} seeds."
        continue
      flips = []
      for s in t.seeds:
        other = dict((tt.key, vv.verdict) for tt, vv in family([r for r in rows if r.seed != s]))
        if other[t.key] != v.verdict:
          flips.append(f"without seed {s}: {other[t.key].lower()}")
      v.robustness = ("Leave-one-seed-out: the verdict survives leaving out any one seed." if not flips
                      else "Leave-one-seed-out: it does not survive (" + "; ".join(flips) + ").")
  return [v for _, v in pairs]


def _mean_text(values: dict[int, float]) -> str:
  return stats.one_sample(list(values.values())).text("per doubling") if values else "no fitted optima"


def _factor_text(e: Effect) -> str:
  if not math.isfinite(e.diff):
    return "(no data)"
  ci = f" [{math.exp(e.lo):.2f}, {math.exp(e.hi):.2f}]" if e.defined else ""
  return f"{math.exp(e.diff):.2f}{ci}"


# ----------------------------------------------------------------------------- andrea120m's rate


@dataclasses.dataclass(frozen=True)
class Rate:
  """A learning rate for andrea120m under one parametrisation, with its interval."""
  arm: str
  lr: float | None
  interval: tuple[float, float] | None
  method: str
  check: str = ""  # the held-out check (sp)


def mup_rate(rows: list[Row]) -> Rate:
  """Under muP the optimum does not move with width (if ``flat`` holds): andrea120m's rate is
  the mean over seeds of each seed's mean log optimum over the ladder's widths, with its t
  interval over seeds; the grid's resolution (a half-decade grid, refined to 2x around the
  optima) is inside it through the parabola fits."""
  points, missing = fitted_optima(rows, MUP)
  per_seed = [sum(v.values()) / len(v) for v in points.values() if v]
  e = stats.one_sample(per_seed)
  if not math.isfinite(e.diff):
    return Rate(MUP, None, None, "no fitted muP optima" + (f" ({'; '.join(missing)})" if missing else ""))
  interval = (math.exp(e.lo), math.exp(e.hi)) if e.defined else None
  return Rate(MUP, math.exp(e.diff), interval,
              "the muP optimum, the same at every width: per seed the mean log optimum over the "
              "ladder, then the mean over seeds with its 95 % t interval")


def sp_rate(rows: list[Row], width: int = TARGET_WIDTH) -> Rate:
  """Under sp: each seed's line of log(optimum) against log2(width), extrapolated to ``width``,
  then the mean over seeds with its t interval; the check: the same lines fitted without the
  widest rung, and their prediction there against its fitted optima."""
  points, _ = fitted_optima(rows, REFERENCE)
  def predict(pts, at):
    out = {}
    for s, by_w in pts.items():
      if len(by_w) >= 2:
        x, y = [math.log2(w) for w in by_w], list(by_w.values())
        slope, icpt = np.polyfit(x, y, 1)
        out[s] = float(icpt + slope * math.log2(at))
    return out
  full = predict(points, width)
  e = stats.one_sample(list(full.values()))
  if not math.isfinite(e.diff):
    return Rate(REFERENCE, None, None, "no fitted sp optima")
  widest = max(w for v in points.values() for w in v)
  held = predict({s: {w: v for w, v in by_w.items() if w != widest} for s, by_w in points.items()}, widest)
  seen = {s: by_w[widest] for s, by_w in points.items() if widest in by_w}
  errs = [held[s] - seen[s] for s in sorted(set(held) & set(seen))]
  check = ""
  if errs:
    c = stats.one_sample(errs)
    check = (f"fitted without d{widest}, the lines predict its optimum x{math.exp(c.diff):.2f} of the "
             f"fitted one" + (f" [{math.exp(c.lo):.2f}, {math.exp(c.hi):.2f}]" if c.defined else ""))
  interval = (math.exp(e.lo), math.exp(e.hi)) if e.defined else None
  return Rate(REFERENCE, math.exp(e.diff), interval,
              f"per seed the line of log(optimum) against log2(d_model) extrapolated to {width}, "
              f"the mean over seeds with its 95 % t interval", check)


def predictions(rows: list[Row]) -> list[Rate]:
  return [mup_rate(rows), sp_rate(rows)]


RULE_ROOTS = ("judge", "predictions")
