"""Verdict rules for the norm x MLP study: each can come out reproduced, not reproduced or inconclusive.

The rules see only ``Run`` records (one per trained model: its arms, learning rate, seed,
final validation loss and a few diagnostics), so they can be tested on synthetic numbers
(tests/test_report.py) and re-judge a committed study without retraining.

Two numbers govern every comparison of losses, both in nats:

- ``MIN_EFFECT``: differences smaller than this do not count as an effect, however
  tight the seeds (a 0.003-nat gap is no evidence that wider is better);
- ``K``: a difference is decisive when it exceeds ``K`` standard errors of the difference
  of the two means (seed spread), and the two are equivalent when the difference plus
  ``K`` standard errors stays under ``MIN_EFFECT`` (two one-sided tests). Anything in
  between, or any arm with fewer than two seeds, is inconclusive.

Comparisons "at each arm's own best rate" need that optimum bracketed: when the arm that
looks worse has its best rate at the smallest or largest rate tried (or fewer than three
rates), it might do better off the grid, and the comparison is inconclusive.

A diverged model (or one whose loss ends above the loss at initialisation) counts with
the loss at initialisation, as in Wortsman et al. 2023's learning-rate sensitivity
``mean over rates of min(final loss, initial loss) - best loss over the rates``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Iterable

import numpy as np

MIN_EFFECT = 0.02  # nats
K = 2.0  # standard errors
# A per-layer ratio (last / first) counts as growth above this, as flat within its inverse.
GROWTH = 1.5

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "Reproduced", "Not reproduced", "Inconclusive"


@dataclasses.dataclass(frozen=True)
class Run:
  """One trained model, as the verdicts see it."""
  arms: tuple[str, ...]
  lr: float
  seed: int
  final: float  # final validation loss; nan when diverged or missing
  initial: float  # the loss at initialisation (measured, or ln V)
  diverged: bool = False
  norm: str = "pre"
  init: str = "gpt2"
  grad_ratio_init: float = float("nan")  # MLP gradient norm at init, last layer / first
  resid_ratio_init: float = float("nan")  # residual-stream norm, last block / first block
  resid_ratio_end: float = float("nan")  # the same at the last probe of training

  @property
  def clipped(self) -> float:
    """``min(final, initial)``; a diverged or missing final loss counts as the initial loss."""
    if self.diverged or not math.isfinite(self.final):
      return self.initial
    return min(self.final, self.initial)


@dataclasses.dataclass(frozen=True)
class Comparison:
  """``a - b`` in nats with its standard error and the outcome of the rule."""
  diff: float
  se: float
  outcome: str  # "lower", "higher", "same", "unclear"

  def text(self) -> str:
    se = "n/a" if math.isnan(self.se) else f"{self.se:.3f}"
    return f"{self.diff:+.3f} nats (standard error {se}: {self.outcome})"


def compare(a: Iterable[float], b: Iterable[float], min_effect: float = MIN_EFFECT,
            k: float = K) -> Comparison:
  """Is ``mean(a)`` decisively lower or higher than ``mean(b)``, the same, or unclear?"""
  a, b = np.asarray(list(a), float), np.asarray(list(b), float)
  a, b = a[np.isfinite(a)], b[np.isfinite(b)]
  if not len(a) or not len(b):
    return Comparison(float("nan"), float("nan"), "unclear")
  diff = float(a.mean() - b.mean())
  if len(a) < 2 or len(b) < 2:
    return Comparison(diff, float("nan"), "unclear")  # no seed spread to judge against
  se = float(math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)))
  if abs(diff) > max(min_effect, k * se):
    outcome = "lower" if diff < 0 else "higher"
  elif abs(diff) + k * se < min_effect:
    outcome = "same"
  else:
    outcome = "unclear"
  return Comparison(diff, se, outcome)


def versus(values: Iterable[float], threshold: float, k: float = K) -> str:
  """Whether positive ratios lie decisively ``above`` or ``below`` ``threshold`` (log scale)."""
  x = np.log(np.asarray([v for v in values if v is not None and np.isfinite(v) and v > 0], float))
  if len(x) < 2:
    return "unclear"
  margin = k * x.std(ddof=1) / math.sqrt(len(x))
  t = math.log(threshold)
  if x.mean() - margin > t:
    return "above"
  if x.mean() + margin < t:
    return "below"
  return "unclear"


# ----------------------------------------------------------------------------- one arm over the rates


def by_arm(runs: Iterable[Run]) -> dict[str, list[Run]]:
  arms = defaultdict(list)
  for run in runs:
    for arm in run.arms:
      arms[arm].append(run)
  return dict(arms)


def by_rate(runs: list[Run]) -> dict[float, list[Run]]:
  rates = defaultdict(list)
  for run in runs:
    rates[run.lr].append(run)
  return dict(sorted(rates.items()))


def rate_curve(runs: list[Run]) -> dict[float, dict]:
  """Per rate: mean and std over seeds of the clipped final loss, seeds, divergences."""
  out = {}
  for lr, rs in by_rate(runs).items():
    x = np.array([r.clipped for r in rs])
    out[lr] = {"mean": float(x.mean()), "std": float(x.std(ddof=1)) if len(x) > 1 else float("nan"),
               "seeds": len(rs), "diverged": sum(r.diverged for r in rs),
               "losses": x.tolist()}
  return out


def best_rate(runs: list[Run]) -> float | None:
  """The rate with the lowest mean clipped loss (None for an empty arm)."""
  curve = rate_curve(runs)
  return min(curve, key=lambda lr: curve[lr]["mean"]) if curve else None


def at_edge(runs: list[Run]) -> bool:
  """Whether the best rate is the smallest or largest tried: the optimum is not bracketed."""
  rates = sorted(by_rate(runs))
  return len(rates) < 3 or best_rate(runs) in (rates[0], rates[-1])


def losses_at(runs: list[Run], lr: float | None) -> list[float]:
  return [r.clipped for r in runs if r.lr == lr]


def at_best(runs: list[Run]) -> list[float]:
  return losses_at(runs, best_rate(runs))


def lr_sensitivity(runs: list[Run]) -> float:
  """Wortsman et al. 2023: mean over rates of min(final, initial) - the best over rates.

  Computed on the seed-mean curve; nan with fewer than two rates.
  """
  curve = rate_curve(runs)
  if len(curve) < 2:
    return float("nan")
  means = np.array([c["mean"] for c in curve.values()])
  return float(means.mean() - means.min())


def lr_sensitivity_per_seed(runs: list[Run]) -> list[float]:
  """The sensitivity of each seed's own curve (seeds with fewer than two rates are left out)."""
  seeds = defaultdict(list)
  for r in runs:
    seeds[r.seed].append(r)
  return [lr_sensitivity(rs) for rs in seeds.values() if len(by_rate(rs)) >= 2]


