"""The confirmatory norm x MLP study (experiments/studies/norm_mlp_confirm.py): unseen seeds, the one grid, the plan it froze, its committed cells and verdicts; its claim kinds (research/kinds.py: Contrast, on a Probe's first entry and bound too, Alike, NotRun) on synthetic results: reproduced, not reproduced, inconclusive, not powered."""

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from research import cells as cells_lib
from research import claims
from research import curves
from research import identity as rules_identity
from research import kinds
from research import registry
from research import report as reporting
from research import stats
from research import study as study_lib
from experiments.studies import norm_mlp_confirm as S

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMITTED = os.path.join(ROOT, "results", "norm_mlp_confirm-cpu")
EXPLORATORY = os.path.join(ROOT, "results", "norm_mlp-cpu")
R, NR, INC, NP = claims.REPRODUCED, claims.NOT_REPRODUCED, claims.INCONCLUSIVE, study_lib.NOT_POWERED
STUDY = S.STUDY


def test_no_seed_of_an_earlier_study():
  used = registry.used_seeds("norm_mlp_confirm")
  assert {0, 1, 2} <= used  # the check reads the committed studies
  for scale in STUDY.scales:
    sweep = registry.load("norm_mlp_confirm", scale)
    mine = {c.seed for c in sweep.cells} | {c.overrides["train.seed"] for c in sweep.cells}
    assert not mine & used, f"{scale}: seeds {sorted(mine & used)} were used before"
    assert not any("data.shuffle_seed" in c.overrides for c in sweep.cells)


def test_one_grid_for_both_norms_and_shared_rates_for_the_mlp_arms():
  sweep = STUDY.sweep("cpu")
  by, seeds = {}, {}
  for c in sweep.cells:
    by.setdefault(c.group, set()).add(c.learning_rate)
    seeds.setdefault(c.group, set()).add(c.seed)
  for g in ("post-none", "post-long", "pre-none", "pre-long"):
    assert by[g] == set(S.RATES)
  for g in ("swiglu", "matched2", "matched8"):
    assert by[g] <= by["pre-long"] and len(by[g]) >= 3
    assert seeds[g] <= seeds["pre-long"]  # paired by seed with GELU r = 4
  assert not any(c.refinable for c in sweep.cells)  # nothing added after the run
  assert "mlp:gelu4" in next(c for c in sweep.cells if c.group == "pre-long").arms
  assert registry.study_of({"name": "norm_mlp_confirm"}) == "norm_mlp_confirm"


def exploratory() -> tuple[list[dict], kinds.Data]:
  _, cells, _ = cells_lib.load(EXPLORATORY)
  return cells, kinds.Data.of(cells, (), cells_lib.to_run)


def test_the_grid_reaches_under_training_and_instability_in_the_exploratory_curves():
  # At the grid's top both norm arms are far above their optimum, post-LN on the unigram
  # plateau; the bottom is below every exploratory optimum by a factor 3 or more.
  cells, data = exploratory()
  for arm in (S.POST, S.PRE):
    s = curves.summary(data.runs(arm))
    assert S.RATES[0] * 3 <= s["optimum_lr"] <= S.RATES[-1] / 3
    top = curves.rate_curve(data.runs(arm))
    assert top[max(top)]["mean"] > s["optimum_loss"] + 0.5
  assert curves.rate_curve(data.runs(S.POST))[0.01]["mean"] > curves.unigram(data.runs(S.POST)) - 0.1


def test_the_grid_is_the_budgeted_plan():
  planned, seeds, level, family = STUDY.budget_plan("cpu")
  assert seeds == S.SEEDS and {a: len(STUDY.seeds_of("cpu", a)) for a in S.SEEDS} == S.SEEDS
  assert {c.plan.claim for c in planned if not c.powered} == set(STUDY.not_powered)
  assert family == 8 and level == pytest.approx(0.05 / 8)
  assert sum(S.COST[a] * n for a, n in seeds.items()) <= 120.0
  assert all(c.seeds >= 5 for c in planned if c.powered)
  text = "\n".join(STUDY.plan_lines("cpu"))
  assert "are the plan's" in text and "**not powered**" in text and "| 499 |" in text  # depth's cost
  # A grid that is not the plan says so.
  other = dataclasses.replace(STUDY, not_powered=STUDY.not_powered[:1])
  assert "**The grid differs from the plan**" in "\n".join(other.plan_lines("cpu"))


