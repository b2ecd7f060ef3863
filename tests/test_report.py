"""The verdict rules on synthetic results: each can come out every way, and partial data does not crash."""

import json
import math

import numpy as np
import pytest

from experiments import verdicts as v
from experiments.verdicts import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED

RATES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
LN_V = math.log(2305)


def arm(name, curve, seeds=3, spread=0.005, norm="pre", init="gpt2", diverged=(), **fields):
  """Runs of one arm: ``curve`` maps rate -> mean final loss; seeds add +-spread around it."""
  runs = []
  offsets = np.linspace(-spread, spread, seeds) if seeds > 1 else [0.0]
  for i, (lr, mean) in enumerate(curve.items()):
    # Rolled per rate, so that each seed's curve has its own shape (not just a shift).
    for seed, off in enumerate(np.roll(offsets, i)):
      div = (lr, seed) in diverged or lr in diverged
      runs.append(v.Run((name,), lr, seed, float("nan") if div else mean + off, LN_V,
                        diverged=div, norm=norm, init=init, **fields))
  return runs


def bowl(best, lr_best, width=0.3):
  """A loss-vs-rate curve with its minimum ``best`` at ``lr_best``."""
  return {lr: best + width * math.log10(lr / lr_best) ** 2 for lr in RATES}


# ----------------------------------------------------------------------------- compare


def test_compare_needs_effect_size_and_seed_spread():
  assert v.compare([4.0, 4.01, 4.02], [4.5, 4.51, 4.52]).outcome == "lower"
  assert v.compare([4.5, 4.51], [4.0, 4.01]).outcome == "higher"
  # 0.003 nats apart with 0.005 spread: not an effect, and within MIN_EFFECT: the same.
  assert v.compare([4.600, 4.605, 4.610], [4.603, 4.608, 4.613]).outcome == "same"
  # A big gap drowned in seed noise: unclear.
  assert v.compare([4.0, 4.6], [4.2, 4.8]).outcome == "unclear"
  # One seed: no spread to judge against.
  assert v.compare([4.0], [5.0]).outcome == "unclear"
  assert v.compare([], [5.0]).outcome == "unclear"


def test_lr_sensitivity_is_wortsman_et_al():
  runs = arm("a", {1e-4: 5.0, 1e-3: 4.0, 1e-2: 9.0}, seeds=1)  # 9.0 > ln V: clipped to ln V
  expected = np.mean([5.0, 4.0, LN_V]) - 4.0
  assert v.lr_sensitivity(runs) == pytest.approx(expected)
  # A diverged rate counts as the initial loss, too.
  div = arm("a", {1e-4: 5.0, 1e-3: 4.0, 1e-2: 4.5}, seeds=1, diverged=(1e-2,))
  assert v.lr_sensitivity(div) == pytest.approx(expected)
  assert math.isnan(v.lr_sensitivity(arm("a", {1e-3: 4.0})))
  assert v.best_rate(div) == 1e-3 and v.at_edge(div) is False
  assert v.at_edge(arm("a", {1e-4: 4.0, 1e-3: 4.5, 1e-2: 5.0}))


# ----------------------------------------------------------------------------- warmup


def norm_arms(post_none, post_long, pre_none, pre_long, **kw):
  return (arm("norm:post/none", post_none, norm="post", **kw) + arm("norm:post/long", post_long, norm="post", **kw)
          + arm("norm:pre/none", pre_none, **kw) + arm("norm:pre/long", pre_long, **kw))


def test_warmup_claim_every_way():
  good, bad = bowl(4.6, 1e-3), bowl(5.0, 3e-4)
  assert v.claim_warmup(norm_arms(bad, good, good, good)).verdict == REPRODUCED
  # Post-LN trains as well without warmup at its own best rate: not reproduced.
  assert v.claim_warmup(norm_arms(bowl(4.6, 3e-4), good, good, good)).verdict == NOT_REPRODUCED
  # Pre-LN needs warmup too: not reproduced.
  assert v.claim_warmup(norm_arms(bad, good, bad, good)).verdict == NOT_REPRODUCED
  # Post-LN's gap within seed noise: inconclusive.
  noisy = norm_arms(bowl(4.65, 1e-3), good, good, good, spread=0.3)
  assert v.claim_warmup(noisy).verdict == INCONCLUSIVE
  # One operating point (the committed 300-step study): nothing is bracketed, nothing shown.
  one = lambda m: {3e-3: m}
  assert v.claim_warmup(norm_arms(one(6.30), one(6.30), one(5.3), one(4.6))).verdict == INCONCLUSIVE
  # Post-LN without warmup best at the smallest rate tried: it may do better below the grid.
  edge = {lr: 5.0 + lr * 100 for lr in RATES}
  assert v.claim_warmup(norm_arms(edge, good, good, good)).verdict == INCONCLUSIVE


