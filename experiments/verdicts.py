"""Verdict rules for the norm x MLP study: each can come out reproduced, not reproduced or inconclusive.

The rules see only ``Run`` records (one per trained model: its arms, learning rate, seed,
final validation loss and a few diagnostics), so they are tested on synthetic numbers
(tests/test_report.py) and re-judge a committed study without retraining. The statistics
(paired t intervals, Welch, Holm, equivalence) live in ``experiments/stats.py``.

How an arm is summarised:

- Every model counts with ``min(final loss, loss at init)``; a diverged model with the loss
  at init (Wortsman et al. 2023).
- **Optimum per seed.** Each seed's loss-vs-log(rate) curve is fitted by a parabola through
  its best grid point and the two neighbouring rates; the vertex is the seed's optimal rate
  and the parabola's value there its best loss. A seed whose best grid point is the
  smallest or largest rate tried is *not bracketed*: its optimum may lie off the grid
  (the sweep adds a rate in that direction before anything is judged, ``refine_rates``).
  An arm's optimum is the mean over seeds of the log optimum, with its t interval, so one
  unstable seed moves only its own optimum.
- **Learns.** An arm learns when its seeds' best losses lie decisively (upper end of the
  95 % interval) at least ``LEARNS_BY`` nats below the unigram baseline: an arm on the
  unigram plateau at every rate has no optimum to speak of.
- **Sensitivity** (Wortsman et al. 2023), one definition everywhere (table and verdict):
  per seed, the mean over the *base grid* (the first-round rates, the same for the arms
  compared) of ``min(final, initial)`` minus that seed's best over the same rates.

Comparisons between arms pair the seeds they share (``stats.compare``); a claim's several
comparisons are Holm-corrected; every verdict carries its effect with a 95 % interval and
says whether it survives leaving out any one seed (``judge``). A claim the seeds cannot
decide is inconclusive, never "not reproduced".
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Iterable

import numpy as np

from experiments import stats
from experiments.stats import Effect

# A per-layer ratio (last / first) counts as growth above this, as flat within its inverse.
GROWTH = 1.5
# An arm learns when its best loss lies decisively this far below the unigram baseline.
LEARNS_BY = 0.1  # nats
# Equivalence margins, fixed before the run, each from its claim's literature:
# Kaplan et al. 2020 (Fig. 5): over a wide range of d_ff/d_model at a fixed parameter
# count the loss moves "a few percent": alike = within 2 % of the r = 4 arm's loss.
MATCHED_MARGIN = 0.02  # relative
# Shazeer 2020: SwiGLU beats GELU by about 0.04 nats; an improvement decisively smaller
# than half of that does not reproduce the claim.
SWIGLU_CLAIMED = 0.04  # nats
# Xiong et al. 2020: post-LN without warmup fails to train (8.45 against ~34 BLEU); an
# interaction within 0.05 nats (about 1 % of the loss) is none at all.
WARMUP_MARGIN = 0.05  # nats
# Post-LN's optimal rate "smaller": equivalent when within a factor 1.5 (the same rate,
# half a 3x grid step), else lower or higher.
RATE_FACTOR = 1.5
# Sensitivities (Wortsman et al. 2023 report differences of tenths between settings):
# equivalent when within 0.05 nats.
SENSITIVITY_MARGIN = 0.05  # nats
# The warmup that stands for "with warmup", fixed before the run (the sweep's long warmup).
WITH_WARMUP = "long"

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
  unigram: float = float("nan")  # the unigram baseline's validation loss
  round: int = 0  # 0: the sweep's base grid; 1, 2: rates added around the optimum

  @property
  def clipped(self) -> float:
    """``min(final, initial)``; a diverged or missing final loss counts as the initial loss."""
    if self.diverged or not math.isfinite(self.final):
      return self.initial
    return min(self.final, self.initial)


# ----------------------------------------------------------------------------- one arm


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


def by_seed(runs: list[Run]) -> dict[int, list[Run]]:
  seeds = defaultdict(list)
  for run in runs:
    seeds[run.seed].append(run)
  return dict(sorted(seeds.items()))


def rate_curve(runs: list[Run]) -> dict[float, dict]:
  """Per rate: mean and std over seeds of the clipped final loss, seeds, divergences."""
  out = {}
  for lr, rs in by_rate(runs).items():
    x = np.array([r.clipped for r in rs])
    out[lr] = {"mean": float(x.mean()), "std": float(x.std(ddof=1)) if len(x) > 1 else float("nan"),
               "seeds": len(rs), "diverged": sum(r.diverged for r in rs), "losses": x.tolist()}
  return out


# The widest bracket (ratio of a neighbour's rate to the best's) a parabola is fitted over.
MAX_FIT_STEP = 10.0


@dataclasses.dataclass(frozen=True)
class Optimum:
  """One seed's optimum: the fitted rate, the fitted loss there, whether it is bracketed."""
  lr: float
  loss: float
  bracketed: bool
  grid_lr: float  # the best rate tried