def sd(e: stats.Effect) -> float:
  return kinds.se_of(e) * math.sqrt(e.n)


def test_the_stated_spreads_and_costs_are_the_exploratory_studys():
  cells, data = exploratory()
  gelu = lambda c: dataclasses.replace(c, terms=tuple((a if a != S.GELU else "mlp_width:4", s) for a, s in c.terms),
                                       shared_rates=False)  # its arms share no rate there
  got = []
  for c in S.CLAIMS:
    if isinstance(getattr(c, "quantity", None), kinds.Probe):
      got.append(np.std(list(c.quantity.per_seed(data, c.needs()[0]).values()), ddof=1))
    elif isinstance(c, kinds.Contrast):
      got.append(sd(gelu(c).test(data).effect))
    elif isinstance(c, kinds.Alike):  # the larger of the two pairs' spreads
      got.append(max(sd(gelu(kinds.Contrast("", terms=((a, 1), (S.GELU, -1)))).test(data).effect) for a in c.arms))
    else:  # depth: the interaction's
      got.append(got[5])
  assert got == pytest.approx(S.SD, rel=1e-5)
  # The cost: each program's wall time over its base-shape model-steps (layers x width^2,
  # the MLP half a block), the short Xavier programs apart (one member: its compile shared).
  rel = lambda o: ((o.get("model.n_layer", 6) / 6) * (o.get("model.d_model", 64) / 64) ** 2
                   * (1 + 0.5 * (o.get("model.mlp_ratio", 4.0) - 4) / 6))
  wall, steps, xavier = {}, {}, {}
  for c in cells:
    g = c["group"]
    if g.startswith("xavier"):
      xavier.setdefault(g, []).append(c["wall_time_s"])
      continue
    wall[g] = max(wall.get(g, 0.0), c["wall_time_s"])
    steps[g] = steps.get(g, 0.0) + c["steps"] * rel(c["overrides"])
  per_step = sum(wall.values()) / sum(steps.values())
  per_member = max(max(w) / len(w) for w in xavier.values())
  for arm in S.SEEDS:
    o = {**STUDY.grid("cpu").shared, **next(a.overrides for a in STUDY.arms if a.name == arm),
         **STUDY.grid("cpu").arm_overrides.get(arm, {})}
    rates = STUDY.grid("cpu").arm_rates.get(arm, S.RATES)
    want = per_member / 60 if arm.startswith("init:xavier") else len(rates) * 450 * rel(o) * per_step / 60
    assert S.COST[arm] == pytest.approx(want, rel=1e-5), arm
  assert S.COST["deep-post"] == pytest.approx(2 * S.COST[S.POST], rel=1e-5)


def test_the_study_trains_the_committed_cells():
  committed = json.load(open(os.path.join(COMMITTED, "sweep.json")))["cells"]
  mine = {c.name: c for c in registry.load("norm_mlp_confirm", "cpu").cells}
  assert set(mine) == {c["name"] for c in committed}
  for c in committed:
    m = mine[c["name"]]
    assert (m.overrides, list(m.arms), m.seed, m.group, m.refinable) == (
        c["overrides"], c["arms"], c["seed"], c["group"], c["refinable"]), c["name"]


def test_re_judging_the_committed_cells_gives_the_recorded_verdicts():
  before = json.load(open(os.path.join(COMMITTED, reporting.BEFORE)))
  _, cells, _ = cells_lib.load(COMMITTED)
  now = STUDY.judge(cells, robust=False)
  assert [reporting._figures(v) for v in now] == [reporting._figures(v) for v in before["verdicts"]]
  assert reporting.reexpressed(before, now, ["Rules: re-judged"])[0].startswith("Rules: **re-expressed, same verdicts.**")


# ----------------------------------------------------------------------------- synthetic results


INIT, UNIGRAM = 7.76, 6.27


