"""The norm x MLP study's claims: each rule comes out reproduced, not reproduced or inconclusive.

The rules see only ``curves.Run`` records (one per trained model: its arms, learning rate,
seed, final validation loss and a few diagnostics), so they are tested on synthetic numbers
(tests/test_report.py) and re-judge a committed study without retraining. An arm's
optimum, best loss, sensitivity and whether it learns are ``research/curves.py``'s; the
statistics (paired t intervals, Welch, Holm, equivalence) ``research/stats.py``'s; the
verdict skeleton (guards, decision, leave-one-seed-out) ``research/claims.py``'s.

Comparisons between arms pair the seeds they share (``stats.compare``); a claim's several
comparisons are Holm-corrected; every verdict carries its effect with a 95 % interval and
says whether it survives leaving out any one seed (``claims.robustness``). A claim the
seeds cannot decide is inconclusive, never "not reproduced".
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from research import claims
from research import curves
from research import stats
from research.claims import INCONCLUSIVE, Verdict
from research.curves import RATE_FACTOR, SENSITIVITY_MARGIN
from research.stats import Effect

# A per-layer ratio (last / first) counts as growth above this, as flat within its inverse.
GROWTH = 1.5
# Equivalence margins, fixed before the run, each from its claim's literature (the optimal
# rate's and the sensitivity's are every study's, ``curves.RATE_FACTOR`` and
# ``curves.SENSITIVITY_MARGIN``):
# Kaplan et al. 2020 (Fig. 5): over a wide range of d_ff/d_model at a fixed parameter
# count the loss moves "a few percent": alike = within 2 % of the r = 4 arm's loss.
MATCHED_MARGIN = 0.02  # relative
# Shazeer 2020: SwiGLU beats GELU by about 0.04 nats; an improvement decisively smaller
# than half of that does not reproduce the claim.
SWIGLU_CLAIMED = 0.04  # nats
# Xiong et al. 2020: post-LN without warmup fails to train (8.45 against ~34 BLEU); an
# interaction within 0.05 nats (about 1 % of the loss) is none at all.
WARMUP_MARGIN = 0.05  # nats
# The warmup that stands for "with warmup", fixed before the run (the sweep's long warmup).
WITH_WARMUP = "long"


WARMUP_RULE = (
    f"the interaction, per seed, of each arm's fitted best loss: (post-LN without warmup - "
    f"post-LN with the {WITH_WARMUP} warmup) - (pre-LN without - pre-LN with); a paired t "
    f"interval over seeds. Reproduced when the interaction and post-LN's own warmup penalty "
    f"are both decisively positive (Holm over the two); not reproduced when the interaction "
    f"is decisively negative or equivalent to zero within {WARMUP_MARGIN} nats (TOST); "
    f"inconclusive otherwise, when an arm with warmup does not learn, or when an arm that "
    f"learns has a seed's optimum at the grid's edge. The '{WITH_WARMUP}' warmup was fixed before the run; the interaction at each "
    f"rate all four arms share is reported beside it, not judged.")


def claim_warmup(runs: list[curves.Run]) -> Verdict:
  claim = "post-LN needs warmup; pre-LN does not"
  arms = curves.by_arm(runs)
  named = {f"{n}/{w}": arms.get(f"norm:{n}/{w}", []) for n in ("post", "pre")
           for w in ("none", WITH_WARMUP)}
  if not all(named.values()):
    return claims.missing(claim, "the four norm:{post,pre}/{none,%s} arms" % WITH_WARMUP, WARMUP_RULE)
  best = {k: curves.best_losses(rs) for k, rs in named.items()}
  seeds = set.intersection(*(set(b) for b in best.values()))
  inter = {s: (best["post/none"][s] - best[f"post/{WITH_WARMUP}"][s])
              - (best["pre/none"][s] - best[f"pre/{WITH_WARMUP}"][s]) for s in seeds}
  effect = dataclasses.replace(stats.one_sample(list(inter.values()), WARMUP_MARGIN), kind="paired")
  penalty = stats.paired(best["post/none"], best[f"post/{WITH_WARMUP}"])
  pre_penalty = stats.paired(best["pre/none"], best[f"pre/{WITH_WARMUP}"])
  o_inter, o_pen = stats.outcomes([effect, penalty])
  lines = [f"{k}-LN: {curves.describe(rs)}." for k, rs in named.items()]
  lines.append(f"Warmup penalty (without minus with): post-LN {penalty.text()}, pre-LN "
               f"{pre_penalty.text()}.")
  shared = sorted(set.intersection(*(set(curves.by_rate(rs)) for rs in named.values())))
  at = []
  for lr in shared:
    per = {k: {r.seed: r.clipped for r in rs if r.lr == lr} for k, rs in named.items()}
    d = [per["post/none"][s] - per[f"post/{WITH_WARMUP}"][s] - per["pre/none"][s]
         + per[f"pre/{WITH_WARMUP}"][s] for s in set.intersection(*(set(p) for p in per.values()))]
    at.append(f"{lr:.2g}: {stats.one_sample(d).text()}")
  if at:
    lines.append("The interaction at each shared rate (reported, not judged): " + "; ".join(at) + ".")
  warm = claims.not_learning({k: named[k] for k in (f"post/{WITH_WARMUP}", f"pre/{WITH_WARMUP}")})
  verdict = claims.decide(lines, [
      (bool(warm), f"With warmup, {' and '.join(k + '-LN' for k in warm)} does not learn: the "
                   f"claim is about models that train."),
      claims.edge_guard(named)],
      reproduced=o_inter == "higher" and o_pen == "higher",
      not_reproduced=o_inter in ("lower", "same"))
  return Verdict(claim, verdict, lines, WARMUP_RULE, effect, "Interaction")


SMALLER_RULE = (
    f"with the {WITH_WARMUP} warmup, the per-seed difference of the fitted optimal rates "
    f"(log post-LN - log pre-LN, paired): reproduced when post-LN's is decisively smaller; "
    f"not reproduced when it is decisively larger or the two are equivalent within a factor "
    f"{RATE_FACTOR} (TOST); inconclusive otherwise, when either arm does not learn, or when a "
    f"seed's optimum lies at the grid's edge.")


def claim_smaller_rate(runs: list[curves.Run]) -> Verdict:
  claim = "post-LN needs a smaller learning rate"
  arms = curves.by_arm(runs)
  post, pre = arms.get(f"norm:post/{WITH_WARMUP}", []), arms.get(f"norm:pre/{WITH_WARMUP}", [])
  if not post or not pre:
    return claims.missing(claim, f"norm:post/{WITH_WARMUP} and norm:pre/{WITH_WARMUP}", SMALLER_RULE)
  effect = stats.compare(curves.log_optima(post), curves.log_optima(pre), math.log(RATE_FACTOR))
  ratio = dataclasses.replace(effect, diff=math.exp(effect.diff), lo=math.exp(effect.lo),
                              hi=math.exp(effect.hi)) if effect.defined else effect
  lines = [f"Post-LN: {curves.describe(post)}; pre-LN: {curves.describe(pre)}.",
           f"Ratio of optimal rates post/pre: {ratio.diff:.2f}" + (
               f" [95 % CI {ratio.lo:.2f}, {ratio.hi:.2f}]" if effect.defined else "") + "."]
  verdict = claims.decide(lines, [
      (bool(claims.not_learning({"post": post, "pre": pre})),
       "An arm does not learn: its optimum is not a rate."),
      (not (curves.bracketed(post) and curves.bracketed(pre)),
       "A seed's optimum lies at the edge of the rate grid.")],
      *claims.directed(stats.outcome(effect), "lower"))
  return Verdict(claim, verdict, lines, SMALLER_RULE, effect, "Log ratio of optimal rates")


SENSITIVITY_RULE = (
    f"learning-rate sensitivity (Wortsman et al. 2023) per seed over the base grid the two "
    f"arms share, with the {WITH_WARMUP} warmup (fixed before the run), post-LN - pre-LN "
    f"paired by seed: reproduced when decisively positive; not reproduced when decisively "
    f"negative or equivalent within {SENSITIVITY_MARGIN} nats (TOST); inconclusive "
    f"otherwise, or when either arm does not learn (an arm on the unigram plateau at every "
    f"rate scores near zero: 'insensitive' would mean 'never trains').")


def claim_sensitivity(runs: list[curves.Run]) -> Verdict:
  claim = "post-LN is more sensitive to the learning rate"
  arms = curves.by_arm(runs)
  post, pre = arms.get(f"norm:post/{WITH_WARMUP}", []), arms.get(f"norm:pre/{WITH_WARMUP}", [])
  rates = curves.base_rates(post, pre)
  sp, sq = curves.sensitivity(post, rates), curves.sensitivity(pre, rates)
  if not sp or not sq:
    return claims.missing(claim, f"two shared base-grid rates per seed in norm:post/{WITH_WARMUP} "
                          f"and norm:pre/{WITH_WARMUP}", SENSITIVITY_RULE)
  effect = stats.compare(sp, sq, SENSITIVITY_MARGIN)
  lines = [f"Over the rates {', '.join(f'{lr:.2g}' for lr in rates)}: post-LN "
           f"{stats.one_sample(list(sp.values())).text()}, pre-LN "
           f"{stats.one_sample(list(sq.values())).text()}.",
           f"Post-LN: {curves.describe(post)}; pre-LN: {curves.describe(pre)}."]
  none_post, none_pre = arms.get("norm:post/none", []), arms.get("norm:pre/none", [])
  if none_post and none_pre:
    r0 = curves.base_rates(none_post, none_pre)
    lines.append(f"Without warmup (reported, not judged): post-LN "
                 f"{stats.one_sample(list(curves.sensitivity(none_post, r0).values())).text()}, pre-LN "
                 f"{stats.one_sample(list(curves.sensitivity(none_pre, r0).values())).text()}"
                 + ("" if curves.learns(none_post) else "; post-LN does not learn without warmup") + ".")
  verdict = claims.decide(lines, [
      (bool(claims.not_learning({"post": post, "pre": pre})),
       "An arm does not learn: its sensitivity says nothing.")],
      *claims.directed(stats.outcome(effect)))
  return Verdict(claim, verdict, lines, SENSITIVITY_RULE, effect, "Sensitivity post - pre")


def _per_seed(runs: list[curves.Run], field: str) -> dict[int, float]:
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


def gradient_profile(runs: list[curves.Run], init: str) -> tuple[str, list[str], Effect | None]:
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
  lines = [line]
  verdict = claims.decide(
      lines, reproduced=stats.beyond(post, g) == "above" and pre_flat,
      not_reproduced=(stats.beyond(post, g) == "below" or stats.beyond(pre, g) == "above"
                      or stats.beyond(pre, -g) == "below"))
  return verdict, lines, post


def claim_gradients(runs: list[curves.Run]) -> Verdict:
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


def claim_residual(runs: list[curves.Run]) -> Verdict:
  rule = (f"pre-LN's residual-stream norm, last block / first block, at the end of training, "
          f"one model per seed (the {WITH_WARMUP}-warmup arm at the seed's best rate tried): "
          f"reproduced when the log ratio's t interval lies above log {GROWTH}; not reproduced "
          f"when it lies below; inconclusive otherwise.")
  arm = curves.by_arm(r for r in runs if r.norm == "pre" and r.init == "gpt2").get(f"norm:pre/{WITH_WARMUP}", [])
  opts = curves.optima(arm)
  end = {r.seed: r.resid_ratio_end for r in arm
         if r.seed in opts and r.lr == opts[r.seed].grid_lr and not r.diverged
         and np.isfinite(r.resid_ratio_end) and r.resid_ratio_end > 0}
  if len(end) < 2:
    return claims.missing("pre-LN's residual stream grows with depth", "end-of-training probes of "
                          f"two seeds of norm:pre/{WITH_WARMUP}", rule)
  e = _log_mean(end)
  init = _per_seed(arm, "resid_ratio_init")
  lines = [f"Pre-LN, last/first block at the end of training: {_ratio_text(e)}"
           + (f"; at init {_ratio_text(_log_mean(init))}" if init else "") + "."]
  verdict = claims.decide(lines, [], *claims.directed(stats.beyond(e, math.log(GROWTH)), "above"))
  return Verdict("pre-LN's residual stream grows with depth", verdict, lines, rule, e,
                 "log(last/first) at the end")


def _ratio_arms(arms: dict, prefix: str) -> dict[float, list[curves.Run]]:
  return dict(sorted((float(a.split(":", 1)[1]), rs) for a, rs in arms.items()
                     if a.startswith(prefix + ":")))


def claim_matched(runs: list[curves.Run]) -> Verdict:
  rule = (f"parameter-matched MLP ratios, each seed at its fitted optimum, every pair compared "
          f"paired by seed: reproduced (Kaplan et al. 2020: the shape moves the loss by a few "
          f"percent) when every pair is equivalent within {MATCHED_MARGIN:.0%} of the r = 4 "
          f"arm's loss (TOST, Holm over the pairs); not reproduced when some pair differs by "
          f"decisively more than that margin; inconclusive otherwise, or when a seed's optimum "
          f"lies at the grid's edge.")
  claim = "parameter-matched MLP ratios perform alike"
  ratios = _ratio_arms(curves.by_arm(runs), "mlp_matched")
  if len(ratios) < 2:
    return claims.missing(claim, "two mlp_matched arms", rule)
  ref = ratios.get(4.0) or next(iter(ratios.values()))
  ref_loss = stats.one_sample(list(curves.best_losses(ref).values())).diff
  margin = MATCHED_MARGIN * ref_loss if math.isfinite(ref_loss) else float("nan")
  keys = list(ratios)
  pairs = [(a, b) for i, a in enumerate(keys) for b in keys[i + 1:]]
  effects = [stats.compare(curves.best_losses(ratios[a]), curves.best_losses(ratios[b]), margin) for a, b in pairs]
  outs = stats.outcomes(effects)
  beyond = [stats.beyond(e, margin) == "above" or stats.beyond(e, -margin) == "below" for e in effects]
  lines = ["; ".join(f"r={r:g}: {curves.describe(rs)}" for r, rs in ratios.items()) + ".",
           f"Margin {margin:.3f} nats. Pairs: " + "; ".join(
               f"r={a:g} - r={b:g} {e.text()} ({o})" for (a, b), e, o in zip(pairs, effects, outs)) + "."]
  largest = max(effects, key=lambda e: abs(e.diff) if math.isfinite(e.diff) else -1)
  verdict = claims.decide(lines, [claims.edge_guard({f"mlp_matched:{r:g}": rs for r, rs in ratios.items()})],
                          reproduced=all(o == "same" for o in outs) and not any(beyond),
                          not_reproduced=any(beyond))
  return Verdict(claim, verdict, lines, rule, largest, "Largest pairwise difference")


def claim_width(runs: list[curves.Run]) -> Verdict:
  rule = ("MLP ratio at fixed d_model, at least three ratios, each seed at its fitted optimum; "
          "each step up compared paired by seed, and each later gain against the first "
          "(Holm over all these tests): reproduced (wider is better, with diminishing returns) "
          "when the first step is decisively lower, no step decisively higher and no later gain "
          "decisively larger than the first; not reproduced when a step is decisively higher or "
          "a later gain decisively larger; inconclusive otherwise, or when a seed's optimum "
          "lies at the grid's edge.")
  claim = "wider MLPs are better, with diminishing returns"
  ratios = _ratio_arms(curves.by_arm(runs), "mlp_width")
  if len(ratios) < 3:
    return claims.missing(claim, "three mlp_width arms", rule)
  keys = list(ratios)
  best = {r: curves.best_losses(rs) for r, rs in ratios.items()}
  steps = [stats.compare(best[b], best[a]) for a, b in zip(keys, keys[1:])]
  gain = lambda a, b: {s: best[a][s] - best[b][s] for s in set(best[a]) & set(best[b])}
  first = gain(keys[0], keys[1])
  growth = [stats.compare(gain(a, b), first) for a, b in zip(keys[1:], keys[2:])]
  outs = stats.outcomes(steps + growth)
  o_steps, o_growth = outs[:len(steps)], outs[len(steps):]
  lines = ["; ".join(f"r={r:g}: {curves.describe(rs)}" for r, rs in ratios.items()) + ".",
           "Steps up: " + "; ".join(f"r={a:g}->{b:g} {c.text()} ({o})" for a, b, c, o
                                    in zip(keys, keys[1:], steps, o_steps)) + ".",
           "Later gains minus the first: " + "; ".join(
               f"r={a:g}->{b:g} {c.text()} ({o})" for a, b, c, o
               in zip(keys[1:], keys[2:], growth, o_growth)) + "."]
  higher = "higher" in o_steps or "higher" in o_growth
  verdict = claims.decide(lines, [claims.edge_guard({f"mlp_width:{r:g}": rs for r, rs in ratios.items()})],
                          reproduced=o_steps[0] == "lower" and not higher, not_reproduced=higher)
  return Verdict(claim, verdict, lines, rule, steps[0], f"First step r={keys[0]:g}->{keys[1]:g}")


def claim_swiglu(runs: list[curves.Run]) -> Verdict:
  rule = (f"SwiGLU at r=8/3 against GELU at r=4 (same parameter count), each seed at its "
          f"fitted optimum, paired by seed: reproduced when SwiGLU is decisively lower "
          f"(Shazeer 2020: about {SWIGLU_CLAIMED} nats); not reproduced when its advantage is "
          f"decisively smaller than half of that (the interval lies above "
          f"-{SWIGLU_CLAIMED / 2:g}); inconclusive otherwise, or when a seed's optimum lies at "
          f"the grid's edge.")
  claim = "SwiGLU beats GELU at equal size"
  arms = curves.by_arm(runs)
  sw, ge = arms.get("swiglu", []), arms.get("mlp_width:4", [])
  if not sw or not ge:
    return claims.missing(claim, "the swiglu and mlp_width:4 arms", rule)
  effect = stats.compare(curves.best_losses(sw), curves.best_losses(ge))
  lines = [f"SwiGLU: {curves.describe(sw)}; GELU: {curves.describe(ge)}."]
  lower = stats.outcome(effect) == "lower"
  verdict = claims.decide(lines, [claims.edge_guard({"swiglu": sw, "mlp_width:4": ge})], reproduced=lower,
                          not_reproduced=not lower and stats.beyond(effect, -SWIGLU_CLAIMED / 2) == "above")
  return Verdict(claim, verdict, lines, rule, effect, "SwiGLU - GELU")


def claim_depth(runs: list[curves.Run]) -> Verdict:
  rule = (f"per seed, the post-LN minus pre-LN gap of fitted best losses ({WITH_WARMUP} "
          f"warmup) in the deeper setting minus the same gap at the base depth, a paired t "
          f"interval: reproduced when decisively positive (Liu et al. 2020: post-LN's trouble "
          f"grows with depth), not reproduced when decisively negative or equivalent within "
          f"{WARMUP_MARGIN} nats, inconclusive otherwise, or when an arm that learns has a "
          f"seed's optimum at the grid's edge.")
  claim = "post-LN's trouble grows with depth"
  arms = curves.by_arm(runs)
  named = {"deep post": arms.get("depth:post", []), "deep pre": arms.get("depth:pre", []),
           "base post": arms.get(f"norm:post/{WITH_WARMUP}", []),
           "base pre": arms.get(f"norm:pre/{WITH_WARMUP}", [])}
  if not all(named.values()):
    return claims.missing(claim, f"depth:post, depth:pre, norm:post/{WITH_WARMUP} and "
                          f"norm:pre/{WITH_WARMUP} (the depth arms may have been cut from the study)", rule)
  b = {k: curves.best_losses(rs) for k, rs in named.items()}
  seeds = set.intersection(*(set(x) for x in b.values()))
  growth = [b["deep post"][s] - b["deep pre"][s] - b["base post"][s] + b["base pre"][s] for s in seeds]
  effect = dataclasses.replace(stats.one_sample(growth, WARMUP_MARGIN), kind="paired")
  lines = [f"{k}: {curves.describe(rs)}." for k, rs in named.items()]
  verdict = claims.decide(lines, [claims.edge_guard(named)], *claims.directed(stats.outcome(effect)))
  return Verdict(claim, verdict, lines, rule, effect, "Growth of the post - pre gap")


CLAIMS = (claim_warmup, claim_smaller_rate, claim_sensitivity, claim_gradients, claim_residual,
          claim_depth, claim_matched, claim_width, claim_swiglu)


def judge(runs: list[curves.Run], robust: bool = True) -> list[Verdict]:
  """The study's verdicts (``claims.judge_all`` over ``CLAIMS``)."""
  return claims.judge_all(CLAIMS, runs, robust)


# What "the rules" of this study are (``research/identity.py``): the definitions these reach.
RULE_ROOTS = ("judge", "refine_rates")