def fit_optimum(points: dict[float, float]) -> Optimum | None:
  """The vertex of the parabola in log(rate) through the best point and its neighbours."""
  pts = sorted((lr, l) for lr, l in points.items() if lr > 0 and math.isfinite(l))
  if not pts:
    return None
  i = min(range(len(pts)), key=lambda j: pts[j][1])
  lr, loss = pts[i]
  if i == 0 or i == len(pts) - 1:
    return Optimum(lr, loss, False, lr)
  x = np.log([p[0] for p in pts[i - 1:i + 2]])
  y = np.array([p[1] for p in pts[i - 1:i + 2]])
  a, b, c = np.polyfit(x, y, 2)
  # Three equal losses (no curvature), or a neighbour more than MAX_FIT_STEP away (a
  # parabola over such a span is no local fit): the grid point stands.
  if a <= 0 or x[2] - x[0] > 2 * math.log(MAX_FIT_STEP):
    return Optimum(lr, loss, True, lr)
  vertex = float(np.clip(-b / (2 * a), x[0], x[2]))
  return Optimum(float(np.exp(vertex)), float(min(loss, np.polyval((a, b, c), vertex))), True, lr)


def optima(runs: list[Run]) -> dict[int, Optimum]:
  """Each seed's optimum over the rates it was trained at."""
  out = {}
  for seed, rs in by_seed(runs).items():
    opt = fit_optimum({r.lr: r.clipped for r in rs})
    if opt is not None:
      out[seed] = opt
  return out


def best_losses(runs: list[Run]) -> dict[int, float]:
  return {s: o.loss for s, o in optima(runs).items()}


def log_optima(runs: list[Run]) -> dict[int, float]:
  return {s: math.log(o.lr) for s, o in optima(runs).items()}


def bracketed(runs: list[Run]) -> bool:
  """Whether every seed's optimum lies inside the rates tried."""
  opts = optima(runs)
  return bool(opts) and all(o.bracketed for o in opts.values())


def unigram(runs: list[Run]) -> float:
  known = [r.unigram for r in runs if math.isfinite(r.unigram)]
  return float(np.median(known)) if known else float("nan")


def learns(runs: list[Run]) -> bool:
  """Whether the arm's best losses lie decisively ``LEARNS_BY`` below the unigram baseline."""
  u = unigram(runs)
  e = stats.one_sample([l - u for l in best_losses(runs).values()])
  return e.defined and e.hi < -LEARNS_BY


def refine_rates(runs: list[Run], max_step: float = 2.0) -> list[float]:
  """Rates to add so that each learning seed's optimum is bracketed at most ``max_step``
  apart: the geometric midpoint toward a neighbour further than that, and one rate beyond
  an optimum at the grid's edge (one grid step further). Nothing for an arm that does not
  learn: its curve has no optimum to bracket."""
  if not learns(runs):
    return []
  rates = sorted(by_rate(runs))
  new = set()
  for opt in optima(runs).values():
    i = rates.index(opt.grid_lr)
    if len(rates) == 1:
      new.update((rates[0] / 3, rates[0] * 3))
      continue
    if i == 0:  # one grid step further, the step the grid takes at that edge
      new.add(rates[0] ** 2 / rates[1])
    if i == len(rates) - 1:
      new.add(rates[-1] ** 2 / rates[-2])
    for j in (i - 1, i + 1):
      if 0 <= j < len(rates):
        lo, hi = sorted((rates[i], rates[j]))
        if hi / lo > max_step * 1.0001:
          new.add(math.sqrt(lo * hi))
  return sorted(float(f"{lr:.3g}") for lr in new if lr not in rates)


def base_rates(*arms: list[Run]) -> list[float]:
  """The first-round rates every seed of every given arm was trained at."""
  sets = [{r.lr for r in rs if r.round == 0 and r.seed == s}
          for rs in arms for s in by_seed(rs)]
  return sorted(set.intersection(*sets)) if sets else []


