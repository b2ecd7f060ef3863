"""The norms study (experiments/studies/norms.py, issue 59): fresh seeds, every cell's config builds with the arm's norm switches, the grid is its budgeted plan, the claims' margins and sources as stated, the stated spreads from the exploratory cells; its probe contrast on synthetic results: reproduced, not reproduced, inconclusive."""

import math
import os

import jax
import numpy as np
import pytest

from andrea_jax import errors, model, step
from experiments.studies import norms as S
from experiments.studies import norm_mlp_confirm
from research import cells as cells_lib
from research import claims
from research import curves
from research import kinds
from research import ladder
from research import registry
from research import sweep as base

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDY = S.STUDY
R, NR, INC = claims.REPRODUCED, claims.NOT_REPRODUCED, claims.INCONCLUSIVE
# Seeds other studies hold: committed ones (used_seeds), and those planned beside this one.
TAKEN = {*range(1000, 1003), *range(1100, 1152), *range(1200, 1300), *range(1600, 1604)}


def test_no_seed_of_an_earlier_study():
  used = registry.used_seeds("norms")
  assert {0, 1, 2} <= used  # the check reads the committed studies
  for scale in STUDY.scales:
    sweep = registry.load("norms", scale)
    mine = {c.seed for c in sweep.cells} | {c.overrides["train.seed"] for c in sweep.cells}
    assert not mine & (used | TAKEN), f"{scale}: seeds {sorted(mine & (used | TAKEN))} were used before"
    assert not any("data.shuffle_seed" in c.overrides for c in sweep.cells)
  assert registry.study_of({"name": "norms"}) == "norms"


NORMS = {S.PRE: ("pre", "layernorm"), S.PERI: ("peri", "layernorm"), S.POST: ("post", "layernorm"),
         S.RMS: ("pre", "rmsnorm"), S.DYT: ("pre", "dyt"), S.POST16: ("post", "layernorm"),
         S.DEEP16: ("deepnorm", "layernorm")}


@pytest.mark.parametrize("scale", ["cpu", "smoke"])
def test_every_cell_builds_with_its_arms_norm(scale):
  deep, shallow = (16, 8) if scale == "cpu" else (3, 2)
  groups = base.groups(STUDY.sweep(scale).cells)
  assert len(groups) == len(NORMS)
  for members in groups.values():
    c = members[0]
    config = registry.group_config("tiny", c.overrides)
    cfg = model.ModelConfig(**config.model)
    step.TrainConfig(**config.train)
    assert (cfg.norm, cfg.norm_type) == NORMS[c.arms[0]], c.group
    assert cfg.n_layer == (deep if c.arms[0] in S.DEEP else shallow)
    assert (cfg.d_model, cfg.n_head) == ((64, 2) if scale == "cpu" else (32, 2))
    for m in members:  # every member's overrides are its group's but rate and seed
      assert {k: v for k, v in m.overrides.items() if k not in ("train.learning_rate", "train.seed")} == \
          {k: v for k, v in c.overrides.items() if k not in ("train.learning_rate", "train.seed")}
    if scale == "cpu":
      assert {m.learning_rate for m in members} == set(S.RATES) and not any(m.refinable for m in members)
      assert c.overrides["train.steps"] == S.STEPS and c.overrides["train.warmup_steps"] == 60
      assert c.overrides["diagnostics.every"] == S.STEPS  # the end probe the residual claim reads


def test_the_arms_share_their_weights_at_init():
  # The paired design's premise: the placements and norm types draw the same matrices.
  tiny = dict(vocab_size=64, block_size=8, n_layer=2, d_model=16, n_head=2)
  draw = lambda **o: model.init_params(model.ModelConfig(**tiny, **o), jax.random.PRNGKey(1700))
  ref = draw()
  for norm, norm_type in {v for v in NORMS.values() if v[0] != "deepnorm"}:
    p = draw(norm=norm, norm_type=norm_type)
    for name in ("w_qkv", "w_out"):
      np.testing.assert_array_equal(p["blocks"]["attn"][name], ref["blocks"]["attn"][name])
    np.testing.assert_array_equal(p["wte"], ref["wte"])


