"""The confirmatory norm x MLP study's claims, frozen before its run: one test per claim, one Holm correction over the family, "not powered" where the plan says so.

Each claim is one test on per-seed values (``stats.one_sample`` on them; a comparison of arms
that share seeds is on the per-seed differences), and the family's verdicts are decided
together (``judge``):

- the *family* is every claim the power plan powered (``plan.py``; the others are in
  ``NOT_POWERED``, declared before the run, and get that verdict whatever their figures,
  which are reported beside it, not judged) whose guards do not hold;
- Holm's step-down correction over the family, separately for the tests *for* the claims
  and the tests *against* them (as ``stats.outcomes`` does within a claim): reproduced when
  the adjusted p for it is below ``stats.ALPHA``; not reproduced when the adjusted p
  against it is; inconclusive otherwise, or when a guard holds (an arm that should learn
  does not; an optimum at the grid's edge; too few runs);
- a *directed* claim ("the mean lies above ``bound``") is tested by the two-sided t test of
  "mean = bound": for it when the estimate lies on the predicted side, against it when on
  the other side or equivalent to none within the claim's margin (TOST);
- an *equivalence* claim ("the mean lies within +-margin") is tested for by TOST, against by
  the t test that the mean lies beyond the nearer edge of the band;
- leave-one-seed-out is reported only for a claim with at least ``LOSO_MIN_SEEDS`` seeds
  (the family re-judged without each seed); with fewer it is said to be uninformative.

What changed against the exploratory study's rules (``experiments/studies/norm_mlp/rules.py``,
revised after its data) is ``REVISIONS``; the report prints it.
"""

from __future__ import annotations

import dataclasses
import math

from research import claims
from research import curves
from research import stats
from research.claims import INCONCLUSIVE, Test, Verdict
from research.curves import RATE_FACTOR, SENSITIVITY_MARGIN
from research.stats import Effect

NOT_POWERED_VERDICT = "Not powered"
# Declared by the power plan before the run (plan.py; the tests recompute it).
NOT_POWERED = ("swiglu", "matched", "depth")
# A per-layer ratio (last / first) counts as growth above this, as flat within its inverse.
GROWTH = 1.5
# Margins, each from its claim's literature (plan.py gives the sources):
WARMUP_MARGIN = 0.05  # nats: a warmup penalty or interaction within it is none (about 1 % of the loss)
MATCHED_MARGIN = 0.02  # relative to the r = 4 arm's loss (Kaplan et al. 2020: a few percent)
SWIGLU_CLAIMED = 0.04  # nats (Shazeer 2020)
LOSO_MIN_SEEDS = 5

REVISIONS = (
    "Exploratory (docs/results/norm_mlp-cpu, rules revised after its data) → confirmatory "
    "(these rules, committed before the run):",
    "- *One multiplicity rule*: Holm over the family of powered claims (before: Holm only "
    "within a claim, none across the study).",
    "- *Not powered*: a verdict the plan assigns before the run to claims the budget cannot "
    "decide (SwiGLU, parameter-matched, depth); before: such claims came out inconclusive after it.",
    "- *Xiong et al.'s init claims at initialisation under Xavier, as they state them*: "
    "post-LN's gradient growth judged on post-LN's own profile, pre-LN's flatness on its own "
    "(before: one verdict over both, decided by pre-LN's); pre-LN's residual growth judged at "
    "init under Xavier (before: at the end of training under GPT-2 init); the GPT-2 and "
    "trained-model figures are reported beside them.",
    "- *Warmup as two judged halves and their interaction*: post-LN's penalty (decisively "
    "positive), pre-LN's (equivalent to zero within 0.05 nats, or not), the interaction "
    "(before: the interaction and post-LN's penalty only, pre-LN's printed beside a "
    "'pre-LN does not need warmup' verdict).",
    "- *Sensitivity over one grid fixed before the run* (1e-4 ... 3e-2, the same for both "
    "norms, under-training at the bottom and instability at the top; before: a base grid "
    "chosen after the data, the verdict depending on it); no rates added after the run.",
    "- *SwiGLU and the parameter-matched arms on the rates they share with GELU r = 4*, "
    "paired by seed at each shared rate as well as at optima fitted over the same rates "
    "(before: optima fitted over different grids).",
    "- *Leave-one-seed-out only at 5 or more seeds*, else said to be uninformative (before: "
    "at 3 seeds, one degree of freedom left).",
    "- The MLP-width claim is not part of this study (exploratory only).",
)