def sensitivity(runs: list[Run], rates: list[float] | None = None) -> dict[int, float]:
  """Wortsman et al. 2023, per seed: mean over ``rates`` (default: the arm's base grid) of
  min(final, initial) minus the best over them; seeds lacking a rate are left out."""
  rates = base_rates(runs) if rates is None else rates
  if len(rates) < 2:
    return {}
  out = {}
  for seed, rs in by_seed(runs).items():
    at = {r.lr: r.clipped for r in rs if r.lr in rates}
    if len(at) == len(rates):
      x = np.array(list(at.values()))
      out[seed] = float(x.mean() - x.min())
  return out


def summary(runs: list[Run]) -> dict:
  """The arm's optimum (rate and loss with 95 % intervals), sensitivity and learning."""
  opts = optima(runs)
  lr = stats.one_sample([math.log(o.lr) for o in opts.values()])
  loss = stats.one_sample([o.loss for o in opts.values()])
  sens = stats.one_sample(list(sensitivity(runs).values()))
  return {"optimum_lr": math.exp(lr.diff) if math.isfinite(lr.diff) else None,
          "optimum_lr_interval": [math.exp(lr.lo), math.exp(lr.hi)] if lr.defined else None,
          "optimum_loss": loss.diff if math.isfinite(loss.diff) else None,
          "optimum_loss_interval": [loss.lo, loss.hi] if loss.defined else None,
          "bracketed_seeds": sum(o.bracketed for o in opts.values()), "seeds": len(opts),
          "sensitivity": sens.diff if math.isfinite(sens.diff) else None,
          "sensitivity_interval": [sens.lo, sens.hi] if sens.defined else None,
          "base_rates": base_rates(runs), "learns": learns(runs)}


def describe(runs: list[Run]) -> str:
  """``optimum 2.1e-3 [1.6e-3, 2.8e-3], loss 4.612 [4.60, 4.62] (3 seeds, 3 bracketed)``."""
  s = summary(runs)
  if not s["seeds"]:
    return "no runs"
  lr_ci = ("" if s["optimum_lr_interval"] is None else
           " [{:.2g}, {:.2g}]".format(*s["optimum_lr_interval"]))
  loss_ci = ("" if s["optimum_loss_interval"] is None else
             " [{:.3f}, {:.3f}]".format(*s["optimum_loss_interval"]))
  return (f"optimum {s['optimum_lr']:.2g}{lr_ci}, loss {s['optimum_loss']:.3f}{loss_ci} "
          f"({s['seeds']} seed{'s' * (s['seeds'] != 1)}, {s['bracketed_seeds']} bracketed"
          f"{'' if s['learns'] else '; does not learn'})")


# ----------------------------------------------------------------------------- the claims


@dataclasses.dataclass
class Verdict:
  claim: str
  verdict: str
  lines: list[str]
  rule: str
  effect: Effect | None = None  # the effect the verdict turns on, with its interval
  effect_name: str = ""
  robustness: str = ""  # filled by ``judge``: does it survive leaving out any one seed?

  def markdown(self) -> list[str]:
    head = f"**{self.verdict}.** "
    if self.effect is not None:
      head += f"{self.effect_name}: {self.effect.text()}. "
    return [head + " ".join(self.lines) + (f" {self.robustness}" if self.robustness else ""),
            "", f"Rule: {self.rule}"]


def _missing(claim: str, what: str, rule: str) -> Verdict:
  return Verdict(claim, INCONCLUSIVE, [f"Not enough runs: {what}."], rule)


def _edge_note(named: dict[str, list[Run]]) -> list[str]:
  """Learning arms with a seed whose optimum is at the grid's edge."""
  return [n for n, rs in named.items() if learns(rs) and not bracketed(rs)]


WARMUP_RULE = (
    f"the interaction, per seed, of each arm's fitted best loss: (post-LN without warmup - "
    f"post-LN with the {WITH_WARMUP} warmup) - (pre-LN without - pre-LN with); a paired t "
    f"interval over seeds. Reproduced when the interaction and post-LN's own warmup penalty "
    f"are both decisively positive (Holm over the two); not reproduced when the interaction "
    f"is decisively negative or equivalent to zero within {WARMUP_MARGIN} nats (TOST); "
    f"inconclusive otherwise, when an arm with warmup does not learn, or when an arm that "
    f"learns has a seed's optimum at the grid's edge. The '{WITH_WARMUP}' warmup was fixed before the run; the interaction at each "
    f"rate all four arms share is reported beside it, not judged.")