def compare_best(a: list[Run], b: list[Run]) -> Comparison:
  """``compare`` at each arm's own best rate; unclear where the arm that looks worse (or
  either, for "same") has its optimum at the edge of the grid: it may do better off it."""
  c = compare(at_best(a), at_best(b))
  edge = {"higher": at_edge(a), "lower": at_edge(b), "same": at_edge(a) or at_edge(b)}
  if edge.get(c.outcome, False):
    return dataclasses.replace(c, outcome="unclear (optimum not bracketed)")
  return c


def describe(runs: list[Run]) -> str:
  """``best rate 1e-3: 4.61 ± 0.01 (3 seeds)`` for the text of a verdict."""
  lr = best_rate(runs)
  if lr is None:
    return "no runs"
  x = np.array(losses_at(runs, lr))
  spread = f" ± {x.std(ddof=1):.3f}" if len(x) > 1 else ""
  return f"{x.mean():.3f}{spread} at its best rate {lr:.2g} ({len(x)} seed{'s' * (len(x) != 1)})"


# ----------------------------------------------------------------------------- the claims


@dataclasses.dataclass
class Verdict:
  claim: str
  verdict: str
  lines: list[str]
  rule: str

  def markdown(self) -> list[str]:
    return [f"**{self.verdict}.** " + " ".join(self.lines), "", f"Rule: {self.rule}"]


def _missing(claim: str, what: str, rule: str) -> Verdict:
  return Verdict(claim, INCONCLUSIVE, [f"Not enough runs: {what}."], rule)