def _directed(values: dict[int, float], bound: float = 0.0, margin: float = float("nan"),
              predict: str = "higher", kind: str = "paired") -> tuple[Effect, float, float]:
  """``(effect of mean - bound, p for, p against)`` of a directed claim."""
  e = dataclasses.replace(stats.one_sample([v - bound for v in values.values()], margin), kind=kind)
  if not math.isfinite(e.p):
    return e, float("nan"), float("nan")
  sign = 1.0 if predict == "higher" else -1.0
  p_for = e.p if sign * e.diff > 0 else 1.0
  p_opposite = e.p if sign * e.diff < 0 else 1.0
  p_against = min(p_opposite, e.p_same) if math.isfinite(e.p_same) else p_opposite
  return e, p_for, p_against


def _within(values: dict[int, float], margin: float, kind: str = "paired") -> tuple[Effect, float, float]:
  """``(effect, p for, p against)`` of an equivalence claim: TOST for, beyond the nearer edge against."""
  e = dataclasses.replace(stats.one_sample(list(values.values()), margin), kind=kind)
  if not math.isfinite(e.p) or not math.isfinite(margin):
    return e, float("nan"), float("nan")
  edge = margin if e.diff >= 0 else -margin
  out = stats.one_sample([v - edge for v in values.values()])
  beyond = out.diff > 0 if e.diff >= 0 else out.diff < 0
  return e, e.p_same, (out.p if beyond and math.isfinite(out.p) else 1.0)


def _diff(a: dict, b: dict) -> dict:
  return {s: a[s] - b[s] for s in sorted(set(a) & set(b))}


def _ratio_text(values: dict[int, float]) -> str:
  """A geometric mean of per-seed ratios with its interval, from their logs."""
  e = stats.one_sample([math.log(v) for v in values.values() if v > 0])
  if not math.isfinite(e.diff):
    return "none"
  ci = f" [95 % CI {math.exp(e.lo):.2f}, {math.exp(e.hi):.2f}]" if e.defined else ""
  return f"{math.exp(e.diff):.2f}{ci} ({e.n} seeds)"


def _per_seed(runs, arm: str, field: str) -> dict[int, float]:
  out = {}
  for r in runs:
    v = getattr(r, field)
    if arm in r.arms and math.isfinite(v) and v > 0:
      out.setdefault(r.seed, v)
  return out


# ----------------------------------------------------------------------------- at initialisation


INIT_POST_RULE = (
    f"post-LN under Xavier initialisation, at step 0: per seed the log of the MLP gradient "
    f"norm of the last layer over the first; reproduced when the mean lies decisively above "
    f"log {GROWTH} (Holm over the family); not reproduced when decisively below it; "
    f"inconclusive otherwise. The same figure under GPT-2 init (the norm arms' step 0) is "
    f"reported, not judged.")


def check_init_post(runs) -> Test:
  claim = "at init under Xavier, post-LN's gradient grows toward the output"
  x = _per_seed(runs, "init:xavier/post", "grad_ratio_init")
  if len(x) < 2:
    return Test("init_post", claim, INIT_POST_RULE, [], missing=claims.missing(
        claim, "step-0 probes of two seeds of init:xavier/post", INIT_POST_RULE))
  e, pf, pa = _directed({s: math.log(v) for s, v in x.items()}, math.log(GROWTH), kind="one-sample")
  lines = [f"Post-LN, Xavier, MLP gradient norm last / first layer at init: {_ratio_text(x)}.",
           f"Under GPT-2 init (reported): {_ratio_text(_per_seed(runs, 'init:gpt2/post', 'grad_ratio_init'))}."]
  return Test("init_post", claim, INIT_POST_RULE, lines, e, f"log(last/first) - log {GROWTH}", pf, pa,
              seeds=tuple(sorted(x)))