def claim_warmup(runs: list[Run]) -> Verdict:
  claim = "post-LN needs warmup; pre-LN does not"
  arms = by_arm(runs)
  named = {f"{n}/{w}": arms.get(f"norm:{n}/{w}", []) for n in ("post", "pre")
           for w in ("none", WITH_WARMUP)}
  if not all(named.values()):
    return _missing(claim, "the four norm:{post,pre}/{none,%s} arms" % WITH_WARMUP, WARMUP_RULE)
  best = {k: best_losses(rs) for k, rs in named.items()}
  seeds = set.intersection(*(set(b) for b in best.values()))
  inter = {s: (best["post/none"][s] - best[f"post/{WITH_WARMUP}"][s])
              - (best["pre/none"][s] - best[f"pre/{WITH_WARMUP}"][s]) for s in seeds}
  effect = dataclasses.replace(stats.one_sample(list(inter.values()), WARMUP_MARGIN), kind="paired")
  penalty = stats.paired(best["post/none"], best[f"post/{WITH_WARMUP}"])
  pre_penalty = stats.paired(best["pre/none"], best[f"pre/{WITH_WARMUP}"])
  o_inter, o_pen = stats.outcomes([effect, penalty])
  lines = [f"{k}-LN: {describe(rs)}." for k, rs in named.items()]
  lines.append(f"Warmup penalty (without minus with): post-LN {penalty.text()}, pre-LN "
               f"{pre_penalty.text()}.")
  shared = sorted(set.intersection(*(set(by_rate(rs)) for rs in named.values())))
  at = []
  for lr in shared:
    per = {k: {r.seed: r.clipped for r in rs if r.lr == lr} for k, rs in named.items()}
    d = [per["post/none"][s] - per[f"post/{WITH_WARMUP}"][s] - per["pre/none"][s]
         + per[f"pre/{WITH_WARMUP}"][s] for s in set.intersection(*(set(p) for p in per.values()))]
    at.append(f"{lr:.2g}: {stats.one_sample(d).text()}")
  if at:
    lines.append("The interaction at each shared rate (reported, not judged): " + "; ".join(at) + ".")
  edge = _edge_note(named)
  warm = [k for k in (f"post/{WITH_WARMUP}", f"pre/{WITH_WARMUP}") if not learns(named[k])]
  if warm:
    lines.append(f"With warmup, {' and '.join(k + '-LN' for k in warm)} does not learn: the "
                 f"claim is about models that train.")
    verdict = INCONCLUSIVE
  elif edge:
    lines.append(f"Optimum at the grid's edge for a seed of: {', '.join(edge)}.")
    verdict = INCONCLUSIVE
  elif o_inter == "higher" and o_pen == "higher":
    verdict = REPRODUCED
  elif o_inter in ("lower", "same"):
    verdict = NOT_REPRODUCED
  else:
    verdict = INCONCLUSIVE
  return Verdict(claim, verdict, lines, WARMUP_RULE, effect, "Interaction")


SMALLER_RULE = (
    f"with the {WITH_WARMUP} warmup, the per-seed difference of the fitted optimal rates "
    f"(log post-LN - log pre-LN, paired): reproduced when post-LN's is decisively smaller; "
    f"not reproduced when it is decisively larger or the two are equivalent within a factor "
    f"{RATE_FACTOR} (TOST); inconclusive otherwise, when either arm does not learn, or when a "
    f"seed's optimum lies at the grid's edge.")


def claim_smaller_rate(runs: list[Run]) -> Verdict:
  claim = "post-LN needs a smaller learning rate"
  arms = by_arm(runs)
  post, pre = arms.get(f"norm:post/{WITH_WARMUP}", []), arms.get(f"norm:pre/{WITH_WARMUP}", [])
  if not post or not pre:
    return _missing(claim, f"norm:post/{WITH_WARMUP} and norm:pre/{WITH_WARMUP}", SMALLER_RULE)
  effect = stats.compare(log_optima(post), log_optima(pre), math.log(RATE_FACTOR))
  ratio = dataclasses.replace(effect, diff=math.exp(effect.diff), lo=math.exp(effect.lo),
                              hi=math.exp(effect.hi)) if effect.defined else effect
  lines = [f"Post-LN: {describe(post)}; pre-LN: {describe(pre)}.",
           f"Ratio of optimal rates post/pre: {ratio.diff:.2f}" + (
               f" [95 % CI {ratio.lo:.2f}, {ratio.hi:.2f}]" if effect.defined else "") + "."]
  o = stats.outcome(effect)
  if not (learns(post) and learns(pre)):
    lines.append("An arm does not learn: its optimum is not a rate.")
    verdict = INCONCLUSIVE
  elif not (bracketed(post) and bracketed(pre)):
    lines.append("A seed's optimum lies at the edge of the rate grid.")
    verdict = INCONCLUSIVE
  else:
    verdict = {"lower": REPRODUCED, "higher": NOT_REPRODUCED, "same": NOT_REPRODUCED}.get(o, INCONCLUSIVE)
  return Verdict(claim, verdict, lines, SMALLER_RULE, effect, "Log ratio of optimal rates")