def test_smaller_rate_claim_every_way():
  runs = lambda post, pre: arm("norm:post/long", post, norm="post") + arm("norm:pre/long", pre)
  assert v.claim_smaller_rate(runs(bowl(4.7, 3e-4), bowl(4.6, 3e-3))).verdict == REPRODUCED
  assert v.claim_smaller_rate(runs(bowl(4.7, 3e-3), bowl(4.6, 1e-3))).verdict == NOT_REPRODUCED
  # Post-LN's optimum at the smallest rate tried: not bracketed.
  assert v.claim_smaller_rate(runs(bowl(4.7, 1e-4), bowl(4.6, 3e-3))).verdict == INCONCLUSIVE


def test_sensitivity_claim_every_way():
  flat, steep = bowl(4.6, 1e-3, width=0.05), bowl(4.6, 1e-3, width=0.5)
  runs = lambda post, pre: arm("norm:post/none", post, norm="post") + arm("norm:pre/none", pre)
  assert v.claim_sensitivity(runs(steep, flat)).verdict == REPRODUCED
  assert v.claim_sensitivity(runs(flat, flat)).verdict == NOT_REPRODUCED
  # Each post-LN seed with its own curvature: the seeds disagree about the sensitivity.
  noisy = []
  for seed, w in enumerate((0.02, 0.3, 0.6)):
    noisy += [v.Run(("norm:post/none",), lr, seed, m, LN_V, norm="post")
              for lr, m in bowl(4.6, 1e-3, w).items()]
  noisy += arm("norm:pre/none", flat)
  assert v.claim_sensitivity(noisy).verdict == INCONCLUSIVE
  # With the long-warmup arms present their sensitivities are reported beside the verdict.
  long = arm("norm:post/long", steep, norm="post") + arm("norm:pre/long", flat)
  judged = v.claim_sensitivity(runs(flat, flat) + long)
  assert judged.verdict == NOT_REPRODUCED
  assert any("long warmup (reported, not judged)" in line for line in judged.lines)


# ----------------------------------------------------------------------------- diagnostics


def profile_runs(post_ratios, pre_ratios, init="xavier"):
  runs = []
  for norm, ratios in (("post", post_ratios), ("pre", pre_ratios)):
    for seed, r in enumerate(ratios):
      runs.append(v.Run((f"init:{init}/{norm}",), 1e-3, seed, 4.6, LN_V, norm=norm, init=init,
                        grad_ratio_init=r))
  return runs


def test_gradient_claim_every_way():
  assert v.claim_gradients(profile_runs([3.0, 3.2, 2.9], [1.0, 1.05, 0.95])).verdict == REPRODUCED
  assert v.claim_gradients(profile_runs([1.0, 1.02, 0.98], [1.0, 1.05, 0.95])).verdict == NOT_REPRODUCED
  assert v.claim_gradients(profile_runs([1.2, 2.5, 1.6], [1.0, 1.05, 0.95])).verdict == INCONCLUSIVE
  # Xavier decides; GPT-2 is reported beside it.
  both = profile_runs([3.0, 3.2, 2.9], [1.0, 1.05, 0.95]) + profile_runs([1.0, 1.0, 1.01], [0.7, 0.7, 0.71], "gpt2")
  verdict = v.claim_gradients(both)
  assert verdict.verdict == REPRODUCED and "gpt2 init" in " ".join(verdict.lines)
  # GPT-2's init alone does not decide a claim made about Xavier's.
  gpt2 = profile_runs([3.0, 3.2, 2.9], [1.0, 1.05, 0.95], "gpt2")
  assert v.claim_gradients(gpt2).verdict == INCONCLUSIVE


def test_residual_claim_is_strict_at_the_threshold():
  runs = lambda ratios: [v.Run(("norm:pre/long",), 1e-3, s, 4.6, LN_V, resid_ratio_end=r)
                         for s, r in enumerate(ratios)]
  assert v.claim_residual(runs([2.0, 2.1, 1.9])).verdict == REPRODUCED
  assert v.claim_residual(runs([1.5, 1.5, 1.5])).verdict == INCONCLUSIVE  # at the threshold: no
  assert v.claim_residual(runs([1.5, 1.51, 1.49])).verdict == INCONCLUSIVE
  assert v.claim_residual(runs([1.1, 1.12, 1.08])).verdict == NOT_REPRODUCED