def warmup_hurts(arms: dict, norm: str) -> tuple[str, list[str]]:
  """Does removing warmup hurt ``norm``? At each arm's own best rate, and at the warmup arm's."""
  no = arms.get(f"norm:{norm}/none", [])
  warm = [r for w in ("short", "long") for r in arms.get(f"norm:{norm}/{w}", [])]
  if not no or not warm:
    return "unclear", [f"{norm}-LN: missing the no-warmup or the warmup arms."]
  best_warm = min((w for w in ("short", "long") if arms.get(f"norm:{norm}/{w}")),
                  key=lambda w: np.mean(at_best(arms[f"norm:{norm}/{w}"])))
  warm = arms[f"norm:{norm}/{best_warm}"]
  own = compare_best(no, warm)
  shared_lr = best_rate(warm)
  shared = compare(losses_at(no, shared_lr), losses_at(warm, shared_lr))
  text = (f"{norm}-LN without warmup: {describe(no)}; with {best_warm} warmup: {describe(warm)}; "
          f"difference at own best rates {own.text()}; at the warmup arm's best rate "
          f"{shared_lr:.2g}: {shared.text()}.")
  return own.outcome, [text]


def claim_warmup(runs: list[Run]) -> Verdict:
  rule = ("at each arm's own best learning rate (the best of the short and long warmups "
          "stands for 'with warmup'; an arm whose best rate is the smallest or largest tried, "
          "or that has fewer than three rates, cannot be called worse), reproduced when post-LN without warmup is decisively "
          "worse than with it and pre-LN without warmup is not decisively worse (equivalent "
          "or better); not reproduced when post-LN without warmup is equivalent or better, or "
          "pre-LN without warmup is decisively worse; inconclusive otherwise. Decisive: "
          f"more than max({MIN_EFFECT} nats, {K:g} standard errors); equivalent: difference "
          f"plus {K:g} standard errors under {MIN_EFFECT} nats. The comparison at the warmup "
          "arm's best rate is reported, not judged.")
  arms = by_arm(runs)
  post, post_text = warmup_hurts(arms, "post")
  pre, pre_text = warmup_hurts(arms, "pre")
  if post == "higher" and pre in ("same", "lower"):
    verdict = REPRODUCED
  elif post in ("same", "lower") or pre == "higher":
    verdict = NOT_REPRODUCED
  else:
    verdict = INCONCLUSIVE
  return Verdict("post-LN needs warmup; pre-LN does not", verdict, post_text + pre_text, rule)


def claim_smaller_rate(runs: list[Run]) -> Verdict:
  rule = ("with warmup (the long warmup arms), reproduced when post-LN's best rate is below "
          "pre-LN's and post-LN at pre-LN's best rate is decisively worse than at its own; "
          "not reproduced when post-LN's best rate is at or above pre-LN's; inconclusive "
          "when either optimum lies at the edge of the rate grid or the seeds do not decide.")
  arms = by_arm(runs)
  post, pre = arms.get("norm:post/long", []), arms.get("norm:pre/long", [])
  if not post or not pre:
    return _missing("post-LN needs a smaller learning rate", "norm:post/long and norm:pre/long", rule)
  lp, lq = best_rate(post), best_rate(pre)
  lines = [f"Post-LN {describe(post)}; pre-LN {describe(pre)}."]
  if at_edge(post) or at_edge(pre):
    lines.append("An optimum lies at the edge of the rate grid (or fewer than three rates).")
    return Verdict("post-LN needs a smaller learning rate", INCONCLUSIVE, lines, rule)
  if lp >= lq:
    return Verdict("post-LN needs a smaller learning rate", NOT_REPRODUCED, lines, rule)
  c = compare(losses_at(post, lq), losses_at(post, lp))
  lines.append(f"Post-LN at pre-LN's best rate minus at its own: {c.text()}.")
  verdict = REPRODUCED if c.outcome == "higher" else INCONCLUSIVE
  return Verdict("post-LN needs a smaller learning rate", verdict, lines, rule)


