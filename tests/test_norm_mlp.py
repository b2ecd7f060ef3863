"""The norm x MLP study (experiments/studies/norm_mlp.py): its claim kinds on synthetic results (each comes out every way, and partial data does not crash), its cells against the committed ones and the package it replaced, and its verdicts on the committed cells against those recorded before it was re-expressed."""

import dataclasses
import json
import math
import os
import subprocess

import numpy as np
import pytest

from research import cells as cells_lib
from research import claims
from research import curves
from research import kinds
from research import registry
from research import stats
from research import study as study_lib
from research.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from experiments.studies.norm_mlp import STUDY

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The commit whose package experiments/studies/norm_mlp/ (grid, rules, report) this file replaced.
PACKAGE_COMMIT = "d395ece2328b8f8f02c3dadea39738e36ed7e0f7"
from synthetic_runs import FLAT, LN_V, RATES, UNIGRAM, arm, bowl  # pylint: disable=unused-import
(WARMUP, SMALLER, SENSITIVITY, GRADIENTS, RESIDUAL, DEPTH, MATCHED, WIDTH, SWIGLU) = range(9)


def record(run: curves.Run, grad: float = math.nan, resid_init: float = math.nan, resid_end: float = math.nan) -> dict:
  """A cell record with the run's probes, each given as its last / first ratio: the MLP gradient profile
  at init (first layer 1) and the residual stream at init and at the end (embedding, first block 1, last block)."""
  return {"seed": run.seed, "name": f"{run.arms[0]}-{run.lr:g}-{run.seed}",
          "init": {"grad_mlp": [1.0, grad], "residual_norm": [0.5, 1.0, resid_init]},
          "end": {"residual_norm": [0.5, 1.0, resid_end]}}


def data(runs: list) -> kinds.Data:
  """``runs``: Runs, or ``(run, probe ratios)`` pairs (``record``'s keywords)."""
  pairs = [r if isinstance(r, tuple) else (r, {}) for r in runs]
  return kinds.Data(tuple((arm, (), r, record(r, **probes)) for r, probes in pairs for arm in r.arms))


def decided(i: int, runs: list[curves.Run]) -> claims.Verdict:
  """The study's claim ``i`` decided alone (its family) on ``runs``."""
  (_, v), = claims.decide_family([STUDY.claims[i].test(data(runs))])
  return v


def judge(runs: list[curves.Run]) -> list[claims.Verdict]:
  return study_lib.judge(STUDY, data(runs))




# ----------------------------------------------------------------------------- norm placement


def norm_arms(post_none, post_long, pre_none, pre_long, **kw):
  return (arm("norm:post/none", post_none, **kw) + arm("norm:post/long", post_long, **kw)
          + arm("norm:pre/none", pre_none, **kw) + arm("norm:pre/long", pre_long, **kw))


def test_warmup_claim_is_the_interaction_every_way():
  good, bad = bowl(4.6, 1e-3), bowl(5.0, 1e-3)
  # Post-LN on the plateau without warmup (flat and bad at every rate: no edge caveat).
  won = decided(WARMUP, norm_arms(FLAT, good, good, good, shift=0.01))
  assert won.verdict == REPRODUCED and won.effect.diff == pytest.approx(1.63, abs=0.01)
  assert won.effect.kind == "paired" and won.effect.lo > 0
  # Both lose the same 0.4 nats without warmup: no interaction.
  assert decided(WARMUP, norm_arms(bad, good, bad, good)).verdict == NOT_REPRODUCED
  # Pre-LN loses more than post-LN: the interaction is negative.
  assert decided(WARMUP, norm_arms(bowl(4.7, 1e-3), good, bad, good)).verdict == NOT_REPRODUCED
  # Post-LN's penalty within seed noise: inconclusive.
  noisy = (arm("norm:post/none", bowl(4.65, 1e-3), shift=0.3)
           + norm_arms(FLAT, good, good, good)[15:])
  assert decided(WARMUP, noisy).verdict == INCONCLUSIVE
  # A learning arm with its optimum at the edge of the grid: it may do better off it.
  edge = {lr: 4.6 + lr * 10 for lr in RATES}
  assert decided(WARMUP, norm_arms(FLAT, edge, good, good)).verdict == INCONCLUSIVE
  # One operating point (the committed 300-step study): nothing is bracketed, nothing shown.
  one = lambda m: {3e-3: m}
  assert decided(WARMUP, norm_arms(one(6.30), one(4.8), one(5.3), one(4.6))).verdict == INCONCLUSIVE


