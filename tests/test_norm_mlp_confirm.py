"""The confirmatory norm x MLP study before its run: unseen seeds, the one grid, the frozen plan, and every rule on synthetic results (reproduced, not reproduced, inconclusive, not powered)."""

import json
import math
import os

import numpy as np
import pytest

from research import curves
from research import identity as rules_identity
from research import stats
from research import registry
from experiments.studies.norm_mlp_confirm import grid
from experiments.studies.norm_mlp_confirm import plan as plan_lib
from experiments.studies.norm_mlp_confirm import rules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
R, NR, INC, NP = "Reproduced", "Not reproduced", "Inconclusive", rules.NOT_POWERED_VERDICT


def test_no_seed_of_an_earlier_study():
  used = registry.used_seeds("norm_mlp_confirm")
  assert {0, 1, 2} <= used  # the check reads the committed studies
  for scale in grid.SCALES:
    sweep = grid.get_sweep(scale)
    mine = {c.seed for c in sweep.cells} | {c.overrides["train.seed"] for c in sweep.cells}
    assert not mine & used, f"{scale}: seeds {sorted(mine & used)} were used before"
    assert not any("data.shuffle_seed" in c.overrides for c in sweep.cells)


def test_one_grid_for_both_norms_and_shared_rates_for_the_mlp_arms():
  sweep = grid.get_sweep("cpu")
  by = {}
  for c in sweep.cells:
    by.setdefault(c.group, set()).add(c.learning_rate)
  for g in ("post-none", "post-long", "pre-none", "pre-long"):
    assert by[g] == set(grid.RATES)
  for g in ("swiglu", "matched2", "matched8"):
    assert by[g] <= by["pre-long"] and len(by[g]) >= 3
  assert not any(c.refinable for c in sweep.cells)  # nothing added after the run
  seeds = lambda g: {c.seed for c in sweep.cells if c.group == g}
  for g in ("swiglu", "matched2", "matched8"):
    assert seeds(g) <= seeds("pre-long")  # paired by seed with GELU r = 4
  assert "mlp:gelu4" in next(c for c in sweep.cells if c.group == "pre-long").arms
  assert registry.study_of({"name": "norm_mlp_confirm"}) == "norm_mlp_confirm"


def test_the_grid_reaches_under_training_and_instability_in_the_exploratory_curves():
  # The exploratory curves (docs/results/norm_mlp-cpu): at the grid's top both norm arms are
  # far above their optimum, and post-LN is on the unigram plateau; the bottom is below
  # every exploratory optimum by a factor 3 or more.
  runs, _ = plan_lib.exploratory_runs()
  arms = curves.by_arm(runs)
  u = curves.unigram(runs)
  for arm in ("norm:post/long", "norm:pre/long"):
    s = curves.summary(arms[arm])
    assert grid.RATES[0] * 3 <= s["optimum_lr"] <= grid.RATES[-1] / 3
    top = curves.rate_curve(arms[arm])
    highest = max(top)
    assert top[highest]["mean"] > s["optimum_loss"] + 0.5
  post = curves.rate_curve(arms["norm:post/long"])
  assert post[0.01]["mean"] > u - 0.1  # the plateau


def test_the_frozen_plan_is_the_plan():
  p = plan_lib.compute()
  assert set(rules.NOT_POWERED) == set(p.not_powered)
  assert {g: n for g, n in grid.SEEDS.items()} == p.seeds
  assert p.total_minutes <= plan_lib.BUDGET_MINUTES
  assert all(c.seeds >= plan_lib.MIN_SEEDS for c in p.claims if c.powered)
  text = "\n".join(plan_lib.lines(p))
  assert "**not powered**" in text and "Depth" in text and "12-layer" in text


def test_a_sweep_records_the_confirmatory_rules(tmp_path):
  from research import runner as sweep_lib
  sweep_lib.write_index(grid.get_sweep("smoke"), str(tmp_path), {})
  index = json.load(open(tmp_path / "sweep.json"))
  assert index["study"] == "norm_mlp_confirm"
  recorded = index["rules"]["definitions"]
  for name in ("judge", "family", "NOT_POWERED", "REVISIONS", "holm", "check_warmup_pre"):
    assert name in recorded
  assert index["rules"]["sha256"] == rules_identity.rules_version("norm_mlp_confirm")["sha256"]