SENSITIVITY_RULE = (
    f"learning-rate sensitivity (Wortsman et al. 2023) per seed over the base grid the two "
    f"arms share, with the {WITH_WARMUP} warmup (fixed before the run), post-LN - pre-LN "
    f"paired by seed: reproduced when decisively positive; not reproduced when decisively "
    f"negative or equivalent within {SENSITIVITY_MARGIN} nats (TOST); inconclusive "
    f"otherwise, or when either arm does not learn (an arm on the unigram plateau at every "
    f"rate scores near zero: 'insensitive' would mean 'never trains').")


def claim_sensitivity(runs: list[Run]) -> Verdict:
  claim = "post-LN is more sensitive to the learning rate"
  arms = by_arm(runs)
  post, pre = arms.get(f"norm:post/{WITH_WARMUP}", []), arms.get(f"norm:pre/{WITH_WARMUP}", [])
  rates = base_rates(post, pre)
  sp, sq = sensitivity(post, rates), sensitivity(pre, rates)
  if not sp or not sq:
    return _missing(claim, f"two shared base-grid rates per seed in norm:post/{WITH_WARMUP} "
                    f"and norm:pre/{WITH_WARMUP}", SENSITIVITY_RULE)
  effect = stats.compare(sp, sq, SENSITIVITY_MARGIN)
  lines = [f"Over the rates {', '.join(f'{lr:.2g}' for lr in rates)}: post-LN "
           f"{stats.one_sample(list(sp.values())).text()}, pre-LN "
           f"{stats.one_sample(list(sq.values())).text()}.",
           f"Post-LN: {describe(post)}; pre-LN: {describe(pre)}."]
  none_post, none_pre = arms.get("norm:post/none", []), arms.get("norm:pre/none", [])
  if none_post and none_pre:
    r0 = base_rates(none_post, none_pre)
    lines.append(f"Without warmup (reported, not judged): post-LN "
                 f"{stats.one_sample(list(sensitivity(none_post, r0).values())).text()}, pre-LN "
                 f"{stats.one_sample(list(sensitivity(none_pre, r0).values())).text()}"
                 + ("" if learns(none_post) else "; post-LN does not learn without warmup") + ".")
  if not (learns(post) and learns(pre)):
    lines.append("An arm does not learn: its sensitivity says nothing.")
    verdict = INCONCLUSIVE
  else:
    verdict = {"higher": REPRODUCED, "lower": NOT_REPRODUCED,
               "same": NOT_REPRODUCED}.get(stats.outcome(effect), INCONCLUSIVE)
  return Verdict(claim, verdict, lines, SENSITIVITY_RULE, effect, "Sensitivity post - pre")


def _per_seed(runs: list[Run], field: str) -> dict[int, float]:
  """One value per seed (every cell of a seed shares its initialisation)."""
  seen = {}
  for r in runs:
    v = getattr(r, field)
    if np.isfinite(v) and v > 0:
      seen.setdefault(r.seed, v)
  return seen


def _log_mean(values: dict[int, float]) -> Effect:
  return stats.one_sample([math.log(v) for v in values.values()])


def _ratio_text(e: Effect) -> str:
  if not math.isfinite(e.diff):
    return "none"
  ci = f" [95 % CI {math.exp(e.lo):.2f}, {math.exp(e.hi):.2f}]" if e.defined else ""
  return f"{math.exp(e.diff):.2f}{ci} ({e.n} seeds)"


def gradient_profile(runs: list[Run], init: str) -> tuple[str, list[str], Effect | None]:
  """Xiong et al.'s claim under one initialisation: post-LN grows, pre-LN flat."""
  pick = lambda norm: _per_seed([r for r in runs if r.init == init and r.norm == norm
                                 and any(a.startswith(("norm:", "init:")) for a in r.arms)],
                                "grad_ratio_init")
  post, pre = _log_mean(pick("post")), _log_mean(pick("pre"))
  if not post.n or not pre.n:
    return INCONCLUSIVE, [f"{init} init: no step-0 gradient profiles."], None
  g = math.log(GROWTH)
  line = (f"{init} init, MLP gradient norm last layer / first layer (geometric mean): post-LN "
          f"{_ratio_text(post)}, pre-LN {_ratio_text(pre)}.")
  pre_flat = stats.beyond(pre, g) == "below" and stats.beyond(pre, -g) == "above"
  if stats.beyond(post, g) == "above" and pre_flat:
    return REPRODUCED, [line], post
  if stats.beyond(post, g) == "below" or stats.beyond(pre, g) == "above" or stats.beyond(pre, -g) == "below":
    return NOT_REPRODUCED, [line], post
  return INCONCLUSIVE, [line], post