def test_the_grid_is_the_budgeted_plan_within_three_hours():
  planned, seeds, level, family = STUDY.budget_plan("cpu")
  assert seeds == S.SEEDS and {a: len(STUDY.seeds_of("cpu", a)) for a in S.SEEDS} == S.SEEDS
  assert {c.plan.claim for c in planned if not c.powered} == set(STUDY.not_powered) == {S.CLAIMS[-1].claim}
  assert family == 7 and level == pytest.approx(0.05 / 7)
  assert all(c.seeds >= 5 for c in planned if c.powered)
  assert "are the plan's" in "\n".join(STUDY.plan_lines("cpu"))
  minutes = STUDY.minutes("cpu", STUDY.sweep("cpu").cells)
  assert 120 <= minutes <= 180, minutes
  # The cost: the ladder's measured d64 model-step, scaled by the layers.
  for arm, cost in S.COST.items():
    layers = 16 if arm in S.DEEP + S.CUT else 8
    assert cost == pytest.approx(5 * 300 * ladder.SECONDS_PER_MODEL_STEP_CPU[64] * layers / 2 / 60)


def test_the_claims_margins_and_sources_are_as_stated():
  c = {x.claim: x for x in S.CLAIMS}
  growth, loss, sens, deep, rms, dyt, stable, depth = S.CLAIMS
  assert (growth.terms, growth.quantity, growth.predict) == (
      kinds.pair(S.PERI, S.PRE), kinds.Probe("residual_norm", "end", 1), "lower")  # Kim et al.: during training, not at init
  assert "Kim et al. 2025" in growth.source and "Fig. 1" in growth.source
  assert (loss.predict, loss.over, loss.margin) == ("below", S.LAYERS, 0.02) and "Shazeer" in loss.source
  assert "3.34" in loss.source and "3.43" in loss.source and loss.effect == pytest.approx(0.09 + 0.02)
  for con in (sens, stable):
    assert con.quantity == "sensitivity" and con.shared_rates and con.margin == curves.SENSITIVITY_MARGIN
  assert sens.terms == ((S.PERI, 1), (S.PRE, -1)) and sens.predict == "lower"
  assert stable.terms == ((S.POST, 1), (S.PRE, -1)) and stable.predict == "higher"
  assert deep.terms == ((S.DEEP16, 1), (S.POST16, -1)) and deep.learners == (S.DEEP16,)
  assert "Wang et al. 2022" in deep.source
  for eq, paper in ((rms, "Zhang & Sennrich 2019"), (dyt, "Zhu et al. 2025")):
    assert eq.predict == "same" and eq.margin == 0.05 and eq.terms[1] == (S.PRE, -1)
    assert paper in eq.source and eq.plan().test == "equivalent" and eq.plan().margin == 0.05
  assert isinstance(depth, kinds.NotRun) and set(depth.arms) == {*S.CUT, S.PERI, S.PRE}
  # Every predict is one the kind's code handles.
  handled = {kinds.Contrast: {"higher", "lower", "same"}}
  for x in S.CLAIMS:
    if type(x) in handled:
      assert x.predict in handled[type(x)], x.claim
  assert set(c) == {x.claim for x in S.CLAIMS} and set(STUDY.spread) == set(c)


def test_the_stated_spreads_are_the_exploratory_studys():
  _, cells, _ = cells_lib.load(os.path.join(ROOT, "results", "norm_mlp-cpu"))
  data = kinds.Data.of(cells, (), cells_lib.to_run)
  pre = kinds.Probe("residual_norm", "end", 1).per_seed(data, "norm:pre/long")
  assert len(pre) == 3 and STUDY.spread[S.CLAIMS[0].claim].sd == pytest.approx(
      math.sqrt(2) * np.std(list(pre.values()), ddof=1), rel=1e-4)
  sd = dict(zip((x.claim for x in norm_mlp_confirm.CLAIMS), norm_mlp_confirm.SD))
  same = {"without warmup, pre-LN is not penalised": S.CLAIMS[1:2] + S.CLAIMS[4:6],
          "post-LN is more sensitive to the learning rate": (S.CLAIMS[2], S.CLAIMS[6]),
          "without warmup, post-LN is penalised": (S.CLAIMS[3],),
          "post-LN's warmup penalty exceeds pre-LN's": (S.CLAIMS[7],)}
  for theirs, mine in same.items():
    for x in mine:
      assert STUDY.spread[x.claim].sd == pytest.approx(sd[theirs], rel=1e-5) and STUDY.spread[x.claim].n == 3


# ----------------------------------------------------------------------------- a probe's gap, synthetic