def claim_sensitivity(runs: list[Run]) -> Verdict:
  rule = ("learning-rate sensitivity (Wortsman et al. 2023) of each seed's curve without "
          "warmup; reproduced when post-LN's is decisively higher than pre-LN's, not "
          "reproduced when it is equivalent or lower, inconclusive otherwise (the same "
          "decisive/equivalent thresholds as for losses).")
  arms = by_arm(runs)
  post, pre = arms.get("norm:post/none", []), arms.get("norm:pre/none", [])
  sp, sq = lr_sensitivity_per_seed(post), lr_sensitivity_per_seed(pre)
  if not sp or not sq:
    return _missing("post-LN is more sensitive to the learning rate", "two rates per seed in "
                    "norm:post/none and norm:pre/none", rule)
  c = compare(sp, sq)
  lines = [f"Sensitivity without warmup: post-LN {np.mean(sp):.3f}, pre-LN {np.mean(sq):.3f} "
           f"(difference {c.text()}).",
           f"The metric is relative to each arm's own best (post-LN {describe(post)}; pre-LN "
           f"{describe(pre)}): an arm that ends near the same loss at every rate scores low "
           f"however poor that loss is."]
  long_post, long_pre = arms.get("norm:post/long", []), arms.get("norm:pre/long", [])
  if len(by_rate(long_post)) > 1 and len(by_rate(long_pre)) > 1:
    lines.append(f"With the long warmup (reported, not judged): post-LN "
                 f"{lr_sensitivity(long_post):.3f}, pre-LN {lr_sensitivity(long_pre):.3f}.")
  verdict = {"higher": REPRODUCED, "same": NOT_REPRODUCED, "lower": NOT_REPRODUCED}.get(c.outcome, INCONCLUSIVE)
  return Verdict("post-LN is more sensitive to the learning rate", verdict, lines, rule)


def _per_seed(runs: list[Run], field: str) -> list[float]:
  """One value per seed (every cell of a seed shares its initialisation)."""
  seen = {}
  for r in runs:
    v = getattr(r, field)
    if np.isfinite(v):
      seen.setdefault(r.seed, v)
  return list(seen.values())


def gradient_profile(runs: list[Run], init: str) -> tuple[str, list[str]]:
  """Xiong et al.'s claim under one initialisation: post-LN grows, pre-LN flat."""
  pick = lambda norm: _per_seed([r for r in runs if r.init == init and r.norm == norm
                                 and any(a.startswith(("norm:", "init:")) for a in r.arms)],
                                "grad_ratio_init")
  post, pre = pick("post"), pick("pre")
  if not post or not pre:
    return INCONCLUSIVE, [f"{init} init: no step-0 gradient profiles."]
  post_v = versus(post, GROWTH)
  pre_flat = versus(pre, GROWTH) == "below" and versus(pre, 1 / GROWTH) == "above"
  pre_out = versus(pre, GROWTH) == "above" or versus(pre, 1 / GROWTH) == "below"
  line = (f"{init} init, MLP gradient norm last layer / first layer: post-LN "
          f"{np.exp(np.mean(np.log(post))):.2f} ({len(post)} seeds), pre-LN "
          f"{np.exp(np.mean(np.log(pre))):.2f} ({len(pre)} seeds).")
  if post_v == "above" and pre_flat:
    return REPRODUCED, [line]
  if post_v == "below" or pre_out:
    return NOT_REPRODUCED, [line]
  return INCONCLUSIVE, [line]


def claim_gradients(runs: list[Run]) -> Verdict:
  rule = (f"per initialisation, on the geometric mean over seeds of last/first: reproduced "
          f"when post-LN's lies above {GROWTH} and pre-LN's within 1/{GROWTH}..{GROWTH}, "
          f"each by more than {K:g} standard errors of the log ratio; not reproduced when "
          f"post-LN's lies decisively below {GROWTH} or pre-LN's decisively outside the flat "
          "band; inconclusive otherwise. The verdict is the one under the initialisation Xiong et al. "
          "analysed (Xavier); the GPT-2 result is reported beside it.")
  inits = sorted({r.init for r in runs})
  results = {init: gradient_profile(runs, init) for init in inits}
  lines = [l for _, ls in results.values() for l in ls]
  verdict = results["xavier"][0] if "xavier" in results else INCONCLUSIVE
  if results:
    lines.append(("Verdict from the xavier initialisation" if "xavier" in results else
                  "No xavier-initialised models, so no verdict") + "; per initialisation: "
                 + ", ".join(f"{i}: {v[0].lower()}" for i, v in results.items()) + ".")
  return Verdict("at init post-LN's gradients grow toward the output; pre-LN's are flat",
                 verdict, lines or ["No step-0 diagnostics."], rule)