def claim_gradients(runs: list[Run]) -> Verdict:
  rule = (f"per initialisation, the log of last/first over seeds with its t interval: "
          f"reproduced when post-LN's interval lies above {GROWTH} and pre-LN's inside "
          f"1/{GROWTH}..{GROWTH}; not reproduced when post-LN's lies below {GROWTH} or "
          f"pre-LN's wholly outside the flat band; inconclusive otherwise. The verdict is the "
          f"one under the initialisation Xiong et al. analysed (Xavier); GPT-2's is reported.")
  inits = sorted({r.init for r in runs})
  results = {init: gradient_profile(runs, init) for init in inits}
  lines = [l for _, ls, _ in results.values() for l in ls]
  verdict, effect = (results["xavier"][0], results["xavier"][2]) if "xavier" in results else (INCONCLUSIVE, None)
  if results:
    lines.append(("Verdict from the xavier initialisation" if "xavier" in results else
                  "No xavier-initialised models, so no verdict") + "; per initialisation: "
                 + ", ".join(f"{i}: {v[0].lower()}" for i, v in results.items()) + ".")
  return Verdict("at init post-LN's gradients grow toward the output; pre-LN's are flat",
                 verdict, lines or ["No step-0 diagnostics."], rule, effect,
                 "Post-LN log(last/first), xavier")


def claim_residual(runs: list[Run]) -> Verdict:
  rule = (f"pre-LN's residual-stream norm, last block / first block, at the end of training, "
          f"one model per seed (the {WITH_WARMUP}-warmup arm at the seed's best rate tried): "
          f"reproduced when the log ratio's t interval lies above log {GROWTH}; not reproduced "
          f"when it lies below; inconclusive otherwise.")
  arm = by_arm(r for r in runs if r.norm == "pre" and r.init == "gpt2").get(f"norm:pre/{WITH_WARMUP}", [])
  opts = optima(arm)
  end = {r.seed: r.resid_ratio_end for r in arm
         if r.seed in opts and r.lr == opts[r.seed].grid_lr and not r.diverged
         and np.isfinite(r.resid_ratio_end) and r.resid_ratio_end > 0}
  if len(end) < 2:
    return _missing("pre-LN's residual stream grows with depth", "end-of-training probes of "
                    f"two seeds of norm:pre/{WITH_WARMUP}", rule)
  e = _log_mean(end)
  init = _per_seed(arm, "resid_ratio_init")
  lines = [f"Pre-LN, last/first block at the end of training: {_ratio_text(e)}"
           + (f"; at init {_ratio_text(_log_mean(init))}" if init else "") + "."]
  verdict = {"above": REPRODUCED, "below": NOT_REPRODUCED}.get(stats.beyond(e, math.log(GROWTH)), INCONCLUSIVE)
  return Verdict("pre-LN's residual stream grows with depth", verdict, lines, rule, e,
                 "log(last/first) at the end")


def _ratio_arms(arms: dict, prefix: str) -> dict[float, list[Run]]:
  return dict(sorted((float(a.split(":", 1)[1]), rs) for a, rs in arms.items()
                     if a.startswith(prefix + ":")))