INIT_PRE_RULE = (
    f"pre-LN under Xavier initialisation, at step 0: per seed the log of the MLP gradient "
    f"norm of the last layer over the first; reproduced when the mean is equivalent to 0 "
    f"within log {GROWTH} (TOST; Holm over the family); not reproduced when it lies "
    f"decisively outside that band; inconclusive otherwise. GPT-2 init's figure is reported.")


def check_init_pre(runs) -> Test:
  claim = "at init under Xavier, pre-LN's gradient is nearly flat"
  x = _per_seed(runs, "init:xavier/pre", "grad_ratio_init")
  if len(x) < 2:
    return Test("init_pre_flat", claim, INIT_PRE_RULE, [], missing=claims.missing(
        claim, "step-0 probes of two seeds of init:xavier/pre", INIT_PRE_RULE))
  e, pf, pa = _within({s: math.log(v) for s, v in x.items()}, math.log(GROWTH), kind="one-sample")
  lines = [f"Pre-LN, Xavier, MLP gradient norm last / first layer at init: {_ratio_text(x)}.",
           f"Under GPT-2 init (reported): {_ratio_text(_per_seed(runs, 'init:gpt2/pre', 'grad_ratio_init'))}."]
  return Test("init_pre_flat", claim, INIT_PRE_RULE, lines, e, "log(last/first)", pf, pa,
              seeds=tuple(sorted(x)))


INIT_RESID_RULE = (
    f"pre-LN under Xavier initialisation, at step 0: per seed the log of the residual-stream "
    f"norm after the last block over that after the first; reproduced when the mean lies "
    f"decisively above log {GROWTH} (Holm over the family); not reproduced when decisively "
    f"below it; inconclusive otherwise. The trained model's figure (GPT-2 init, long warmup, "
    f"each seed's best rate) is reported, not judged.")


def check_init_resid(runs) -> Test:
  claim = "at init under Xavier, pre-LN's residual stream grows with depth"
  x = _per_seed(runs, "init:xavier/pre", "resid_ratio_init")
  if len(x) < 2:
    return Test("init_resid", claim, INIT_RESID_RULE, [], missing=claims.missing(
        claim, "step-0 probes of two seeds of init:xavier/pre", INIT_RESID_RULE))
  e, pf, pa = _directed({s: math.log(v) for s, v in x.items()}, math.log(GROWTH), kind="one-sample")
  arm = curves.by_arm(runs).get("norm:pre/long", [])
  opts = curves.optima(arm)
  end = {r.seed: r.resid_ratio_end for r in arm if r.seed in opts and r.lr == opts[r.seed].grid_lr
         and not r.diverged and math.isfinite(r.resid_ratio_end) and r.resid_ratio_end > 0}
  lines = [f"Pre-LN, Xavier, residual norm last / first block at init: {_ratio_text(x)}.",
           f"Reported: under GPT-2 init at step 0 {_ratio_text(_per_seed(arm, 'norm:pre/long', 'resid_ratio_init'))}; "
           f"after training (GPT-2 init, each seed's best rate) {_ratio_text(end)}."]
  return Test("init_resid", claim, INIT_RESID_RULE, lines, e, f"log(last/first) - log {GROWTH}", pf, pa,
              seeds=tuple(sorted(x)))


# ----------------------------------------------------------------------------- warmup


def _norm_arms(runs) -> dict[str, list[curves.Run]]:
  arms = curves.by_arm(runs)
  return {f"{n}/{w}": arms.get(f"norm:{n}/{w}", []) for n in ("post", "pre") for w in ("none", "long")}


def _warm_guards(named: dict, learners: tuple[str, ...]) -> list:
  bad = claims.not_learning({k: named[k] for k in learners})
  return [(bool(bad), f"{' and '.join(k + '-LN' for k in bad)} does not learn: the claim is "
                      f"about models that train."), claims.edge_guard(named)]


def _at_rates(named: dict, fn) -> str:
  """Per rate every named arm has: ``fn({arm: {seed: clipped}})`` -> per-seed values, as text."""
  shared = sorted(set.intersection(*(set(curves.by_rate(rs)) for rs in named.values())))
  parts = []
  for lr in shared:
    per = {k: {r.seed: r.clipped for r in rs if r.lr == lr} for k, rs in named.items()}
    parts.append(f"{lr:.2g}: {stats.one_sample(list(fn(per).values())).text()}")
  return "; ".join(parts)