# ----------------------------------------------------------------------------- synthetic results


INIT = 7.76
UNIGRAM = 6.27


def synthetic(n_seeds=8, noise=0.01, post_pen=0.5, pre_pen=0.0, post_curv=0.3, pre_curv=0.1,
              post_opt=1e-3, pre_opt=5e-3, post_grad=3.0, pre_grad=1.0, resid=3.6,
              swiglu=-0.1, matched=0.0, seed=0, cell_noise=0.002,
              init_noise=0.1):
  """Runs of every confirmatory arm: loss = best + curvature * log(lr / opt)^2 per arm, a
  shared per-seed shift, and per-arm-seed noise; step-0 ratios for the Xavier arms."""
  rng = np.random.default_rng(seed)
  seeds = range(grid.SEED_BASE, grid.SEED_BASE + n_seeds)
  shift = {s: rng.normal(0, 0.05) for s in seeds}
  runs = []

  def arm(arms, best, opt, curv, rates, norm="pre"):
    for s in seeds:
      b = best + shift[s] + rng.normal(0, noise)
      for lr in rates:
        loss = b + curv * math.log(lr / opt) ** 2 + rng.normal(0, cell_noise)
        runs.append(curves.Run(arms, lr, s, loss, INIT, norm=norm, unigram=UNIGRAM,
                               resid_ratio_end=1.25))

  base = 4.6
  arm(("norm:pre/long", "init:gpt2/pre", "mlp:gelu4"), base, pre_opt, pre_curv, grid.RATES)
  arm(("norm:pre/none",), base + pre_pen, pre_opt, pre_curv, grid.RATES)
  arm(("norm:post/long", "init:gpt2/post"), base + 0.3, post_opt, post_curv, grid.RATES, "post")
  arm(("norm:post/none",), base + 0.3 + post_pen, post_opt, post_curv, grid.RATES, "post")
  arm(("swiglu",), base + swiglu, pre_opt, pre_curv, grid.SHARED_RATES)
  for r in (2, 8):
    arm((f"mlp_matched:{r}",), base + matched, pre_opt, pre_curv, grid.SHARED_RATES)
  for s in seeds:
    g = lambda x: x * math.exp(rng.normal(0, init_noise))
    runs.append(curves.Run(("init:xavier/post",), 1e-4, s, 7.7, INIT, norm="post", init="xavier",
                           grad_ratio_init=g(post_grad), unigram=UNIGRAM))
    runs.append(curves.Run(("init:xavier/pre",), 1e-4, s, 7.7, INIT, norm="pre", init="xavier",
                           grad_ratio_init=g(pre_grad), resid_ratio_init=g(resid), unigram=UNIGRAM))
  return runs


def verdicts(runs, robust=False):
  return {v.claim: v for v in rules.judge(runs, robust)}


CLAIMS = {t.__name__: t for t in rules.CHECKS}
JUDGED = ("at init under Xavier, post-LN's gradient grows toward the output",
          "at init under Xavier, pre-LN's gradient is nearly flat",
          "at init under Xavier, pre-LN's residual stream grows with depth",
          "without warmup, post-LN is penalised", "without warmup, pre-LN is not penalised",
          "post-LN's warmup penalty exceeds pre-LN's",
          "post-LN is more sensitive to the learning rate", "post-LN needs a smaller learning rate")
UNPOWERED = ("SwiGLU beats GELU at equal size", "parameter-matched MLP ratios perform alike",
             "post-LN's trouble grows with depth")


def test_every_judged_rule_comes_out_reproduced():
  v = verdicts(synthetic())
  for claim in JUDGED:
    assert v[claim].verdict == R, (claim, v[claim].markdown())
  for claim in UNPOWERED:  # however strong their figures: the plan declared them
    assert v[claim].verdict == NP
  assert "reported, not judged" in " ".join(v[UNPOWERED[0]].lines)
  assert "at each shared rate" in " ".join(v[UNPOWERED[0]].lines)