def claim_matched(runs: list[Run]) -> Verdict:
  rule = (f"parameter-matched MLP ratios, each seed at its fitted optimum, every pair compared "
          f"paired by seed: reproduced (Kaplan et al. 2020: the shape moves the loss by a few "
          f"percent) when every pair is equivalent within {MATCHED_MARGIN:.0%} of the r = 4 "
          f"arm's loss (TOST, Holm over the pairs); not reproduced when some pair differs by "
          f"decisively more than that margin; inconclusive otherwise, or when a seed's optimum "
          f"lies at the grid's edge.")
  claim = "parameter-matched MLP ratios perform alike"
  ratios = _ratio_arms(by_arm(runs), "mlp_matched")
  if len(ratios) < 2:
    return _missing(claim, "two mlp_matched arms", rule)
  ref = ratios.get(4.0) or next(iter(ratios.values()))
  ref_loss = stats.one_sample(list(best_losses(ref).values())).diff
  margin = MATCHED_MARGIN * ref_loss if math.isfinite(ref_loss) else float("nan")
  keys = list(ratios)
  pairs = [(a, b) for i, a in enumerate(keys) for b in keys[i + 1:]]
  effects = [stats.compare(best_losses(ratios[a]), best_losses(ratios[b]), margin) for a, b in pairs]
  outs = stats.outcomes(effects)
  beyond = [stats.beyond(e, margin) == "above" or stats.beyond(e, -margin) == "below" for e in effects]
  lines = ["; ".join(f"r={r:g}: {describe(rs)}" for r, rs in ratios.items()) + ".",
           f"Margin {margin:.3f} nats. Pairs: " + "; ".join(
               f"r={a:g} - r={b:g} {e.text()} ({o})" for (a, b), e, o in zip(pairs, effects, outs)) + "."]
  largest = max(effects, key=lambda e: abs(e.diff) if math.isfinite(e.diff) else -1)
  edge = _edge_note({f"mlp_matched:{r:g}": rs for r, rs in ratios.items()})
  if edge:
    lines.append(f"Optimum at the grid's edge for a seed of: {', '.join(edge)}.")
    verdict = INCONCLUSIVE
  elif any(beyond):
    verdict = NOT_REPRODUCED
  elif all(o == "same" for o in outs):
    verdict = REPRODUCED
  else:
    verdict = INCONCLUSIVE
  return Verdict(claim, verdict, lines, rule, largest, "Largest pairwise difference")


def claim_width(runs: list[Run]) -> Verdict:
  rule = ("MLP ratio at fixed d_model, at least three ratios, each seed at its fitted optimum; "
          "each step up compared paired by seed, and each later gain against the first "
          "(Holm over all these tests): reproduced (wider is better, with diminishing returns) "
          "when the first step is decisively lower, no step decisively higher and no later gain "
          "decisively larger than the first; not reproduced when a step is decisively higher or "
          "a later gain decisively larger; inconclusive otherwise, or when a seed's optimum "
          "lies at the grid's edge.")
  claim = "wider MLPs are better, with diminishing returns"
  ratios = _ratio_arms(by_arm(runs), "mlp_width")
  if len(ratios) < 3:
    return _missing(claim, "three mlp_width arms", rule)
  keys = list(ratios)
  best = {r: best_losses(rs) for r, rs in ratios.items()}
  steps = [stats.compare(best[b], best[a]) for a, b in zip(keys, keys[1:])]
  gain = lambda a, b: {s: best[a][s] - best[b][s] for s in set(best[a]) & set(best[b])}
  first = gain(keys[0], keys[1])
  growth = [stats.compare(gain(a, b), first) for a, b in zip(keys[1:], keys[2:])]
  outs = stats.outcomes(steps + growth)
  o_steps, o_growth = outs[:len(steps)], outs[len(steps):]
  lines = ["; ".join(f"r={r:g}: {describe(rs)}" for r, rs in ratios.items()) + ".",
           "Steps up: " + "; ".join(f"r={a:g}->{b:g} {c.text()} ({o})" for a, b, c, o
                                    in zip(keys, keys[1:], steps, o_steps)) + ".",
           "Later gains minus the first: " + "; ".join(
               f"r={a:g}->{b:g} {c.text()} ({o})" for a, b, c, o
               in zip(keys[1:], keys[2:], growth, o_growth)) + "."]
  edge = _edge_note({f"mlp_width:{r:g}": rs for r, rs in ratios.items()})
  if edge:
    lines.append(f"Optimum at the grid's edge for a seed of: {', '.join(edge)}.")
    verdict = INCONCLUSIVE
  elif "higher" in o_steps or "higher" in o_growth:
    verdict = NOT_REPRODUCED
  elif o_steps[0] == "lower":
    verdict = REPRODUCED
  else:
    verdict = INCONCLUSIVE
  return Verdict(claim, verdict, lines, rule, steps[0], f"First step r={keys[0]:g}->{keys[1]:g}")


def claim_swiglu(runs: list[Run]) -> Verdict:
  rule = (f"SwiGLU at r=8/3 against GELU at r=4 (same parameter count), each seed at its "
          f"fitted optimum, paired by seed: reproduced when SwiGLU is decisively lower "
          f"(Shazeer 2020: about {SWIGLU_CLAIMED} nats); not reproduced when its advantage is "
          f"decisively smaller than half of that (the interval lies above "
          f"-{SWIGLU_CLAIMED / 2:g}); inconclusive otherwise, or when a seed's optimum lies at "
          f"the grid's edge.")
  claim = "SwiGLU beats GELU at equal size"
  arms = by_arm(runs)
  sw, ge = arms.get("swiglu", []), arms.get("mlp_width:4", [])
  if not sw or not ge:
    return _missing(claim, "the swiglu and mlp_width:4 arms", rule)
  effect = stats.compare(best_losses(sw), best_losses(ge))
  lines = [f"SwiGLU: {describe(sw)}; GELU: {describe(ge)}."]
  edge = _edge_note({"swiglu": sw, "mlp_width:4": ge})
  if edge:
    lines.append(f"Optimum at the grid's edge for a seed of: {', '.join(edge)}.")
    verdict = INCONCLUSIVE
  elif stats.outcome(effect) == "lower":
    verdict = REPRODUCED
  elif stats.beyond(effect, -SWIGLU_CLAIMED / 2) == "above":
    verdict = NOT_REPRODUCED
  else:
    verdict = INCONCLUSIVE
  return Verdict(claim, verdict, lines, rule, effect, "SwiGLU - GELU")