def record(arm, lr, seed, final, resid_end, resid_init=(0.5, 1.0, 2.0)):
  return {"name": f"{arm}-{lr:g}-{seed}", "arms": [arm], "seed": seed, "learning_rate": lr,
          "status": "completed", "final_val_loss": final, "initial_val_loss": 6.3, "unigram_val_loss": 5.3,
          "overrides": {"train.learning_rate": lr, "train.seed": seed}, "init": {"residual_norm": list(resid_init)},
          "end": {"residual_norm": list(resid_end)}}


def synthetic(growth_peri, growth_pre=1.5, n_seeds=6, noise=0.02, seed=0, learns=True):
  """Cells of peri and pre: a loss basin at 3e-3, and at each rate an end profile whose last /
  first block is the arm's growth (times per-seed noise); off the best rate, a growth of 50."""
  rng = np.random.default_rng(seed)
  out = []
  for arm, g in ((S.PERI, growth_peri), (S.PRE, growth_pre)):
    for s in range(1700, 1700 + n_seeds):
      for lr in S.RATES:
        loss = (4.0 if learns else 5.4) + 0.1 * math.log(lr / 3e-3) ** 2
        ratio = g * math.exp(rng.normal(0, noise)) if lr == 3e-3 else 50.0
        out.append(record(arm, lr, s, loss, (0.3, 2.0, 2.0 * ratio)))
  return kinds.Data.of(out, (), cells_lib.to_run)


def verdict(data, claim=S.CLAIMS[0]):
  return claims.decide_family([claim.test(data)])[0][1]


def test_probe_gap_reads_the_end_at_each_seeds_best_rate():
  data = synthetic(1.1)
  per = S.CLAIMS[0].quantity.per_seed(data, S.PERI)
  assert len(per) == 6 and np.mean(list(per.values())) == pytest.approx(math.log(1.1), abs=0.02)
  at_init = kinds.Probe("residual_norm", "init", 1).per_seed(data, S.PERI)
  assert set(at_init.values()) == {math.log(2.0)}  # 2.0 / 1.0: entry 1, not the embedding


def test_probe_gap_comes_out_every_way():
  assert verdict(synthetic(1.1)).verdict == R  # peri grows less than pre's 1.5
  assert verdict(synthetic(2.5)).verdict == NR  # it grows more: decisively the other side
  assert verdict(synthetic(1.5, noise=0.005)).verdict == NR  # no gap: within a factor 1.1
  assert verdict(synthetic(1.4, n_seeds=3, noise=0.3, seed=3)).verdict == INC
  v = verdict(synthetic(1.1, learns=False))  # on the plateau: the end profiles mean nothing
  assert v.verdict == INC and "Does not learn" in " ".join(v.lines)
  v = verdict(kinds.Data(()))
  assert v.verdict == INC


def test_a_probe_refuses_what_its_code_does_not_handle():
  with pytest.raises(errors.ConfigError, match="when='middle' is not one of"):
    kinds.Probe("residual_norm", "middle")


def test_the_committed_run_is_the_frozen_rules_on_a_clean_tree_and_its_verdicts():
  """results/norms-cpu: every cell trained at one clean commit under the rules the sweep
  recorded (unchanged since, or re-expressed with the same verdicts), and the verdicts the report prints."""
  from research import identity  # pylint: disable=import-outside-toplevel
  from research import report  # pylint: disable=import-outside-toplevel
  index, cells, _ = cells_lib.load(os.path.join(registry.RESULTS, "norms-cpu"))
  assert len(cells) == 230 and {(c["code"]["clean"], c["code"]["commit"][:7]) for c in cells} == {(True, "c7450b4")}
  assert not any(cells_lib.diverged(c) for c in cells)
  judged = STUDY.judge(cells, robust=False)
  line, = report.rules_line(os.path.join(registry.RESULTS, "norms-cpu"), index, "norms", judged)
  assert identity.compare(index["rules"], "norms").same or "re-expressed, same verdicts" in line
  assert "revised after" not in line and "differs" not in line
  verdicts = {v.claim: v.verdict for v in judged}
  assert [verdicts[c.claim] for c in STUDY.claims] == [
      claims.NOT_REPRODUCED, claims.NOT_REPRODUCED, claims.REPRODUCED, claims.INCONCLUSIVE,
      claims.INCONCLUSIVE, claims.INCONCLUSIVE, claims.INCONCLUSIVE, "Not powered"]
  # DyT never leaves the unigram plateau, at any rate (the post-hoc note's figure).
  dyt = [c["final_val_loss"] - c["unigram_val_loss"] for c in cells if c["group"].startswith(S.DYT)]
  assert len(dyt) == 30 and max(abs(x) for x in dyt) < 0.03