# ----------------------------------------------------------------------------- MLP


def test_matched_claim_is_judged_in_nats_not_percent():
  alike = sum((arm(f"mlp_matched:{r}", bowl(4.60 + 0.002 * i, 1e-3)) for i, r in enumerate((1, 2, 4, 8))), [])
  assert v.claim_matched(alike).verdict == REPRODUCED
  # The committed study's case: r=1 0.2 nats behind, under 5 % of the loss.
  apart = arm("mlp_matched:1", bowl(4.83, 1e-3)) + arm("mlp_matched:2", bowl(4.60, 1e-3))
  verdict = v.claim_matched(apart)
  assert verdict.verdict == NOT_REPRODUCED and "r=1 vs r=2" in " ".join(verdict.lines)
  noisy = arm("mlp_matched:1", bowl(4.63, 1e-3), spread=0.1) + arm("mlp_matched:2", bowl(4.60, 1e-3))
  assert v.claim_matched(noisy).verdict == INCONCLUSIVE
  assert v.claim_matched(arm("mlp_matched:4", bowl(4.6, 1e-3))).verdict == INCONCLUSIVE


def test_width_claim_every_way():
  width = lambda means, **kw: sum((arm(f"mlp_width:{r}", bowl(m, 1e-3), **kw)
                                   for r, m in zip((1, 2, 4, 8), means)), [])
  assert v.claim_width(width((4.80, 4.66, 4.61, 4.60))).verdict == REPRODUCED
  # A 0.003-nat first step with 0.005 spread is not "better".
  assert v.claim_width(width((4.610, 4.607, 4.606, 4.605))).verdict == NOT_REPRODUCED
  assert v.claim_width(width((4.80, 4.66, 4.75, 4.60))).verdict == NOT_REPRODUCED  # a step up
  assert v.claim_width(width((4.80, 4.76, 4.61, 4.60))).verdict == NOT_REPRODUCED  # returns grow
  assert v.claim_width(width((4.80, 4.66, 4.61, 4.60), spread=0.3)).verdict == INCONCLUSIVE
  # Fewer than three ratios: no vacuous pass.
  assert v.claim_width(width((4.80, 4.66))).verdict == INCONCLUSIVE


def test_swiglu_claim_can_fail():
  ge = arm("mlp_width:4", bowl(4.61, 1e-3))
  assert v.claim_swiglu(ge + arm("swiglu", bowl(4.55, 1e-3))).verdict == REPRODUCED
  assert v.claim_swiglu(ge + arm("swiglu", bowl(4.64, 1e-3))).verdict == NOT_REPRODUCED
  assert v.claim_swiglu(ge + arm("swiglu", bowl(4.611, 1e-3))).verdict == NOT_REPRODUCED
  assert v.claim_swiglu(ge + arm("swiglu", bowl(4.58, 1e-3), spread=0.2)).verdict == INCONCLUSIVE
  # At its own best rate: SwiGLU better at a different rate than GELU's best.
  assert v.claim_swiglu(ge + arm("swiglu", bowl(4.55, 3e-3))).verdict == REPRODUCED
  # SwiGLU worse, but best at the largest rate tried: it may do better off the grid.
  rising = {lr: 4.70 - 0.01 * i for i, lr in enumerate(RATES)}
  assert v.claim_swiglu(ge + arm("swiglu", rising)).verdict == INCONCLUSIVE


def test_depth_claim_every_way():
  base = arm("norm:post/long", bowl(4.65, 1e-3), norm="post") + arm("norm:pre/long", bowl(4.60, 1e-3))
  deep = lambda post: arm("depth:post", bowl(post, 1e-3), norm="post") + arm("depth:pre", bowl(4.50, 1e-3))
  assert v.claim_depth(base + deep(4.80)).verdict == REPRODUCED
  assert v.claim_depth(base + deep(4.55)).verdict == NOT_REPRODUCED
  assert v.claim_depth(base + arm("depth:post", bowl(4.6, 1e-3), norm="post", spread=0.3)
                       + arm("depth:pre", bowl(4.5, 1e-3))).verdict == INCONCLUSIVE