def claim_residual(runs: list[Run]) -> Verdict:
  rule = (f"reproduced when pre-LN's residual-stream norm, last block / first block, at the "
          f"end of training (each pre-LN norm arm at its best rate) lies above {GROWTH} by more than {K:g} standard errors of the log "
          f"ratio over models; not reproduced when it lies decisively below; inconclusive otherwise "
          f"(a ratio at the threshold is not growth).")
  # Each pre-LN norm arm at its best rate: a model that barely trained says little.
  arms = by_arm(r for r in runs if r.norm == "pre" and r.init == "gpt2")
  pre = [r for arm, rs in arms.items() if arm.startswith("norm:")
         for r in rs if r.lr == best_rate(rs) and not r.diverged]
  end = [r.resid_ratio_end for r in pre if np.isfinite(r.resid_ratio_end)]
  init = _per_seed(pre, "resid_ratio_init")
  if len(end) < 2:
    return _missing("pre-LN's residual stream grows with depth", "end-of-training probes of "
                    "two pre-LN models", rule)
  v = versus(end, GROWTH)
  lines = [f"Pre-LN, last/first block: {np.exp(np.mean(np.log(end))):.2f} at the end of training "
           f"({len(end)} models)" + (f", {np.exp(np.mean(np.log(init))):.2f} at init" if init else "") + "."]
  verdict = {"above": REPRODUCED, "below": NOT_REPRODUCED}.get(v, INCONCLUSIVE)
  return Verdict("pre-LN's residual stream grows with depth", verdict, lines, rule)


def _ratio_arms(arms: dict, prefix: str) -> dict[float, list[Run]]:
  return dict(sorted((float(a.split(":", 1)[1]), rs) for a, rs in arms.items()
                     if a.startswith(prefix + ":")))


def claim_matched(runs: list[Run]) -> Verdict:
  rule = ("parameter-matched MLP ratios, each at its own best rate: reproduced (the shape "
          "matters little, Kaplan et al. 2020) when every pair of ratios is equivalent "
          f"(within {MIN_EFFECT} nats including {K:g} standard errors); not reproduced when "
          "some pair differs decisively; inconclusive otherwise.")
  ratios = _ratio_arms(by_arm(runs), "mlp_matched")
  if len(ratios) < 2:
    return _missing("parameter-matched MLP ratios perform alike", "two mlp_matched arms", rule)
  keys = list(ratios)
  pairs = [(a, b, compare_best(ratios[a], ratios[b]))
           for i, a in enumerate(keys) for b in keys[i + 1:]]
  lines = ["; ".join(f"r={r:g}: {describe(rs)}" for r, rs in ratios.items()) + "."]
  differ = [f"r={a:g} vs r={b:g} {c.text()}" for a, b, c in pairs if c.outcome in ("lower", "higher")]
  if differ:
    lines.append("Decisive differences: " + "; ".join(differ) + ".")
    verdict = NOT_REPRODUCED
  else:
    verdict = REPRODUCED if all(c.outcome == "same" for *_, c in pairs) else INCONCLUSIVE
  return Verdict("parameter-matched MLP ratios perform alike", verdict, lines, rule)


def claim_width(runs: list[Run]) -> Verdict:
  rule = ("MLP ratio at fixed d_model, each at its own best rate, at least three ratios: "
          "reproduced (wider is better, with diminishing returns) when the first step up is "
          "decisively better, no step is decisively worse, and no later gain exceeds the first "
          f"by more than {K:g} standard errors; not reproduced when some step is decisively "
          "worse or the first step is equivalent; inconclusive otherwise.")
  ratios = _ratio_arms(by_arm(runs), "mlp_width")
  if len(ratios) < 3:
    return _missing("wider MLPs are better, with diminishing returns", "three mlp_width arms", rule)
  keys = list(ratios)
  steps = [compare_best(ratios[b], ratios[a]) for a, b in zip(keys, keys[1:])]
  lines = ["; ".join(f"r={r:g}: {describe(rs)}" for r, rs in ratios.items()) + ".",
           "Steps up: " + "; ".join(f"r={a:g}->{b:g} {c.text()}"
                                    for a, b, c in zip(keys, keys[1:], steps)) + "."]
  first = steps[0]
  growing = any(-c.diff > -first.diff + K * math.hypot(c.se, first.se) for c in steps[1:]
                if np.isfinite(c.se) and np.isfinite(first.se))
  if any(c.outcome == "higher" for c in steps) or first.outcome == "same" or growing:
    verdict = NOT_REPRODUCED
  elif first.outcome == "lower":
    verdict = REPRODUCED
  else:
    verdict = INCONCLUSIVE
  return Verdict("wider MLPs are better, with diminishing returns", verdict, lines, rule)