def record(arms, lr, seed, final, norm="pre", init=None):
  return {"name": f"{arms[0]}-{lr:g}-{seed}", "arms": list(arms), "seed": seed, "learning_rate": lr,
          "status": "completed", "final_val_loss": final, "initial_val_loss": INIT, "unigram_val_loss": UNIGRAM,
          "overrides": {"train.learning_rate": lr, "train.seed": seed, "model.norm": norm}, "init": init or {}}


def synthetic(n_seeds=8, noise=0.01, post_pen=0.5, pre_pen=0.0, post_curv=0.3, pre_curv=0.1, post_opt=1e-3,
              pre_opt=5e-3, post_grad=3.0, pre_grad=1.0, resid=3.6, swiglu=-0.1, matched=0.0, seed=0,
              cell_noise=0.002, init_noise=0.1):
  """Cells of every arm: loss = best + curvature * log(lr / opt)^2, a shared per-seed shift and
  per-arm-seed noise; step-0 profiles (last / first) for the Xavier arms."""
  rng = np.random.default_rng(seed)
  seeds = range(100, 100 + n_seeds)
  shift = {s: rng.normal(0, 0.05) for s in seeds}
  out = []

  def arm(arms, best, opt, curv, rates, norm="pre"):
    for s in seeds:
      b = best + shift[s] + rng.normal(0, noise)
      out.extend(record(arms, lr, s, b + curv * math.log(lr / opt) ** 2 + rng.normal(0, cell_noise), norm,
                        {"grad_mlp": [1.0, 1.0], "residual_norm": [1.0, 1.0, 1.2]}) for lr in rates)

  arm((S.PRE, "init:gpt2/pre", S.GELU), 4.6, pre_opt, pre_curv, S.RATES)
  arm((S.PRE0,), 4.6 + pre_pen, pre_opt, pre_curv, S.RATES)
  arm((S.POST, "init:gpt2/post"), 4.9, post_opt, post_curv, S.RATES, "post")
  arm((S.POST0,), 4.9 + post_pen, post_opt, post_curv, S.RATES, "post")
  arm(("swiglu",), 4.6 + swiglu, pre_opt, pre_curv, S.SHARED)
  for m in (S.M2, S.M8):
    arm((m,), 4.6 + matched, pre_opt, pre_curv, S.SHARED)
  g = lambda x: x * math.exp(rng.normal(0, init_noise))
  for s in seeds:
    out.append(record((S.XPOST,), 1e-4, s, 7.7, "post", {"grad_mlp": [1.0, g(post_grad)]}))
    out.append(record((S.XPRE,), 1e-4, s, 7.7, "pre", {"grad_mlp": [1.0, g(pre_grad)],
                                                          "residual_norm": [0.5, 1.0, g(resid)]}))
  return out


def verdicts(cells, robust=False, study=STUDY):
  return {v.claim: v for v in study.judge(cells, robust)}


JUDGED = tuple(c.claim for c in S.CLAIMS[:8])
UNPOWERED = STUDY.not_powered


def test_every_judged_rule_comes_out_reproduced():
  v = verdicts(synthetic())
  for claim in JUDGED:
    assert v[claim].verdict == R, (claim, v[claim].markdown())
  for claim in UNPOWERED:  # however strong their figures: the plan declared them
    assert v[claim].verdict == NP
  assert "reported, not judged" in " ".join(v[UNPOWERED[0]].lines)
  assert "At each shared rate" in " ".join(v[UNPOWERED[0]].lines)


def test_every_judged_rule_comes_out_not_reproduced():
  v = verdicts(synthetic(post_pen=-0.4, pre_pen=0.4, post_curv=0.05, pre_curv=0.3, post_opt=1e-2, pre_opt=1e-3,
                         post_grad=0.8, pre_grad=0.35, resid=1.0))
  for claim in JUDGED:
    assert v[claim].verdict == NR, (claim, v[claim].markdown())
  assert all(v[c].verdict == NP for c in UNPOWERED)