def test_every_judged_rule_comes_out_not_reproduced():
  v = verdicts(synthetic(post_pen=-0.4, pre_pen=0.4, post_curv=0.05, pre_curv=0.3,
                         post_opt=1e-2, pre_opt=1e-3, post_grad=0.8, pre_grad=0.35, resid=1.0))
  for claim in JUDGED:
    assert v[claim].verdict == NR, (claim, v[claim].markdown())
  for claim in UNPOWERED:
    assert v[claim].verdict == NP


def test_every_judged_rule_comes_out_inconclusive_when_the_seeds_cannot_decide():
  v = verdicts(synthetic(n_seeds=3, noise=0.4, post_pen=0.1, pre_pen=0.05, post_curv=0.12,
                         pre_curv=0.1, post_opt=2e-3, pre_opt=3e-3, post_grad=1.5, pre_grad=1.2,
                         resid=1.5, cell_noise=0.1, init_noise=0.4, seed=3))
  for claim in JUDGED:
    assert v[claim].verdict == INC, (claim, v[claim].markdown())


def test_the_mlp_rules_decide_where_the_plan_would_power_them(monkeypatch):
  # Not powered in this plan; were they powered, their rules decide all three ways.
  monkeypatch.setattr(rules, "NOT_POWERED", ("depth",))
  sw, m = UNPOWERED[:2]
  v = verdicts(synthetic(swiglu=-0.1, matched=0.0))
  assert v[sw].verdict == R and v[m].verdict == R
  v = verdicts(synthetic(swiglu=0.2, matched=0.5))
  assert v[sw].verdict == NR and v[m].verdict == NR
  v = verdicts(synthetic(n_seeds=3, noise=0.4, cell_noise=0.1, swiglu=-0.04, matched=0.05, seed=3))
  assert v[sw].verdict == INC and v[m].verdict == INC


def test_equivalence_halves_say_same_when_within_the_margin():
  # Post-LN's penalty equivalent to none: not reproduced (an effect too small to matter).
  v = verdicts(synthetic(post_pen=0.0))
  assert v["without warmup, post-LN is penalised"].verdict == NR
  assert v["without warmup, pre-LN is not penalised"].verdict == R


def test_guards_make_a_claim_inconclusive():
  # Post-LN with warmup on the plateau: the warmup claims about post-LN cannot be judged.
  runs = [r if "norm:post/long" not in r.arms else
          curves.Run(r.arms, r.lr, r.seed, UNIGRAM + 0.2, INIT, norm="post", unigram=UNIGRAM)
          for r in synthetic()]
  v = verdicts(runs)
  assert v["without warmup, post-LN is penalised"].verdict == INC
  assert "does not learn" in " ".join(v["without warmup, post-LN is penalised"].lines)
  assert v["post-LN is more sensitive to the learning rate"].verdict == INC
  # No runs at all: every judged claim is inconclusive for want of runs.
  v = verdicts([])
  assert all(v[c].verdict == INC for c in JUDGED) and all(v[c].verdict == NP for c in UNPOWERED)


def test_one_holm_correction_over_the_family(monkeypatch):
  def fake(key, p):
    return lambda runs: rules.Test(key, key, "rule", [], stats.one_sample([1.0, 1.1]), "x",
                                   p_for=p, p_against=1.0, seeds=(1, 2))
  # Alone, p = 0.01 decides; in a family of 8 such tests Holm holds it to 0.05 / 8.
  monkeypatch.setattr(rules, "CHECKS", (fake("a", 0.01),))
  assert rules.judge([], robust=False)[0].verdict == R
  monkeypatch.setattr(rules, "CHECKS", tuple(fake(k, 0.01 + 0.001 * i) for i, k in enumerate("abcdefgh")))
  out = rules.judge([], robust=False)
  assert all(v.verdict == INC for v in out)
  assert "Holm over the family of 8 tests" in " ".join(out[0].lines)
  # Not-powered claims are outside the family: they do not dilute it.
  monkeypatch.setattr(rules, "CHECKS", (fake("a", 0.01), fake("swiglu", 0.5), fake("matched", 0.5)))
  a, sw, m = rules.judge([], robust=False)
  assert a.verdict == R and sw.verdict == m.verdict == NP


