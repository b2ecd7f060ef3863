"""The per-arm curve maths and the norm x MLP study's rules on synthetic results (each can come out every way, and partial data does not crash), and its report."""

import json
import math
import os

import numpy as np
import pytest

from research import curves
from research.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from experiments.studies.norm_mlp import rules as v

RATES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
LN_V = math.log(2305)
UNIGRAM = 6.27


def arm(name, curve, seeds=3, spread=0.005, norm="pre", init="gpt2", diverged=(), shift=0.0, **fields):
  """Runs of one arm: ``curve`` maps rate -> mean final loss; seeds add +-spread around it
  (rolled per rate, so each seed's curve has its own shape) and ``shift * seed`` (what a
  seed's initialisation and batch order do to every arm alike)."""
  runs = []
  offsets = np.linspace(-spread, spread, seeds) if seeds > 1 else [0.0]
  for i, (lr, mean) in enumerate(curve.items()):
    for seed, off in enumerate(np.roll(offsets, i)):
      div = (lr, seed) in diverged or lr in diverged
      runs.append(curves.Run((name,), lr, seed, float("nan") if div else mean + off + shift * seed, LN_V,
                             diverged=div, norm=norm, init=init, unigram=UNIGRAM, **fields))
  return runs


def bowl(best, lr_best, width=0.3, rates=RATES):
  """A loss-vs-rate curve with its minimum ``best`` at ``lr_best``."""
  return {lr: best + width * math.log10(lr / lr_best) ** 2 for lr in rates}


FLAT = {lr: 6.23 for lr in RATES}  # the unigram plateau at every rate: does not learn


# ----------------------------------------------------------------------------- one arm


def test_optimum_is_the_vertex_of_a_parabola_in_log_rate():
  curve = {lr: (math.log(lr) - math.log(2e-3)) ** 2 for lr in (1e-3, 3e-3, 1e-2)}
  opt = curves.fit_optimum(curve)
  assert opt.bracketed and opt.grid_lr == 3e-3 and opt.lr == pytest.approx(2e-3, rel=1e-6)
  assert opt.loss == pytest.approx(0.0, abs=1e-9)
  edge = curves.fit_optimum({1e-3: 4.0, 3e-3: 4.5, 1e-2: 5.0})
  assert not edge.bracketed and edge.lr == 1e-3
  assert curves.fit_optimum({}) is None


def test_one_unstable_seed_moves_only_its_own_optimum():
  # Seeds 0 and 1 best near 1e-2; seed 2 blows up there (5.10): its optimum moves, theirs do not.
  runs = []
  for seed, at_hi in enumerate((4.56, 4.65, 5.10)):
    curve = {3e-4: 5.9, 1e-3: 5.1, 3e-3: 4.76, 1e-2: at_hi, 3e-2: 5.5}
    runs += [curves.Run(("a",), lr, seed, l, LN_V, unigram=UNIGRAM) for lr, l in curve.items()]
  opts = curves.optima(runs)
  assert opts[0].grid_lr == opts[1].grid_lr == 1e-2 and opts[2].grid_lr == 3e-3
  s = curves.summary(runs)
  assert 3e-3 < s["optimum_lr"] < 1e-2 and s["bracketed_seeds"] == 3 and s["learns"]
  lo, hi = s["optimum_lr_interval"]
  assert lo < 3e-3 and hi > 1e-2  # the seeds disagree: a wide interval, not a point


def test_refine_brackets_each_optimum_within_2x_and_extends_an_edge():
  base = (3e-4, 1e-3, 3e-3, 1e-2)
  inside = arm("a", bowl(4.7, 3e-3, rates=base))
  assert curves.refine_rates(inside) == [0.00173, 0.00548]
  edge = arm("a", bowl(4.7, 2e-2, rates=base))
  assert curves.refine_rates(edge) == [0.00548, 0.0333]
  # Once bracketed within 2x, nothing more.
  done = arm("a", bowl(4.7, 3e-3, rates=sorted(base + (0.00173, 0.00548))))
  assert curves.refine_rates(done) == []
  # An arm on the plateau at every rate has no optimum to bracket.
  assert curves.refine_rates(arm("a", {lr: FLAT[lr] for lr in base})) == []