def test_every_judged_rule_comes_out_inconclusive_when_the_seeds_cannot_decide():
  v = verdicts(synthetic(n_seeds=3, noise=0.4, post_pen=0.1, pre_pen=0.05, post_curv=0.12, pre_curv=0.1,
                         post_opt=2e-3, pre_opt=3e-3, post_grad=1.5, pre_grad=1.2, resid=1.5, cell_noise=0.1,
                         init_noise=0.4, seed=3))
  for claim in JUDGED:
    assert v[claim].verdict == INC, (claim, v[claim].markdown())


def test_the_mlp_kinds_decide_where_the_plan_would_power_them():
  # Contrast on shared rates and Alike (relative margin): all three ways when powered.
  powered = dataclasses.replace(STUDY, not_powered=UNPOWERED[2:])
  sw, m = UNPOWERED[:2]
  v = verdicts(synthetic(swiglu=-0.1, matched=0.0), study=powered)
  assert v[sw].verdict == R and v[m].verdict == R
  v = verdicts(synthetic(swiglu=0.2, matched=0.5), study=powered)
  assert v[sw].verdict == NR and v[m].verdict == NR
  v = verdicts(synthetic(n_seeds=3, noise=0.4, cell_noise=0.1, swiglu=-0.04, matched=0.05, seed=3), study=powered)
  assert v[sw].verdict == INC and v[m].verdict == INC
  assert "Its arms were cut by the plan" in " ".join(v[UNPOWERED[2]].lines) and v[UNPOWERED[2]].effect is None


def test_none_within_a_margin_is_not_reproduced():
  # Post-LN's penalty equivalent to none: not reproduced (an effect too small to matter).
  v = verdicts(synthetic(post_pen=0.0))
  assert v["without warmup, post-LN is penalised"].verdict == NR
  assert v["without warmup, pre-LN is not penalised"].verdict == R


def test_profile_first_layer_and_growth_bound():
  cells = synthetic()
  data = STUDY.data(cells)
  resid = S.CLAIMS[2]
  t = resid.test(data)  # residual_norm [0.5, 1.0, r]: over layer 1, not the embedding's 0.5
  assert t.effect.diff == pytest.approx(np.mean(list(resid.quantity.per_seed(data, S.XPRE).values())))
  assert t.effect.diff == pytest.approx(math.log(3.6 / 1.5), abs=0.1)
  # Growth that does not pass the bound: 1.3 > 1 but below 1.5, decisively.
  t = dataclasses.replace(S.CLAIMS[0]).test(STUDY.data(synthetic(post_grad=1.2, init_noise=0.01)))
  v = claims.decide_family([t])[0][1]
  assert v.verdict == NR and "(reported, not judged)" in " ".join(v.lines)


def test_guards_make_a_claim_inconclusive():
  # Post-LN with warmup on the plateau: the warmup claims about post-LN cannot be judged.
  cells = [dict(c, final_val_loss=UNIGRAM + 0.2) if S.POST in c["arms"] else c for c in synthetic()]
  v = verdicts(cells)
  assert v["without warmup, post-LN is penalised"].verdict == INC
  assert "Does not learn" in " ".join(v["without warmup, post-LN is penalised"].lines)
  assert v["post-LN is more sensitive to the learning rate"].verdict == INC
  # No runs at all: every judged claim is inconclusive for want of runs.
  v = verdicts([])
  assert all(v[c].verdict == INC for c in JUDGED) and all(v[c].verdict == NP for c in UNPOWERED)


@dataclasses.dataclass(frozen=True)
class Fixed(kinds.Claim):
  """A claim whose test is given: its p for it, none against."""
  p: float = 0.01

  def needs(self):
    return ()

  def quantity_text(self):
    return "x"

  def unit(self):
    return "nats"

  def rule(self):
    return "rule"

  def test(self, data):
    return claims.Test(self.key, self.claim, self.rule(), [], stats.one_sample([1.0, 1.1]), "x", self.p, 1.0,
                       seeds=(1, 2))