WARMUP_POST_RULE = (
    f"per seed, post-LN's fitted best loss without warmup minus with the long warmup (over "
    f"the one grid): reproduced when decisively positive (Holm over the family); not "
    f"reproduced when decisively negative or equivalent to zero within {WARMUP_MARGIN} nats "
    f"(TOST); inconclusive otherwise, when post-LN with warmup does not learn, or when a "
    f"learning arm has a seed's optimum at the grid's edge.")


def check_warmup_post(runs) -> Test:
  claim = "without warmup, post-LN is penalised"
  named = {k: v for k, v in _norm_arms(runs).items() if k.startswith("post")}
  if not all(named.values()):
    return Test("warmup_post", claim, WARMUP_POST_RULE, [], missing=claims.missing(
        claim, "norm:post/none and norm:post/long", WARMUP_POST_RULE))
  x = _diff(curves.best_losses(named["post/none"]), curves.best_losses(named["post/long"]))
  e, pf, pa = _directed(x, 0.0, WARMUP_MARGIN)
  lines = [f"{k}-LN: {curves.describe(rs)}." for k, rs in named.items()]
  lines.append("At each rate (reported): " + _at_rates(
      named, lambda p: _diff(p["post/none"], p["post/long"])) + ".")
  return Test("warmup_post", claim, WARMUP_POST_RULE, lines, e, "Post-LN's penalty (none - long)",
              pf, pa, _warm_guards(named, ("post/long",)), tuple(x))


WARMUP_PRE_RULE = (
    f"per seed, pre-LN's fitted best loss without warmup minus with the long warmup: "
    f"reproduced when equivalent to zero within {WARMUP_MARGIN} nats (TOST; Holm over the "
    f"family); not reproduced when it lies decisively outside that margin; inconclusive "
    f"otherwise, when a pre-LN arm does not learn, or when a seed's optimum is at the grid's edge.")


def check_warmup_pre(runs) -> Test:
  claim = "without warmup, pre-LN is not penalised"
  named = {k: v for k, v in _norm_arms(runs).items() if k.startswith("pre")}
  if not all(named.values()):
    return Test("warmup_pre", claim, WARMUP_PRE_RULE, [], missing=claims.missing(
        claim, "norm:pre/none and norm:pre/long", WARMUP_PRE_RULE))
  x = _diff(curves.best_losses(named["pre/none"]), curves.best_losses(named["pre/long"]))
  e, pf, pa = _within(x, WARMUP_MARGIN)
  lines = [f"{k}-LN: {curves.describe(rs)}." for k, rs in named.items()]
  lines.append("At each rate (reported): " + _at_rates(
      named, lambda p: _diff(p["pre/none"], p["pre/long"])) + ".")
  return Test("warmup_pre", claim, WARMUP_PRE_RULE, lines, e, "Pre-LN's penalty (none - long)",
              pf, pa, _warm_guards(named, ("pre/none", "pre/long")), tuple(x))


WARMUP_INTERACTION_RULE = (
    f"per seed, (post-LN none - long) - (pre-LN none - long) of the fitted best losses: "
    f"reproduced when decisively positive (Holm over the family); not reproduced when "
    f"decisively negative or equivalent to zero within {WARMUP_MARGIN} nats (TOST); "
    f"inconclusive otherwise, when an arm with warmup does not learn, or when a learning arm "
    f"has a seed's optimum at the grid's edge. The interaction at each rate is reported.")


def check_warmup_interaction(runs) -> Test:
  claim = "post-LN's warmup penalty exceeds pre-LN's"
  named = _norm_arms(runs)
  if not all(named.values()):
    return Test("warmup_interaction", claim, WARMUP_INTERACTION_RULE, [], missing=claims.missing(
        claim, "the four norm:{post,pre}/{none,long} arms", WARMUP_INTERACTION_RULE))
  best = {k: curves.best_losses(rs) for k, rs in named.items()}
  x = _diff(_diff(best["post/none"], best["post/long"]), _diff(best["pre/none"], best["pre/long"]))
  e, pf, pa = _directed(x, 0.0, WARMUP_MARGIN)
  lines = ["At each rate (reported): " + _at_rates(named, lambda p: _diff(
      _diff(p["post/none"], p["post/long"]), _diff(p["pre/none"], p["pre/long"]))) + "."]
  return Test("warmup_interaction", claim, WARMUP_INTERACTION_RULE, lines, e, "Interaction", pf, pa,
              _warm_guards(named, ("post/long", "pre/long")), tuple(x))