def test_sensitivity_is_wortsman_et_al_per_seed_on_the_base_grid():
  runs = arm("a", {1e-4: 5.0, 1e-3: 4.0, 1e-2: 9.0}, seeds=1)  # 9.0 > ln V: clipped to ln V
  expected = np.mean([5.0, 4.0, LN_V]) - 4.0
  assert curves.sensitivity(runs) == pytest.approx({0: expected})
  div = arm("a", {1e-4: 5.0, 1e-3: 4.0, 1e-2: 4.5}, seeds=1, diverged=(1e-2,))
  assert curves.sensitivity(div) == pytest.approx({0: expected})
  # Rates added around the optimum (round 1) do not enter: the grid stays the same for all arms.
  added = [curves.Run(("a",), 2e-3, 0, 3.0, LN_V, round=1)]
  assert curves.sensitivity(runs + added) == pytest.approx({0: expected})
  assert curves.sensitivity(arm("a", {1e-3: 4.0})) == {}


# ----------------------------------------------------------------------------- norm placement


def norm_arms(post_none, post_long, pre_none, pre_long, **kw):
  return (arm("norm:post/none", post_none, norm="post", **kw) + arm("norm:post/long", post_long, norm="post", **kw)
          + arm("norm:pre/none", pre_none, **kw) + arm("norm:pre/long", pre_long, **kw))


def test_warmup_claim_is_the_interaction_every_way():
  good, bad = bowl(4.6, 1e-3), bowl(5.0, 1e-3)
  # Post-LN on the plateau without warmup (flat and bad at every rate: no edge caveat).
  won = v.claim_warmup(norm_arms(FLAT, good, good, good, shift=0.01))
  assert won.verdict == REPRODUCED and won.effect.diff == pytest.approx(1.63, abs=0.01)
  assert won.effect.kind == "paired" and won.effect.lo > 0
  # Both lose the same 0.4 nats without warmup: no interaction.
  assert v.claim_warmup(norm_arms(bad, good, bad, good)).verdict == NOT_REPRODUCED
  # Pre-LN loses more than post-LN: the interaction is negative.
  assert v.claim_warmup(norm_arms(bowl(4.7, 1e-3), good, bad, good)).verdict == NOT_REPRODUCED
  # Post-LN's penalty within seed noise: inconclusive.
  noisy = (arm("norm:post/none", bowl(4.65, 1e-3), norm="post", shift=0.3)
           + norm_arms(FLAT, good, good, good)[15:])
  assert v.claim_warmup(noisy).verdict == INCONCLUSIVE
  # A learning arm with its optimum at the edge of the grid: it may do better off it.
  edge = {lr: 4.6 + lr * 10 for lr in RATES}
  assert v.claim_warmup(norm_arms(FLAT, edge, good, good)).verdict == INCONCLUSIVE
  # One operating point (the committed 300-step study): nothing is bracketed, nothing shown.
  one = lambda m: {3e-3: m}
  assert v.claim_warmup(norm_arms(one(6.30), one(4.8), one(5.3), one(4.6))).verdict == INCONCLUSIVE


def test_warmup_claim_uses_the_warmup_fixed_before_the_run():
  good, bad = bowl(4.6, 1e-3), bowl(5.0, 1e-3)
  runs = norm_arms(bad, good, bad, good)
  # A short warmup that would flip the verdict is not looked at.
  short = arm("norm:post/short", bowl(6.0, 1e-3), norm="post") + arm("norm:pre/short", good)
  assert v.claim_warmup(runs + short).verdict == v.claim_warmup(runs).verdict == NOT_REPRODUCED


def test_all_seeds_diverged_is_inconclusive():
  runs = norm_arms(bowl(4.6, 1e-3), bowl(4.6, 1e-3), bowl(4.6, 1e-3), bowl(4.6, 1e-3), diverged=RATES)
  for verdict in v.judge(runs):
    assert verdict.verdict == INCONCLUSIVE, verdict.claim


def test_smaller_rate_claim_every_way():
  runs = lambda post, pre, **kw: arm("norm:post/long", post, norm="post", **kw) + arm("norm:pre/long", pre)
  won = v.claim_smaller_rate(runs(bowl(4.7, 6e-4), bowl(4.6, 5e-3)))
  assert won.verdict == REPRODUCED and won.effect.diff == pytest.approx(math.log(6e-4 / 5e-3), abs=0.1)
  assert v.claim_smaller_rate(runs(bowl(4.7, 5e-3), bowl(4.6, 1e-3))).verdict == NOT_REPRODUCED
  assert v.claim_smaller_rate(runs(bowl(4.7, 2e-3), bowl(4.6, 2e-3), spread=0.001)).verdict == NOT_REPRODUCED
  # Post-LN's optimum at the smallest rate tried: not bracketed.
  assert v.claim_smaller_rate(runs(bowl(4.7, 1e-4), bowl(4.6, 3e-3))).verdict == INCONCLUSIVE
  # Post-LN never learns: its "optimum" is no rate.
  assert v.claim_smaller_rate(runs(FLAT, bowl(4.6, 3e-3))).verdict == INCONCLUSIVE