def test_depth_claim_compares_the_base_depth_over_the_deep_arms_rates():
  # Post-LN's base optimum (1e-4) lies outside the two rates the deep arms were tried at:
  # judged at its own best, the base gap would look small and depth would seem to hurt.
  # Deeper is 0.1 nats better for both norms at every rate: the gap does not grow.
  tried = lambda curve: {lr: curve[lr] for lr in (1e-3, 3e-3)}
  post, pre = bowl(4.65, 1e-4), bowl(4.60, 1e-3)
  base = arm("norm:post/long", post, norm="post") + arm("norm:pre/long", pre)
  deep = (arm("depth:post", {lr: m - 0.1 for lr, m in tried(post).items()}, norm="post")
          + arm("depth:pre", {lr: m - 0.1 for lr, m in tried(pre).items()}))
  verdict = v.claim_depth(base + deep)
  assert verdict.verdict == NOT_REPRODUCED, verdict.lines
  assert "0.001, 0.003" in verdict.lines[0]
  # A real growth over the same rates is still found.
  worse = (arm("depth:post", {lr: m + 0.2 for lr, m in tried(post).items()}, norm="post")
           + arm("depth:pre", {lr: m - 0.1 for lr, m in tried(pre).items()}))
  assert v.claim_depth(base + worse).verdict == REPRODUCED


# ----------------------------------------------------------------------------- partial data


@pytest.mark.parametrize("runs", [
    [],
    arm("norm:post/none", {1e-3: 4.6}, seeds=1, norm="post"),  # one rate, one seed
    norm_arms({1e-3: 4.6}, {3e-4: 4.6}, {}, {1e-3: 4.6}),  # missing rates and an empty arm
    norm_arms(bowl(4.6, 1e-3), bowl(4.6, 1e-3), bowl(4.6, 1e-3), bowl(4.6, 1e-3),
              diverged=RATES, seeds=2),  # everything diverged
    arm("mlp_width:1", {1e-3: float("nan")}) + arm("mlp_width:2", {}) + arm("swiglu", {1e-3: 4.5}, seeds=1),
    [v.Run(("norm:pre/long",), 1e-3, 0, float("nan"), LN_V, resid_ratio_end=float("nan"))],
], ids=["empty", "one-cell", "missing-rates", "all-diverged", "nan-and-empty", "nan-diagnostics"])
def test_partial_results_do_not_crash(runs):
  for verdict in v.judge(runs):
    assert verdict.verdict in (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
    assert verdict.markdown()[0].startswith("**")


# ----------------------------------------------------------------------------- the report on partial files


def write_cell(root, path, arms, lr, seed, status="completed", final=4.6, diag=True):
  d = root / path
  d.mkdir(parents=True)
  (d / "cell.json").write_text(json.dumps({"name": path, "arms": arms, "seed": seed, "group": "",
                                           "overrides": {"train.learning_rate": lr, "model.norm": "post"}}))
  (d / "summary.json").write_text(json.dumps({
      "status": status, "steps": 10, "diverged_at_step": 4 if status == "diverged" else None,
      "final_val_loss": final if status == "completed" else None, "unigram_val_loss": 6.0,
      "n_params": 1000, "wall_time_s": 1.0}))
  if diag:
    (d / "diagnostics.jsonl").write_text(json.dumps({"step": 0, "loss": 7.7, "grad_attn": [1.0, 1.0],
                                                     "grad_mlp": [1.0, float("nan")],
                                                     "residual_norm": [1.0, 1.0, 1.0]}) + "\n")


def test_report_on_partial_and_diverged_cells(tmp_path):
  from experiments import report
  write_cell(tmp_path, "a/lr0.001-s0", ["norm:post/none"], 1e-3, 0)
  write_cell(tmp_path, "a/lr0.01-s0", ["norm:post/none"], 1e-2, 0, status="diverged")
  write_cell(tmp_path, "b/lr0.001-s0", ["norm:post/long"], 1e-3, 0, diag=False)
  write_cell(tmp_path, "c/lr0.001-s0", ["swiglu"], 1e-3, 0, status="running")  # unfinished: left out
  path = report.write_report(str(tmp_path), str(tmp_path / "out"))
  text = open(path).read()
  assert "3 models, 1 diverged" in text
  assert "Training time measured: 0 minutes in 3 programs" in text
  assert report.measured_time([{"name": "a", "group": "g", "wall_time_s": 600.0},
                               {"name": "b", "group": "g", "wall_time_s": 600.0},
                               {"name": "c", "wall_time_s": 300.0}]).startswith(
      "Training time measured: 15 minutes in 2 programs")
  assert "| norm:post/none | 0.001 (edge) | 4.600 | 1.550 | 1/2 | 4.600 | 7.700 (1✕) |" in text
  results = json.load(open(tmp_path / "out" / "results.json"))
  assert {c["name"] for c in results["cells"]} == {"a/lr0.001-s0", "a/lr0.01-s0", "b/lr0.001-s0"}
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(ValueError, match="holds no cells"):
    report.write_report(str(empty))