# ----------------------------------------------------------------------------- the learning rate


SENSITIVITY_RULE = (
    f"learning-rate sensitivity (Wortsman et al. 2023) per seed over the one grid fixed "
    f"before the run (every rate both arms share, the same for both), long warmup, post-LN - "
    f"pre-LN paired by seed: reproduced when decisively positive (Holm over the family); not "
    f"reproduced when decisively negative or equivalent within {SENSITIVITY_MARGIN} nats "
    f"(TOST); inconclusive otherwise, or when either arm does not learn.")


def check_sensitivity(runs) -> Test:
  claim = "post-LN is more sensitive to the learning rate"
  arms = curves.by_arm(runs)
  post, pre = arms.get("norm:post/long", []), arms.get("norm:pre/long", [])
  rates = curves.base_rates(post, pre) if post and pre else []
  sp, sq = curves.sensitivity(post, rates), curves.sensitivity(pre, rates)
  if not sp or not sq:
    return Test("sensitivity", claim, SENSITIVITY_RULE, [], missing=claims.missing(
        claim, "two shared rates per seed in norm:post/long and norm:pre/long", SENSITIVITY_RULE))
  x = _diff(sp, sq)
  e, pf, pa = _directed(x, 0.0, SENSITIVITY_MARGIN)
  lines = [f"Over the rates {', '.join(f'{lr:.2g}' for lr in rates)}: post-LN "
           f"{stats.one_sample(list(sp.values())).text()}, pre-LN "
           f"{stats.one_sample(list(sq.values())).text()}."]
  bad = claims.not_learning({"post-LN": post, "pre-LN": pre})
  return Test("sensitivity", claim, SENSITIVITY_RULE, lines, e, "Sensitivity post - pre", pf, pa,
              [(bool(bad), "An arm does not learn: its sensitivity says nothing.")], tuple(x))


SMALLER_RULE = (
    f"long warmup, per seed the log of post-LN's fitted optimal rate minus pre-LN's: "
    f"reproduced when decisively negative (Holm over the family); not reproduced when "
    f"decisively positive or equivalent within a factor {RATE_FACTOR} (TOST); inconclusive "
    f"otherwise, when either arm does not learn, or when a seed's optimum is at the grid's edge.")


def check_smaller_rate(runs) -> Test:
  claim = "post-LN needs a smaller learning rate"
  arms = curves.by_arm(runs)
  post, pre = arms.get("norm:post/long", []), arms.get("norm:pre/long", [])
  if not post or not pre:
    return Test("smaller_rate", claim, SMALLER_RULE, [], missing=claims.missing(
        claim, "norm:post/long and norm:pre/long", SMALLER_RULE))
  x = _diff(curves.log_optima(post), curves.log_optima(pre))
  e, pf, pa = _directed(x, 0.0, math.log(RATE_FACTOR), predict="lower")
  lines = [f"Post-LN: {curves.describe(post)}; pre-LN: {curves.describe(pre)}."]
  bad = claims.not_learning({"post": post, "pre": pre})
  return Test("smaller_rate", claim, SMALLER_RULE, lines, e, "Log ratio of optimal rates", pf, pa,
              [(bool(bad), "An arm does not learn: its optimum is not a rate."),
               (not (curves.bracketed(post) and curves.bracketed(pre)),
                "A seed's optimum lies at the edge of the rate grid.")], tuple(x))


# ----------------------------------------------------------------------------- the MLP


def _shared(arm: list[curves.Run], gelu: list[curves.Run]) -> tuple[list, list, list[float]]:
  """The two arms restricted to the rates they share."""
  rates = sorted(set(curves.by_rate(arm)) & set(curves.by_rate(gelu)))
  return [r for r in arm if r.lr in rates], [r for r in gelu if r.lr in rates], rates