def claim_swiglu(runs: list[Run]) -> Verdict:
  rule = ("SwiGLU at r=8/3 against GELU at r=4 (same parameter count), each at its own best "
          "rate: reproduced when SwiGLU is decisively lower (Shazeer 2020); not reproduced "
          "when it is equivalent or decisively higher; inconclusive otherwise. The comparison "
          "at GELU's best rate is reported, not judged.")
  arms = by_arm(runs)
  sw, ge = arms.get("swiglu", []), arms.get("mlp_width:4", [])
  if not sw or not ge:
    return _missing("SwiGLU beats GELU at equal size", "the swiglu and mlp_width:4 arms", rule)
  c = compare_best(sw, ge)
  shared = compare(losses_at(sw, best_rate(ge)), losses_at(ge, best_rate(ge)))
  lines = [f"SwiGLU {describe(sw)}; GELU {describe(ge)}; SwiGLU - GELU at own best rates "
           f"{c.text()}; at GELU's best rate {shared.text()} (Shazeer: about -0.04)."]
  verdict = {"lower": REPRODUCED, "same": NOT_REPRODUCED, "higher": NOT_REPRODUCED}.get(c.outcome, INCONCLUSIVE)
  return Verdict("SwiGLU beats GELU at equal size", verdict, lines, rule)


def claim_depth(runs: list[Run]) -> Verdict:
  rule = ("post-LN minus pre-LN (both with long warmup, each at the best of the rates the "
          "deeper arm was tried at, bracketed or not) in the deeper setting against the same "
          "gap at the base depth over the same rates: reproduced when the deeper gap is "
          "decisively larger (Liu et al. 2020: post-LN's trouble grows with depth), not "
          "reproduced when it is equivalent or smaller, inconclusive otherwise; the gaps' "
          "standard errors add.")
  arms = by_arm(runs)
  deep = {n: arms.get(f"depth:{n}", []) for n in ("post", "pre")}
  base = {n: arms.get(f"norm:{n}/long", []) for n in ("post", "pre")}
  if not all(deep.values()) or not all(base.values()):
    return _missing("post-LN's trouble grows with depth", "depth:post, depth:pre, "
                    "norm:post/long and norm:pre/long", rule)
  # The deep arms get a few rates around the base arms' optima, not a grid that brackets
  # their own: the base depth is judged over the same rates (where it has them), so that
  # a deep arm that missed its optimum is not read as depth hurting.
  same = {n: [r for r in base[n] if r.lr in by_rate(deep[n])] or base[n] for n in base}
  g_deep = compare(at_best(deep["post"]), at_best(deep["pre"]))
  g_base = compare(at_best(same["post"]), at_best(same["pre"]))
  rates = {n: ", ".join(f"{lr:.2g}" for lr in sorted(by_rate(deep[n]))) for n in deep}
  lines = [f"Rates tried deeper: post-LN {rates['post']}, pre-LN {rates['pre']}; the base "
           f"depth's best over its full grid: post-LN {best_rate(base['post']):.2g}, pre-LN "
           f"{best_rate(base['pre']):.2g}.",
           f"Post-LN minus pre-LN at the best of those rates: deeper {g_deep.text()}; base "
           f"depth {g_base.text()}."]
  if not (np.isfinite(g_deep.se) and np.isfinite(g_base.se)):
    return Verdict("post-LN's trouble grows with depth", INCONCLUSIVE, lines, rule)
  d, se = g_deep.diff - g_base.diff, math.hypot(g_deep.se, g_base.se)
  if d > max(MIN_EFFECT, K * se):
    verdict = REPRODUCED
  elif d + K * se < MIN_EFFECT:
    verdict = NOT_REPRODUCED
  else:
    verdict = INCONCLUSIVE
  lines.append(f"Growth of the gap: {d:+.3f} nats (standard error {se:.3f}).")
  return Verdict("post-LN's trouble grows with depth", verdict, lines, rule)


CLAIMS = (claim_warmup, claim_smaller_rate, claim_sensitivity, claim_gradients, claim_residual,
          claim_depth, claim_matched, claim_width, claim_swiglu)


def judge(runs: list[Run]) -> list[Verdict]:
  return [claim(runs) for claim in CLAIMS]