def claim_depth(runs: list[Run]) -> Verdict:
  rule = (f"per seed, the post-LN minus pre-LN gap of fitted best losses ({WITH_WARMUP} "
          f"warmup) in the deeper setting minus the same gap at the base depth, a paired t "
          f"interval: reproduced when decisively positive (Liu et al. 2020: post-LN's trouble "
          f"grows with depth), not reproduced when decisively negative or equivalent within "
          f"{WARMUP_MARGIN} nats, inconclusive otherwise, or when an arm that learns has a "
          f"seed's optimum at the grid's edge.")
  claim = "post-LN's trouble grows with depth"
  arms = by_arm(runs)
  named = {"deep post": arms.get("depth:post", []), "deep pre": arms.get("depth:pre", []),
           "base post": arms.get(f"norm:post/{WITH_WARMUP}", []),
           "base pre": arms.get(f"norm:pre/{WITH_WARMUP}", [])}
  if not all(named.values()):
    return _missing(claim, f"depth:post, depth:pre, norm:post/{WITH_WARMUP} and "
                    f"norm:pre/{WITH_WARMUP} (the depth arms may have been cut from the study)", rule)
  b = {k: best_losses(rs) for k, rs in named.items()}
  seeds = set.intersection(*(set(x) for x in b.values()))
  growth = [b["deep post"][s] - b["deep pre"][s] - b["base post"][s] + b["base pre"][s] for s in seeds]
  effect = dataclasses.replace(stats.one_sample(growth, WARMUP_MARGIN), kind="paired")
  lines = [f"{k}: {describe(rs)}." for k, rs in named.items()]
  edge = _edge_note(named)
  if edge:
    lines.append(f"Optimum at the grid's edge for a seed of: {', '.join(edge)}.")
    verdict = INCONCLUSIVE
  else:
    verdict = {"higher": REPRODUCED, "lower": NOT_REPRODUCED,
               "same": NOT_REPRODUCED}.get(stats.outcome(effect), INCONCLUSIVE)
  return Verdict(claim, verdict, lines, rule, effect, "Growth of the post - pre gap")


CLAIMS = (claim_warmup, claim_smaller_rate, claim_sensitivity, claim_gradients, claim_residual,
          claim_depth, claim_matched, claim_width, claim_swiglu)


def robustness(claim, runs: list[Run], verdict: str) -> str:
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


def rules_version() -> dict:
  """What the study is judged with: the hash of the rules' source and the commit it is at."""
  import hashlib  # pylint: disable=import-outside-toplevel
  import os  # pylint: disable=import-outside-toplevel
  import subprocess  # pylint: disable=import-outside-toplevel
  here = os.path.dirname(os.path.abspath(__file__))
  digest = hashlib.sha256()
  for name in RULE_FILES:
    with open(os.path.join(here, os.path.basename(name)), "rb") as f:
      digest.update(f.read())
  try:
    commit = subprocess.run(["git", "log", "-1", "--format=%H", "--", *RULE_FILES], cwd=os.path.dirname(here),
                            capture_output=True, text=True, check=True, timeout=10).stdout.strip() or None
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", *RULE_FILES], cwd=os.path.dirname(here),
                                capture_output=True, text=True, check=True, timeout=10).stdout.strip())
  except (OSError, subprocess.SubprocessError):
    commit, dirty = None, None
  return {"sha256": digest.hexdigest()[:16], "commit": commit, "uncommitted_changes": dirty}


# The files whose content is "the rules" (relative to the repository root).
RULE_FILES = ("experiments/verdicts.py", "experiments/stats.py")


def judge(runs: list[Run], robust: bool = True) -> list[Verdict]:
  out = []
  for claim in CLAIMS:
    v = claim(runs)
    if robust:
      v.robustness = robustness(claim, runs, v.verdict)
    out.append(v)
  return out