def _per_rate(arm: list, gelu: list, rates: list[float]) -> str:
  parts = []
  for lr in rates:
    a = {r.seed: r.clipped for r in arm if r.lr == lr}
    g = {r.seed: r.clipped for r in gelu if r.lr == lr}
    parts.append(f"{lr:.2g}: {stats.paired(a, g).text()}")
  return "; ".join(parts)


SWIGLU_RULE = (
    f"SwiGLU at r = 8/3 against GELU at r = 4 (the pre-LN long-warmup arm) on the rates they "
    f"share, per seed at optima fitted over those rates, paired by seed: reproduced when "
    f"SwiGLU is decisively lower (Holm over the family; Shazeer 2020: about {SWIGLU_CLAIMED} "
    f"nats); not reproduced when decisively higher or equivalent within {SWIGLU_CLAIMED / 2:g} "
    f"nats (TOST); inconclusive otherwise, or when a seed's optimum is at the grid's edge. "
    f"The paired difference at each shared rate is reported beside it.")


def check_swiglu(runs) -> Test:
  claim = "SwiGLU beats GELU at equal size"
  arms = curves.by_arm(runs)
  sw, ge = arms.get("swiglu", []), arms.get("mlp:gelu4", [])
  if not sw or not ge:
    return Test("swiglu", claim, SWIGLU_RULE, [], missing=claims.missing(
        claim, "the swiglu and mlp:gelu4 arms", SWIGLU_RULE))
  sw, ge, rates = _shared(sw, ge)
  x = _diff(curves.best_losses(sw), curves.best_losses(ge))
  e, pf, pa = _directed(x, 0.0, SWIGLU_CLAIMED / 2, predict="lower")
  lines = [f"Over the shared rates: SwiGLU {curves.describe(sw)}; GELU {curves.describe(ge)}.",
           "SwiGLU - GELU paired by seed at each shared rate (reported): " + _per_rate(sw, ge, rates) + "."]
  return Test("swiglu", claim, SWIGLU_RULE, lines, e, "SwiGLU - GELU at fitted optima", pf, pa,
              [claims.edge_guard({"swiglu": sw, "gelu": ge})], tuple(x))


MATCHED_RULE = (
    f"parameter-matched MLP ratios r = 2 and 8 against r = 4 (the pre-LN long-warmup arm) "
    f"on the rates they share, per seed at optima fitted over those rates, paired by seed: "
    f"reproduced when both are equivalent within {MATCHED_MARGIN:.0%} of the r = 4 loss "
    f"(TOST; an intersection-union test: both must pass; Holm over the family); not "
    f"reproduced when one lies decisively outside it (Bonferroni over the two); "
    f"inconclusive otherwise, or when a seed's optimum is at the grid's edge. The paired "
    f"differences at each shared rate are reported beside it.")


def check_matched(runs) -> Test:
  claim = "parameter-matched MLP ratios perform alike"
  arms = curves.by_arm(runs)
  ge = arms.get("mlp:gelu4", [])
  others = {r: arms.get(f"mlp_matched:{r}", []) for r in (2, 8)}
  if not ge or not all(others.values()):
    return Test("matched", claim, MATCHED_RULE, [], missing=claims.missing(
        claim, "mlp_matched:2, mlp_matched:8 and mlp:gelu4", MATCHED_RULE))
  ref = stats.one_sample(list(curves.best_losses(ge).values())).diff
  margin = MATCHED_MARGIN * ref
  results, lines, guards, seeds = [], [f"Margin {margin:.3f} nats."], [], set()
  for r, arm in others.items():
    a, g, rates = _shared(arm, ge)
    x = _diff(curves.best_losses(a), curves.best_losses(g))
    seeds |= set(x)
    results.append(_within(x, margin))
    lines.append(f"r = {r} - r = 4 at fitted optima {results[-1][0].text()}; at each shared rate "
                 f"(reported): {_per_rate(a, g, rates)}.")
    guards.append(claims.edge_guard({f"mlp_matched:{r}": a, "r=4": g}))
  ps = [p for _, p, _ in results]
  pf = max(ps) if all(math.isfinite(p) for p in ps) else float("nan")
  against = [p for _, _, p in results if math.isfinite(p)]
  pa = min(1.0, 2 * min(against)) if against else float("nan")
  largest = max((e for e, _, _ in results), key=lambda e: abs(e.diff) if math.isfinite(e.diff) else -1)
  return Test("matched", claim, MATCHED_RULE, lines, largest, "Largest difference from r = 4", pf, pa,
              guards, tuple(sorted(seeds)))