def test_warmup_claim_uses_the_warmup_fixed_before_the_run():
  good, bad = bowl(4.6, 1e-3), bowl(5.0, 1e-3)
  runs = norm_arms(bad, good, bad, good)
  # A short warmup that would flip the verdict is not looked at.
  short = arm("norm:post/short", bowl(6.0, 1e-3)) + arm("norm:pre/short", good)
  assert decided(WARMUP, runs + short).verdict == decided(WARMUP, runs).verdict == NOT_REPRODUCED


def test_all_seeds_diverged_is_inconclusive():
  runs = norm_arms(bowl(4.6, 1e-3), bowl(4.6, 1e-3), bowl(4.6, 1e-3), bowl(4.6, 1e-3), diverged=RATES)
  for verdict in judge(runs):
    assert verdict.verdict == INCONCLUSIVE, verdict.claim


def test_smaller_rate_claim_every_way():
  runs = lambda post, pre, **kw: arm("norm:post/long", post, **kw) + arm("norm:pre/long", pre)
  won = decided(SMALLER, runs(bowl(4.7, 6e-4), bowl(4.6, 5e-3)))
  assert won.verdict == REPRODUCED and won.effect.diff == pytest.approx(math.log(6e-4 / 5e-3), abs=0.1)
  assert decided(SMALLER, runs(bowl(4.7, 5e-3), bowl(4.6, 1e-3))).verdict == NOT_REPRODUCED
  assert decided(SMALLER, runs(bowl(4.7, 2e-3), bowl(4.6, 2e-3), spread=0.001)).verdict == NOT_REPRODUCED
  # Post-LN's optimum at the smallest rate tried: not bracketed.
  assert decided(SMALLER, runs(bowl(4.7, 1e-4), bowl(4.6, 3e-3))).verdict == INCONCLUSIVE
  # Post-LN never learns: its "optimum" is no rate.
  assert decided(SMALLER, runs(FLAT, bowl(4.6, 3e-3))).verdict == INCONCLUSIVE


def test_sensitivity_claim_every_way():
  flat, steep = bowl(4.6, 3e-3, width=0.05), bowl(4.6, 3e-3, width=0.5)
  runs = lambda post, pre, **kw: arm("norm:post/long", post, **kw) + arm("norm:pre/long", pre)
  assert decided(SENSITIVITY, runs(steep, flat)).verdict == REPRODUCED
  assert decided(SENSITIVITY, runs(flat, steep)).verdict == NOT_REPRODUCED
  assert decided(SENSITIVITY, runs(flat, flat, spread=0.001)).verdict == NOT_REPRODUCED
  # Each post-LN seed with its own curvature: the seeds disagree about the sensitivity.
  noisy = []
  for seed, w in enumerate((0.02, 0.6, 0.1)):
    noisy += [curves.Run(("norm:post/long",), lr, seed, m, LN_V, unigram=UNIGRAM)
              for lr, m in bowl(4.6, 3e-3, w).items()]
  assert decided(SENSITIVITY, noisy + arm("norm:pre/long", flat)).verdict == INCONCLUSIVE
  # The committed study's mistake: post-LN flat on the plateau scores near zero; it never
  # learnt, so that says nothing ("less sensitive" would mean "never trains").
  plateau = decided(SENSITIVITY, runs(FLAT, steep))
  assert plateau.verdict == INCONCLUSIVE and "does not learn" in " ".join(plateau.lines)
  # The table's sensitivity and the verdict's are one definition.
  judged = decided(SENSITIVITY, runs(steep, flat))
  assert judged.effect.diff == pytest.approx(
      np.mean(list(curves.sensitivity(runs(steep, flat)[:15]).values()))
      - np.mean(list(curves.sensitivity(arm("norm:pre/long", flat)).values())))


# ----------------------------------------------------------------------------- diagnostics


def profile_runs(post_ratios, pre_ratios, init="xavier"):
  runs = []
  for norm, ratios in (("post", post_ratios), ("pre", pre_ratios)):
    for seed, r in enumerate(ratios):
      runs.append((curves.Run((f"init:{init}/{norm}",), 1e-3, seed, 4.6, LN_V), {"grad": r, "resid_init": 2.0}))
  return runs