def test_sensitivity_claim_every_way():
  flat, steep = bowl(4.6, 3e-3, width=0.05), bowl(4.6, 3e-3, width=0.5)
  runs = lambda post, pre, **kw: arm("norm:post/long", post, norm="post", **kw) + arm("norm:pre/long", pre)
  assert v.claim_sensitivity(runs(steep, flat)).verdict == REPRODUCED
  assert v.claim_sensitivity(runs(flat, steep)).verdict == NOT_REPRODUCED
  assert v.claim_sensitivity(runs(flat, flat, spread=0.001)).verdict == NOT_REPRODUCED
  # Each post-LN seed with its own curvature: the seeds disagree about the sensitivity.
  noisy = []
  for seed, w in enumerate((0.02, 0.6, 0.1)):
    noisy += [curves.Run(("norm:post/long",), lr, seed, m, LN_V, norm="post", unigram=UNIGRAM)
              for lr, m in bowl(4.6, 3e-3, w).items()]
  assert v.claim_sensitivity(noisy + arm("norm:pre/long", flat)).verdict == INCONCLUSIVE
  # The committed study's mistake: post-LN flat on the plateau scores near zero; it never
  # learnt, so that says nothing ("less sensitive" would mean "never trains").
  plateau = v.claim_sensitivity(runs(FLAT, steep))
  assert plateau.verdict == INCONCLUSIVE and "does not learn" in " ".join(plateau.lines)
  # The table's sensitivity and the verdict's are one definition.
  judged = v.claim_sensitivity(runs(steep, flat))
  assert judged.effect.diff == pytest.approx(
      np.mean(list(curves.sensitivity(runs(steep, flat)[:15]).values()))
      - np.mean(list(curves.sensitivity(arm("norm:pre/long", flat)).values())))


# ----------------------------------------------------------------------------- diagnostics