DEPTH_RULE = ("per seed, (post - pre at 12 layers) - (post - pre at 6 layers) of the fitted best "
              "losses; the plan cut the depth arms (plan.py: their cost), so the claim is not powered.")


def check_depth(runs) -> Test:
  claim = "post-LN's trouble grows with depth"
  return Test("depth", claim, DEPTH_RULE, ["The depth arms were cut by the plan before the run."])


CHECKS = (check_init_post, check_init_pre, check_init_resid, check_warmup_post, check_warmup_pre,
         check_warmup_interaction, check_sensitivity, check_smaller_rate, check_swiglu, check_matched,
         check_depth)


# ----------------------------------------------------------------------------- the family


def family(runs) -> list[tuple[Test, Verdict]]:
  """Every claim's test and its verdict, the powered ones decided together under Holm."""
  tests = [t(runs) for t in CHECKS]
  live = [t for t in tests if t.missing is None and t.key not in NOT_POWERED
          and not any(h for h, _ in t.guards)]
  p_for = dict(zip((t.key for t in live), stats.holm([t.p_for for t in live])))
  p_against = dict(zip((t.key for t in live), stats.holm([t.p_against for t in live])))
  tested = sum(math.isfinite(t.p_for) for t in live)
  out = []
  for t in tests:
    if t.key in NOT_POWERED:
      lines = t.lines + (t.missing.lines if t.missing else []) + [
          "Not powered: the plan, before the run, found that the budget cannot decide it "
          "(plan.py); the figures above are reported, not judged."]
      v = Verdict(t.claim, NOT_POWERED_VERDICT, lines, t.rule, t.effect, t.effect_name)
    elif t.missing is not None:
      v = t.missing
    else:
      lines = list(t.lines)
      pf, pa = p_for.get(t.key, float("nan")), p_against.get(t.key, float("nan"))
      verdict = claims.decide(lines, t.guards, reproduced=pf < stats.ALPHA,
                              not_reproduced=not pf < stats.ALPHA and pa < stats.ALPHA)
      if t.key in p_for:
        lines.append(f"Holm over the family of {tested} tests: adjusted p for {pf:.3g}, "
                     f"against {pa:.3g}.")
      v = Verdict(t.claim, verdict, lines, t.rule, t.effect, t.effect_name)
    out.append((t, v))
  return out


def robustness(runs, pairs: list[tuple[Test, Verdict]]) -> None:
  """Each judged verdict's leave-one-seed-out line: the family re-judged without each of its
  seeds where it has at least ``LOSO_MIN_SEEDS``, else said to be uninformative."""
  cache: dict[int, dict[str, str]] = {}
  for t, v in pairs:
    if v.verdict == NOT_POWERED_VERDICT or t.missing is not None:
      continue
    if len(t.seeds) < LOSO_MIN_SEEDS:
      v.robustness = (f"Leave-one-seed-out: uninformative at {len(t.seeds)} seeds (reported "
                      f"from {LOSO_MIN_SEEDS}).")
      continue
    flips = []
    for s in t.seeds:
      if s not in cache:
        cache[s] = {tt.key: vv.verdict for tt, vv in family([r for r in runs if r.seed != s])}
      if cache[s][t.key] != v.verdict:
        flips.append(f"without seed {s}: {cache[s][t.key].lower()}")
    v.robustness = ("Leave-one-seed-out: the verdict survives leaving out any one seed." if not flips
                    else "Leave-one-seed-out: it does not survive (" + "; ".join(flips) + ").")


def judge(runs: list[curves.Run], robust: bool = True) -> list[Verdict]:
  """The study's verdicts: the family under Holm, not powered where the plan says, and the
  leave-one-seed-out line where it is informative."""
  pairs = family(runs)
  if robust:
    robustness(runs, pairs)
  return [v for _, v in pairs]


# What "the rules" of this study are (``research/identity.py``): the definitions these reach.
RULE_ROOTS = ("judge", "REVISIONS")