def test_gradient_claim_every_way():
  assert decided(GRADIENTS, profile_runs([3.0, 3.2, 2.9], [1.0, 1.05, 0.95])).verdict == REPRODUCED
  assert decided(GRADIENTS, profile_runs([1.0, 1.02, 0.98], [1.0, 1.05, 0.95])).verdict == NOT_REPRODUCED
  assert decided(GRADIENTS, profile_runs([1.2, 2.5, 1.6], [1.0, 1.05, 0.95])).verdict == INCONCLUSIVE
  # Xavier decides; GPT-2 is reported beside it.
  both = profile_runs([3.0, 3.2, 2.9], [1.0, 1.05, 0.95]) + profile_runs([1.0, 1.0, 1.01], [0.7, 0.7, 0.71], "gpt2")
  verdict = decided(GRADIENTS, both)
  assert verdict.verdict == REPRODUCED and "init:gpt2/post" in " ".join(verdict.lines)
  gpt2 = profile_runs([3.0, 3.2, 2.9], [1.0, 1.05, 0.95], "gpt2")
  assert decided(GRADIENTS, gpt2).verdict == INCONCLUSIVE


def test_the_init_profiles_are_a_report_item_beside_the_gradient_claims_figure(tmp_path):
  # The init-profile figure (a report item of experiments/readings/norm_mlp.py, all four init arms;
  # attention gradients and the residual stream, the MLP gradients being the claim's own figure)
  # and the gradient claim's own probe figure (Contrast.figures: the arms it judges and reports).
  d = data(profile_runs([3.0, 3.2, 2.9], [1.0, 1.05, 0.95]) + profile_runs([1.0, 1.0, 1.01], [0.7, 0.7, 0.71], "gpt2"))
  from experiments.readings.norm_mlp import InitProfiles  # pylint: disable=import-outside-toplevel
  (item,) = [r for r in STUDY.reports if isinstance(r, InitProfiles)]
  assert item.section(d, str(tmp_path)).plots == ["init_profiles.png"]
  assert kinds.Contrast.figures([STUDY.claims[GRADIENTS]], d, str(tmp_path)) == ["grad_mlp_init.png"]


def test_residual_claim_is_strict_at_the_threshold():
  runs = lambda ratios: [(curves.Run(("norm:pre/long",), 1e-3, s, 4.6, LN_V), {"resid_end": r})
                         for s, r in enumerate(ratios)]
  assert decided(RESIDUAL, runs([2.0, 2.1, 1.9])).verdict == REPRODUCED
  assert decided(RESIDUAL, runs([1.5, 1.5, 1.5])).verdict == INCONCLUSIVE  # at the threshold: no
  assert decided(RESIDUAL, runs([1.5, 1.51, 1.49])).verdict == INCONCLUSIVE
  assert decided(RESIDUAL, runs([1.1, 1.12, 1.08])).verdict == NOT_REPRODUCED


# ----------------------------------------------------------------------------- MLP


def test_matched_claim_uses_kaplans_few_percent():
  alike = sum((arm(f"mlp_matched:{r}", bowl(4.60 + 0.01 * i, 3e-3), spread=0.004 + 0.001 * i)
               for i, r in enumerate((2, 4, 8))), [])
  # The committed study's case: 0.04 nats apart (0.9 % of the loss) is alike by Kaplan's measure.
  assert decided(MATCHED, alike).verdict == REPRODUCED
  apart = arm("mlp_matched:2", bowl(4.90, 3e-3)) + arm("mlp_matched:4", bowl(4.60, 3e-3), spread=0.004)
  verdict = decided(MATCHED, apart)
  assert verdict.verdict == NOT_REPRODUCED and "mlp_matched:2 - mlp_matched:4" in " ".join(verdict.lines)
  noisy = arm("mlp_matched:2", bowl(4.63, 3e-3), shift=0.15) + arm("mlp_matched:4", bowl(4.60, 3e-3))
  assert decided(MATCHED, noisy).verdict == INCONCLUSIVE
  assert decided(MATCHED, arm("mlp_matched:4", bowl(4.6, 3e-3))).verdict == INCONCLUSIVE
  edge = arm("mlp_matched:2", {lr: 4.6 + 10 * lr for lr in RATES}) + arm("mlp_matched:4", bowl(4.60, 3e-3))
  assert decided(MATCHED, edge).verdict == INCONCLUSIVE