def test_leave_one_seed_out_only_from_five_seeds():
  v = verdicts(synthetic(n_seeds=3), robust=True)
  assert "uninformative at 3 seeds" in v[JUDGED[3]].robustness
  v = verdicts(synthetic(n_seeds=6), robust=True)
  assert "survives leaving out any one seed" in v[JUDGED[3]].robustness
  assert not v[UNPOWERED[0]].robustness


def test_the_exploratory_data_under_the_frozen_rules_runs():
  # The frozen rules on the exploratory study (3 seeds; its MLP arms under other names):
  # the init claims come from Xavier's own step-0 profiles.
  runs, _ = plan_lib.exploratory_runs()
  v = verdicts(runs)
  assert v["at init under Xavier, pre-LN's residual stream grows with depth"].effect.n == 3
  assert v["at init under Xavier, pre-LN's gradient is nearly flat"].verdict == NR  # 0.35: falls
  assert v[UNPOWERED[0]].verdict == NP


# ----------------------------------------------------------------------------- the report


def write_cell(root, path, arms, lr, seed, norm, final, code):
  d = root / path
  d.mkdir(parents=True)
  (d / "cell.json").write_text(json.dumps({
      "name": path, "arms": arms, "seed": seed, "group": path.split("/")[0], "code": code,
      "overrides": {"train.learning_rate": lr, "model.norm": norm, "train.seed": seed}}))
  (d / "summary.json").write_text(json.dumps({
      "status": "completed", "steps": 10, "final_val_loss": final, "unigram_val_loss": UNIGRAM,
      "initial_val_loss": INIT, "n_params": 1000, "wall_time_s": 1.0}))
  (d / "diagnostics.jsonl").write_text(json.dumps({
      "step": 0, "loss": INIT, "grad_attn": [1.0, 1.2], "grad_mlp": [1.0, 1.3],
      "residual_norm": [1.0, 1.0, 2.0]}) + "\n")


def test_the_report_prints_the_plan_beside_the_verdicts_and_the_code(tmp_path):
  from experiments import report
  from research import runner as sweep_lib
  head = sweep_lib.provenance.code_version()
  for i, r in enumerate(r for r in synthetic(n_seeds=2) if r.arms[0] in ("norm:pre/long", "norm:post/long")):
    code = head if i else {"commit": "f" * 40, "clean": False}
    write_cell(tmp_path / "sweep", f"{r.arms[0].split(':')[1].replace('/', '-')}/lr{r.lr:g}-s{r.seed}",
               list(r.arms), r.lr, r.seed, r.norm, r.final, code)
  sweep_lib.write_index(grid.get_sweep("smoke"), str(tmp_path / "sweep"), {})
  text = open(report.write_report(str(tmp_path / "sweep"), str(tmp_path / "out"))).read()
  assert text.index("**Confirmatory study.**") < text.index("## Pre-registered plan") < text.index("## Verdicts")
  assert "## Rules revised after the exploratory data" in text and "Holm over the family" in text
  assert "**not powered**" in text and f"**{NP}.**" in text
  assert "Rules: judged with the rules fixed before the run" in text
  assert f"commit `{head['commit']}`" in text
  assert "**uncommitted changes at run time**, **not in this repository's history**" in text
  results = json.load(open(tmp_path / "out" / "results.json"))
  assert results["plan"]["not_powered"] == list(rules.NOT_POWERED)


def test_the_exploratory_report_names_itself_exploratory():
  text = open(os.path.join(ROOT, "docs", "results", "norm_mlp-cpu", "REPORT.md")).read()
  assert text.splitlines()[2].startswith("**Exploratory study.** Its rules were revised after its data")
  assert registry.design("norm_mlp").startswith("**Exploratory study.**")
  assert registry.design("proxies").startswith("**Exploratory: the first ladder")  # its STUDY's


def test_the_overrides_are_the_configs_fields():
  from andrea_jax import model, step
  from research import runner as sweep_lib
  from research import sweep as base
  for scale in grid.SCALES:
    sweep = grid.get_sweep(scale)
    for members in base.groups(sweep.cells).values():
      config = registry.group_config(sweep.base_config, members[0].overrides)
      model.ModelConfig(**config.model)
      step.TrainConfig(**config.train)