def profile_runs(post_ratios, pre_ratios, init="xavier"):
  runs = []
  for norm, ratios in (("post", post_ratios), ("pre", pre_ratios)):
    for seed, r in enumerate(ratios):
      runs.append(curves.Run((f"init:{init}/{norm}",), 1e-3, seed, 4.6, LN_V, norm=norm, init=init,
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
  gpt2 = profile_runs([3.0, 3.2, 2.9], [1.0, 1.05, 0.95], "gpt2")
  assert v.claim_gradients(gpt2).verdict == INCONCLUSIVE


def test_residual_claim_is_strict_at_the_threshold():
  runs = lambda ratios: [curves.Run(("norm:pre/long",), 1e-3, s, 4.6, LN_V, resid_ratio_end=r)
                         for s, r in enumerate(ratios)]
  assert v.claim_residual(runs([2.0, 2.1, 1.9])).verdict == REPRODUCED
  assert v.claim_residual(runs([1.5, 1.5, 1.5])).verdict == INCONCLUSIVE  # at the threshold: no
  assert v.claim_residual(runs([1.5, 1.51, 1.49])).verdict == INCONCLUSIVE
  assert v.claim_residual(runs([1.1, 1.12, 1.08])).verdict == NOT_REPRODUCED


# ----------------------------------------------------------------------------- MLP


def test_matched_claim_uses_kaplans_few_percent():
  alike = sum((arm(f"mlp_matched:{r}", bowl(4.60 + 0.01 * i, 3e-3), spread=0.004 + 0.001 * i)
               for i, r in enumerate((2, 4, 8))), [])
  # The committed study's case: 0.04 nats apart (0.9 % of the loss) is alike by Kaplan's measure.
  assert v.claim_matched(alike).verdict == REPRODUCED
  apart = arm("mlp_matched:2", bowl(4.90, 3e-3)) + arm("mlp_matched:4", bowl(4.60, 3e-3), spread=0.004)
  verdict = v.claim_matched(apart)
  assert verdict.verdict == NOT_REPRODUCED and "r=2 - r=4" in " ".join(verdict.lines)
  noisy = arm("mlp_matched:2", bowl(4.63, 3e-3), shift=0.15) + arm("mlp_matched:4", bowl(4.60, 3e-3))
  assert v.claim_matched(noisy).verdict == INCONCLUSIVE
  assert v.claim_matched(arm("mlp_matched:4", bowl(4.6, 3e-3))).verdict == INCONCLUSIVE
  edge = arm("mlp_matched:2", {lr: 4.6 + 10 * lr for lr in RATES}) + arm("mlp_matched:4", bowl(4.60, 3e-3))
  assert v.claim_matched(edge).verdict == INCONCLUSIVE


def width(means, spreads=(0.004, 0.005, 0.006, 0.007), shifts=(0.0,) * 4):
  return sum((arm(f"mlp_width:{r}", bowl(m, 3e-3), spread=sp, shift=sh)
              for r, m, sp, sh in zip((1, 2, 4, 8), means, spreads, shifts)), [])


def test_width_claim_every_way():
  assert v.claim_width(width((4.80, 4.66, 4.61, 4.60))).verdict == REPRODUCED
  assert v.claim_width(width((4.80, 4.66, 4.75, 4.60))).verdict == NOT_REPRODUCED  # a step up
  assert v.claim_width(width((4.80, 4.76, 4.61, 4.60))).verdict == NOT_REPRODUCED  # returns grow
  assert v.claim_width(width((4.80, 4.66, 4.61, 4.60), shifts=(0.0, 0.3, 0.0, 0.3))).verdict == INCONCLUSIVE
  assert v.claim_width(width((4.80, 4.66))).verdict == INCONCLUSIVE  # fewer than three ratios


def test_swiglu_claim_every_way():
  ge = arm("mlp_width:4", bowl(4.61, 3e-3), spread=0.004)
  assert v.claim_swiglu(ge + arm("swiglu", bowl(4.55, 3e-3))).verdict == REPRODUCED
  assert v.claim_swiglu(ge + arm("swiglu", bowl(4.64, 3e-3))).verdict == NOT_REPRODUCED
  assert v.claim_swiglu(ge + arm("swiglu", bowl(4.611, 3e-3))).verdict == NOT_REPRODUCED
  assert v.claim_swiglu(ge + arm("swiglu", bowl(4.58, 3e-3), shift=0.2)).verdict == INCONCLUSIVE
  # At its own optimum: SwiGLU better at a different rate than GELU's best.
  assert v.claim_swiglu(ge + arm("swiglu", bowl(4.55, 1e-2))).verdict == REPRODUCED
  rising = {lr: 4.70 - 0.01 * i for i, lr in enumerate(RATES)}
  assert v.claim_swiglu(ge + arm("swiglu", rising)).verdict == INCONCLUSIVE


def test_depth_claim_every_way():
  base = arm("norm:post/long", bowl(4.65, 1e-3), norm="post") + arm("norm:pre/long", bowl(4.60, 3e-3), spread=0.004)
  deep = lambda post, shift=0.0: (arm("depth:post", bowl(post, 1e-3), norm="post", spread=0.006, shift=shift)
                             + arm("depth:pre", bowl(4.50, 3e-3), spread=0.003))
  assert v.claim_depth(base + deep(4.80)).verdict == REPRODUCED
  assert v.claim_depth(base + deep(4.40)).verdict == NOT_REPRODUCED
  assert v.claim_depth(base + deep(4.6, shift=0.3)).verdict == INCONCLUSIVE
  assert "cut" in " ".join(v.claim_depth(base).lines)


def test_verdicts_say_whether_they_survive_leaving_out_a_seed():
  good, bad = bowl(4.6, 1e-3), bowl(5.0, 1e-3)
  strong = v.judge(norm_arms(FLAT, good, good, good, shift=0.01))[0]
  assert strong.verdict == REPRODUCED and "survives" in strong.robustness
  # Three seeds, one of which carries the effect: without it the claim is undecided.
  runs = norm_arms(FLAT, good, good, good)
  runs = [r for r in runs if not (r.seed == 2 and r.arms == ("norm:post/none",))]
  runs += [curves.Run(("norm:post/none",), lr, 2, l, LN_V, norm="post", unigram=UNIGRAM)
           for lr, l in good.items()]
  weak = v.judge(runs)[0]
  assert "does not survive" in weak.robustness or weak.verdict == INCONCLUSIVE


# ----------------------------------------------------------------------------- partial data


@pytest.mark.parametrize("runs", [
    [],
    arm("norm:post/none", {1e-3: 4.6}, seeds=1, norm="post"),  # one rate, one seed
    norm_arms({1e-3: 4.6}, {3e-4: 4.6}, {}, {1e-3: 4.6}),  # missing rates and an empty arm
    norm_arms(bowl(4.6, 1e-3), bowl(4.6, 1e-3), bowl(4.6, 1e-3), bowl(4.6, 1e-3),
              diverged=RATES, seeds=2),  # everything diverged
    arm("mlp_width:1", {1e-3: float("nan")}) + arm("mlp_width:2", {}) + arm("swiglu", {1e-3: 4.5}, seeds=1),
    [curves.Run(("norm:pre/long",), 1e-3, 0, float("nan"), LN_V, resid_ratio_end=float("nan"))],
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
  from research import report as reporting
  write_cell(tmp_path, "a/lr0.001-s0", ["norm:post/none"], 1e-3, 0)
  write_cell(tmp_path, "a/lr0.01-s0", ["norm:post/none"], 1e-2, 0, status="diverged")
  write_cell(tmp_path, "b/lr0.001-s0", ["norm:post/long"], 1e-3, 0, diag=False)
  write_cell(tmp_path, "c/lr0.001-s0", ["swiglu"], 1e-3, 0, status="running")  # unfinished: left out
  path = report.write_report(str(tmp_path), str(tmp_path / "out"))
  text = open(path).read()
  assert "3 models, 1 diverged" in text
  assert "Training time measured: 0 minutes in 3 programs" in text
  assert reporting.measured_time([{"name": "a", "group": "g", "wall_time_s": 600.0},
                                  {"name": "b", "group": "g", "wall_time_s": 600.0},
                                  {"name": "c", "wall_time_s": 300.0}]).startswith(
      "Training time measured: 15 minutes in 2 programs")
  assert "| norm:post/none | 0.001 | 4.600 | 0/1 | no | 1.550 | 1/2 | 4.600 | 7.700 (1✕) |" in text
  results = json.load(open(tmp_path / "results.json"))  # beside the cells; the report in out
  assert {c["name"] for c in results["cells"]} == {"a/lr0.001-s0", "a/lr0.01-s0", "b/lr0.001-s0"}
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(ValueError, match="holds no cells"):
    report.write_report(str(empty))


def test_the_command_packs_the_cells_and_puts_the_report_apart(tmp_path):
  # python -m experiments.report --pack: the data in one place, REPORT.md and plots in --out.
  import subprocess
  import sys
  sweep, data, docs = tmp_path / "runs" / "sweep", tmp_path / "results" / "s-cpu", tmp_path / "docs" / "s-cpu"
  write_cell(sweep, "a/lr0.001-s0", ["norm:post/none"], 1e-3, 0)
  write_cell(sweep, "a/lr0.01-s0", ["norm:post/none"], 1e-2, 0, status="diverged")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  done = subprocess.run([sys.executable, "-m", "experiments.report", f"--sweep_dir={sweep}", f"--pack={data}",
                         f"--out={docs}"], capture_output=True, text=True, timeout=300, cwd=root)
  assert done.returncode == 0, done.stderr[-2000:]
  assert sorted(os.listdir(data)) == ["cells.jsonl", "results.json"]
  assert "REPORT.md" in os.listdir(docs) and not {"cells.jsonl", "results.json"} & set(os.listdir(docs))
  text = (docs / "REPORT.md").read_text()
  assert f"python -m experiments.report --sweep_dir={sweep} --pack={data} --out={docs}\n" in text
  assert f"python -m experiments.report --sweep_dir={data} --out={docs}\n" in text  # regenerates it
  assert "Read from the 2 cells of cells.jsonl." in text and "2 models, 1 diverged" in text
  assert [c["name"] for c in json.load(open(data / "results.json"))["cells"]] == ["a/lr0.001-s0", "a/lr0.01-s0"]
  # The regenerate line rebuilds the same REPORT.md, the command that produced the data kept.
  from experiments import report
  os.remove(docs / "REPORT.md")
  assert open(report.write_report(str(data), str(docs))).read() == text


def test_no_parabola_over_a_wide_bracket():
  # A neighbour 1e33 times away (a diverged rate) would fit a parabola far below every point.
  opt = curves.fit_optimum({1e-3: 5.5, 1e-2: 4.6, 1e30: 7.7})
  assert opt.bracketed and opt.lr == 1e-2 and opt.loss == 4.6