def width(means, spreads=(0.004, 0.005, 0.006, 0.007), shifts=(0.0,) * 4):
  return sum((arm(f"mlp_width:{r}", bowl(m, 3e-3), spread=sp, shift=sh)
              for r, m, sp, sh in zip((1, 2, 4, 8), means, spreads, shifts)), [])


def test_width_claim_every_way():
  assert decided(WIDTH, width((4.80, 4.66, 4.61, 4.60))).verdict == REPRODUCED
  assert decided(WIDTH, width((4.80, 4.66, 4.75, 4.60))).verdict == NOT_REPRODUCED  # a step up
  assert decided(WIDTH, width((4.80, 4.76, 4.61, 4.60))).verdict == NOT_REPRODUCED  # returns grow
  assert decided(WIDTH, width((4.80, 4.66, 4.61, 4.60), shifts=(0.0, 0.3, 0.0, 0.3))).verdict == INCONCLUSIVE
  assert decided(WIDTH, width((4.80, 4.66))).verdict == INCONCLUSIVE  # fewer than three ratios


def test_swiglu_claim_every_way():
  ge = arm("mlp_width:4", bowl(4.61, 3e-3), spread=0.004)
  assert decided(SWIGLU, ge + arm("swiglu", bowl(4.55, 3e-3))).verdict == REPRODUCED
  assert decided(SWIGLU, ge + arm("swiglu", bowl(4.64, 3e-3))).verdict == NOT_REPRODUCED
  assert decided(SWIGLU, ge + arm("swiglu", bowl(4.611, 3e-3))).verdict == NOT_REPRODUCED
  assert decided(SWIGLU, ge + arm("swiglu", bowl(4.58, 3e-3), shift=0.2)).verdict == INCONCLUSIVE
  # At its own optimum: SwiGLU better at a different rate than GELU's best.
  assert decided(SWIGLU, ge + arm("swiglu", bowl(4.55, 1e-2))).verdict == REPRODUCED
  rising = {lr: 4.70 - 0.01 * i for i, lr in enumerate(RATES)}
  assert decided(SWIGLU, ge + arm("swiglu", rising)).verdict == INCONCLUSIVE


def test_depth_claim_every_way():
  base = arm("norm:post/long", bowl(4.65, 1e-3)) + arm("norm:pre/long", bowl(4.60, 3e-3), spread=0.004)
  deep = lambda post, shift=0.0: (arm("depth:post", bowl(post, 1e-3), spread=0.006, shift=shift)
                             + arm("depth:pre", bowl(4.50, 3e-3), spread=0.003))
  assert decided(DEPTH, base + deep(4.80)).verdict == REPRODUCED
  assert decided(DEPTH, base + deep(4.40)).verdict == NOT_REPRODUCED
  assert decided(DEPTH, base + deep(4.6, shift=0.3)).verdict == INCONCLUSIVE
  cut = decided(DEPTH, base)  # the depth arms cut from the study: nothing to judge
  assert cut.verdict == INCONCLUSIVE and "Not enough runs" in " ".join(cut.lines) and cut.effect is None


def test_verdicts_say_whether_they_survive_leaving_out_a_seed():
  good = bowl(4.6, 1e-3)
  strong = judge(norm_arms(FLAT, good, good, good, shift=0.01))[0]
  assert strong.verdict == REPRODUCED and "survives" in strong.robustness
  # Three seeds, one of which carries the effect: without it the claim is undecided.
  runs = norm_arms(FLAT, good, good, good)
  runs = [r for r in runs if not (r.seed == 2 and r.arms == ("norm:post/none",))]
  runs += [curves.Run(("norm:post/none",), lr, 2, l, LN_V, unigram=UNIGRAM)
           for lr, l in good.items()]
  weak = judge(runs)[0]
  assert "does not survive" in weak.robustness or weak.verdict == INCONCLUSIVE


# ----------------------------------------------------------------------------- partial data