def test_one_holm_correction_over_the_family_the_unpowered_outside_it():
  one = lambda *cs, np_=(): dataclasses.replace(STUDY, claims=cs, not_powered=np_, spread={})
  # Alone, p = 0.01 decides; in a family of 8 such tests Holm holds it to 0.05 / 8.
  assert one(Fixed("a")).judge([], robust=False)[0].verdict == R
  out = one(*(Fixed(k, p=0.01 + 0.001 * i) for i, k in enumerate("abcdefgh"))).judge([], robust=False)
  assert all(v.verdict == INC for v in out)
  assert "Holm over the family of 8 tests" in " ".join(out[0].lines)
  a, b, c = one(Fixed("a"), Fixed("b", p=0.5), Fixed("c", p=0.5), np_=("b", "c")).judge([], robust=False)
  assert a.verdict == R and b.verdict == c.verdict == NP


def test_leave_one_seed_out_only_from_five_seeds():
  v = verdicts(synthetic(n_seeds=3), robust=True)
  assert "uninformative at 3 seeds" in v[JUDGED[3]].robustness
  v = verdicts(synthetic(n_seeds=6), robust=True)
  assert "survives leaving out any one seed" in v[JUDGED[3]].robustness
  assert not v[UNPOWERED[0]].robustness


def test_a_sweep_records_the_study_file_as_its_rules(tmp_path):
  from research import runner as sweep_lib
  sweep_lib.write_index(STUDY.sweep("smoke"), str(tmp_path), {})
  index = json.load(open(tmp_path / "sweep.json"))
  assert index["study"] == "norm_mlp_confirm"
  for name in ("STUDY", "judge", "decide_family", "Contrast", "Alike", "NotRun", "holm"):
    assert name in index["rules"]["definitions"]
  assert index["rules"]["sha256"] == rules_identity.rules_version("norm_mlp_confirm")["sha256"]


def test_the_report_prints_the_plan_before_the_verdicts_and_the_code(tmp_path):
  from experiments import report
  from research import runner as sweep_lib
  head = sweep_lib.provenance.code_version()
  for i, c in enumerate(c for c in synthetic(n_seeds=2) if c["arms"][0] in (S.PRE, S.POST)):
    d = tmp_path / "sweep" / c["name"].replace(":", "-").replace("/", "-")
    d.mkdir(parents=True)
    code = head if i else {"commit": "f" * 40, "clean": False}
    (d / "cell.json").write_text(json.dumps({**{k: c[k] for k in ("name", "arms", "seed", "overrides")},
                                             "group": c["arms"][0], "code": code}))
    (d / "summary.json").write_text(json.dumps({
        "status": "completed", "steps": 10, "final_val_loss": c["final_val_loss"], "unigram_val_loss": UNIGRAM,
        "initial_val_loss": INIT, "n_params": 1000, "wall_time_s": 1.0}))
  sweep_lib.write_index(STUDY.sweep("smoke"), str(tmp_path / "sweep"), {})
  text = open(report.write_report(str(tmp_path / "sweep"), str(tmp_path / "out"))).read()
  assert text.index("**Confirmatory study.") < text.index("## Power plan") < text.index("## Verdicts")
  assert "Holm over the family" in text and f"**{NP}.**" in text and "not powered before the run" in text
  assert "Rules: judged with the rules fixed before the run" in text
  assert f"commit `{head['commit']}`" in text
  assert "**uncommitted changes at run time**, **not in this repository's history**" in text


def test_the_exploratory_report_names_itself_exploratory():
  text = open(os.path.join(ROOT, "docs", "studies", "norm_mlp-cpu", "REPORT.md")).read()
  assert ", exploratory:" in text.splitlines()[2]  # the opening; the design line heads the appendix
  assert "\n**Exploratory study. Its rules were revised after its data" in text
  assert registry.design("norm_mlp").startswith("**Exploratory study. Its rules were revised")
  assert registry.design("proxies").startswith("**Exploratory: the first ladder")  # its STUDY's


def test_the_overrides_are_the_configs_fields():
  from andrea_jax import model, step
  from research import sweep as base
  for scale in STUDY.scales:
    for members in base.groups(STUDY.sweep(scale).cells).values():
      config = registry.group_config("tiny", members[0].overrides)
      model.ModelConfig(**config.model)
      step.TrainConfig(**config.train)