@pytest.mark.parametrize("runs", [
    [],
    arm("norm:post/none", {1e-3: 4.6}, seeds=1),  # one rate, one seed
    norm_arms({1e-3: 4.6}, {3e-4: 4.6}, {}, {1e-3: 4.6}),  # missing rates and an empty arm
    norm_arms(bowl(4.6, 1e-3), bowl(4.6, 1e-3), bowl(4.6, 1e-3), bowl(4.6, 1e-3),
              diverged=RATES, seeds=2),  # everything diverged
    arm("mlp_width:1", {1e-3: float("nan")}) + arm("mlp_width:2", {}) + arm("swiglu", {1e-3: 4.5}, seeds=1),
    [(curves.Run(("norm:pre/long",), 1e-3, 0, float("nan"), LN_V), {"resid_end": float("nan")})],
], ids=["empty", "one-cell", "missing-rates", "all-diverged", "nan-and-empty", "nan-diagnostics"])
def test_partial_results_do_not_crash(runs):
  for verdict in judge(runs):
    assert verdict.verdict in (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
    assert verdict.markdown()[0].startswith("**")




# ----------------------------------------------------------------------------- the committed study


def test_the_cells_are_the_committed_ones():
  """The cpu sweep's cells are those the committed run trained before its rounds of added rates:
  names, overrides, arms, seeds, groups (the smoke run's grid predates the current one)."""
  committed = json.load(open(os.path.join(ROOT, "results", "norm_mlp-cpu", "sweep.json")))["cells"]
  base = [c for c in committed if not c["round"]]
  cells = registry.load("norm_mlp", "cpu").cells
  as_json = lambda x: json.loads(json.dumps(x))
  assert [(c.name, as_json(c.overrides), list(c.arms), c.seed, c.group, c.refinable) for c in cells] == [
      (c["name"], c["overrides"], c["arms"], c["seed"], c["group"], c["refinable"]) for c in base]
  # The rounds of added rates extended only groups the study lets refine.
  assert {c["group"].split(".r")[0] for c in committed if c["round"]} <= {c.group for c in cells if c.refinable}


@pytest.mark.parametrize("scale", ["cpu", "smoke", "gpu"])
def test_the_cells_are_those_of_the_package_it_replaced(scale):
  """At every scale, the cells of the package's grid.py at the commit it was replaced (run
  from git's text), in the same order."""
  try:
    text = subprocess.run(["git", "show", f"{PACKAGE_COMMIT}:experiments/studies/norm_mlp/grid.py"],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError):
    pytest.skip("the package's commit is not in this clone's history (a shallow clone?)")
  old: dict = {"__name__": "norm_mlp_package_grid"}
  exec(compile(text, "norm_mlp/grid.py", "exec"), old)  # pylint: disable=exec-used
  assert [dataclasses.asdict(c) for c in registry.load("norm_mlp", scale).cells] == [
      dataclasses.asdict(c) for c in old["get_sweep"](scale).cells]


@pytest.mark.parametrize("scale", ["cpu", "smoke"])
def test_rejudging_the_committed_cells_gives_the_recorded_verdicts(scale):
  """The verdicts, effects (to the printed digits) and leave-one-seed-out lines the package's
  rules gave the committed cells (verdicts_before.json) are the one-file study's."""
  where = os.path.join(ROOT, "results", f"norm_mlp-{scale}")
  before = json.load(open(os.path.join(where, "verdicts_before.json")))
  _, cells, _ = cells_lib.load(where)
  figures = lambda e: None if e is None else [round(e[k], 3) for k in ("diff", "lo", "hi")]
  judged = STUDY.judge(cells)
  now = [(v.claim, v.verdict, figures(v.effect and dataclasses.asdict(v.effect))) for v in judged]
  assert now == [(v["claim"], v["verdict"], figures(v["effect"])) for v in before["verdicts"]]
  # The leave-one-seed-out lines too, where the framework checks one: not for a claim
  # without the runs to judge it ("Not enough runs": the depth arms cut at the cpu scale),
  # which the package's rules re-judged without each seed all the same.
  for v, b in zip(judged, before["verdicts"]):
    assert v.robustness == (b["robustness"] if not v.lines[0].startswith("Not enough runs") else "")


def test_arms_a_scale_does_not_train_and_their_own_rates():
  cpu, gpu = (registry.load("norm_mlp", s).cells for s in ("cpu", "gpu"))
  arms = lambda cells: {a for c in cells for a in c.arms}
  assert {"mlp_matched:1", "depth:pre", "depth:post"} & arms(cpu) == set()
  assert {"mlp_matched:1", "depth:pre", "depth:post"} <= arms(gpu)
  assert {c.learning_rate for c in cpu if "swiglu" in c.arms} == {2e-3, 4e-3, 8e-3}
  assert {(c.learning_rate, c.overrides["train.steps"], c.refinable) for c in cpu
          if "init:xavier/post" in c.arms} == {(3e-4, 10, False)}
  with pytest.raises(ValueError, match=r"trains arms \[.nope.\] that the study does not define"):
    dataclasses.replace(STUDY, scales={"cpu": dataclasses.replace(STUDY.scales["cpu"], arms=("nope",))}).sweep("cpu")


def test_the_report_says_re_expressed_with_the_same_verdicts():
  """The committed cpu run recorded the rules of its day (file form, migrated to definitions): the
  report re-judges with the one-file study, finds the verdicts of verdicts_before.json, and
  says so; one verdict changed is named."""
  from research import identity
  from research import report
  where = os.path.join(ROOT, "results", "norm_mlp-cpu")
  index, cells, _ = cells_lib.load(where)
  lines = identity.rules_lines(index["rules"], "norm_mlp")
  if "cannot be compared" in lines[0]:
    pytest.skip("the run's commit is not in this clone's history (a shallow clone?)")
  assert "re-judged" in lines[0] and "experiments/studies/norm_mlp.py" in lines[0]
  before = json.load(open(os.path.join(where, "verdicts_before.json")))
  verdicts = STUDY.judge(cells, robust=False)
  line, = report.reexpressed(before, verdicts, lines)
  assert line.startswith("Rules: **re-expressed, same verdicts.**") and "the same 9 verdicts" in line
  assert f"git show {before['commit']}:experiments/studies/norm_mlp/rules.py" in line
  verdicts[5].verdict = REPRODUCED  # as if the depth claim had come out otherwise
  assert "trouble grows with depth\": Inconclusive None before, Reproduced None now" in \
      report.reexpressed(before, verdicts, lines)[-1]


# ----------------------------------------------------------------------------- the rules' finer points


def test_a_difference_decisively_within_its_margin_counts_against_and_never_for():
  # Post-LN's optimum 10 % below pre-LN's, every seed alike: decisively lower, and decisively
  # within the factor 1.5 the rule calls the same rate: not reproduced (stats.outcomes' rule).
  runs = (arm("norm:post/long", bowl(4.7, 1.8e-3), spread=1e-5)
          + arm("norm:pre/long", bowl(4.6, 2e-3), spread=1e-5))
  v = decided(SMALLER, runs)
  assert v.effect.hi < 0 and v.effect.p < 0.05 and v.verdict == NOT_REPRODUCED


def test_gradient_claim_needs_pre_ln_flat_too():
  assert decided(GRADIENTS, profile_runs([3.0, 3.2, 2.9], [2.0, 2.1, 1.9])).verdict == NOT_REPRODUCED


def test_matched_pairs_are_decided_under_holm():
  # Three arms whose three pairwise differences each pass their TOST alone (p 0.03) and fail
  # under Holm over the three pairs: inconclusive.
  u, w = np.array([1, -1, 0]) / math.sqrt(2), np.array([1, 1, -2]) / math.sqrt(6)
  r = 0.0593
  deltas = {"mlp_matched:4": np.zeros(3), "mlp_matched:2": r * u, "mlp_matched:8": r * (u / 2 + w * math.sqrt(3) / 2)}
  runs = [curves.Run((name,), lr, s, l + d[s], LN_V, unigram=UNIGRAM)
          for name, d in deltas.items() for s in range(3) for lr, l in bowl(4.6, 3e-3).items()]
  best = {n: curves.best_losses([x for x in runs if x.arms == (n,)]) for n in deltas}
  alone = [stats.paired(best[a], best[b], 0.02 * 4.6).p_same for a, b in
           (("mlp_matched:2", "mlp_matched:4"), ("mlp_matched:2", "mlp_matched:8"), ("mlp_matched:4", "mlp_matched:8"))]
  assert max(alone) < 0.05 < 3 * min(alone)
  assert decided(MATCHED, runs).verdict == INCONCLUSIVE


def test_residual_claim_reads_each_seed_at_its_best_rate():
  # At the best rate (3e-3) the stream barely grows; at every other rate it grows threefold.
  runs = [(curves.Run(("norm:pre/long",), lr, s, l + 0.001 * s, LN_V, unigram=UNIGRAM),
           {"resid_end": (1.1 + 0.02 * (s - 1)) if lr == 3e-3 else 3.0})
          for s in range(3) for lr, l in bowl(4.6, 3e-3).items()]
  assert decided(RESIDUAL, runs).verdict == NOT_REPRODUCED
