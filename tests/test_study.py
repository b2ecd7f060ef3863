"""The study framework (research/study.py) and its claim kinds (research/kinds.py): each kind comes out each way on synthetic cells, a study's sweep and pre-registration, its report."""

import dataclasses
import json
import math
import os
import statistics

import numpy as np
import pytest

from andrea_jax import errors
from research import identity
from research import kinds
from research import registry
from research import report as reporting
from research.study import Arm, Budget, Grid, Study

RATES = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def record(arm, lr, seed, final, width=64, grad_mlp=(1.0, 1.0)):
  """A finished cell as research/cells.py records it."""
  return {"name": f"{arm}-d{width}-lr{lr:g}-s{seed}", "arms": [arm], "seed": seed, "round": 0,
          "group": f"{arm}-d{width}", "learning_rate": lr, "status": "completed",
          "final_val_loss": final, "initial_val_loss": 6.3, "unigram_val_loss": 5.5,
          "overrides": {"model.d_model": width, "train.learning_rate": lr, "train.seed": seed},
          "init": {"grad_mlp": list(grad_mlp)}, "end": {}, "steps": 10, "n_params": 1,
          "wall_time_s": 1.0, "train_curve": [], "val_curve": [], "group_size": 1}


def basin(arm, seeds, offset=0.0, noise=0.0, optimum=1e-2, width=64, curvature=0.05, rng=None):
  """A parabola in log rate around ``optimum``, shifted by ``offset``, with per-cell noise."""
  rng = rng or np.random.default_rng(0)
  return [record(arm, lr, s, 4.0 + offset + curvature * math.log(lr / optimum) ** 2
                 + noise * rng.standard_normal(), width)
          for lr in RATES for s in seeds]


def judge(claim, cells, axes=("model.d_model",)):
  study = Study("t", "q", "exploratory", (Arm("a"), Arm("b")),
                {"cpu": Grid(RATES, (0, 1, 2, 3), axes={a: (32, 64, 128, 256) for a in axes})}, (claim,))
  return study.judge(cells, robust=False)[0]


SEEDS = range(6)


@pytest.mark.parametrize("offset,noise,expected", [
    (-0.1, 0.01, "Reproduced"), (0.1, 0.01, "Not reproduced"), (0.0, 0.2, "Inconclusive")])
def test_a_difference_comes_out_each_way(offset, noise, expected):
  claim = kinds.Contrast("b is lower", terms=kinds.pair("b", "a"), predict="lower")
  v = judge(claim, basin("a", SEEDS) + basin("b", SEEDS, offset, noise, rng=np.random.default_rng(1)))
  assert v.verdict == expected, v.lines
  assert v.effect is not None and (v.effect.diff < 0) == (offset < 0 or (offset == 0 and v.effect.diff < 0))


def test_a_difference_is_inconclusive_at_the_grids_edge_and_without_seeds():
  claim = kinds.Contrast("b is lower", terms=kinds.pair("b", "a"), predict="lower")
  edge = basin("a", SEEDS) + basin("b", SEEDS, -0.1, 0.01, optimum=1.0)  # optimum beyond the top
  v = judge(claim, edge)
  assert v.verdict == "Inconclusive" and any("edge" in l for l in v.lines)
  v = judge(claim, basin("a", SEEDS) + basin("b", [0], -0.1))
  assert v.verdict == "Inconclusive" and "Not enough runs" in v.lines[0]


@pytest.mark.parametrize("offset,noise,expected", [
    (0.002, 0.001, "Reproduced"), (0.2, 0.005, "Not reproduced"), (0.0, 0.3, "Inconclusive")])
def test_an_equivalence_comes_out_each_way(offset, noise, expected):
  claim = kinds.Contrast("b is a", terms=kinds.pair("b", "a"), predict="same", margin=0.05)
  v = judge(claim, basin("a", SEEDS) + basin("b", SEEDS, offset, noise, rng=np.random.default_rng(2)))
  assert v.verdict == expected, v.lines


@pytest.mark.parametrize("last,predict,expected", [
    (1.05, "flat", "Reproduced"), (3.0, "flat", "Not reproduced"), (3.0, "grows", "Reproduced"),
    (0.5, "grows", "Not reproduced")])
def test_a_profile_at_init_comes_out_each_way(last, predict, expected):
  cells = [record("a", 1e-2, s, 4.0, grad_mlp=(1.0, last * (1 + 0.01 * s))) for s in SEEDS]
  probe = kinds.Probe("grad_mlp", "init", 0, 1.5 if predict == "grows" else 1.0)
  claim = kinds.Contrast("flat at init", terms=(("a", 1),), quantity=probe, learners=(), edge=False,
                         predict="same" if predict == "flat" else "higher",
                         margin=math.log(1.5) if predict == "flat" else float("nan"))
  assert judge(claim, cells).verdict == expected


def test_a_family_is_decided_together_under_holm():
  """A p that passes alone fails when its family is larger."""
  # Per-seed differences -0.02, -0.03, -0.01, -0.025: p about 0.016 alone, above 0.05 / 6.
  cells = basin("a", range(4)) + [c for s, d in enumerate((-0.02, -0.03, -0.01, -0.025))
                                  for c in basin("b", [s], d)]
  one = kinds.Contrast("b lower", terms=kinds.pair("b", "a"), predict="lower", family="f")
  alone = judge(one, cells)
  others = tuple(kinds.Contrast(f"b lower {i}", terms=kinds.pair("b", "a"), predict="lower",
                                  family="f", quantity="best_loss") for i in range(5))
  study = Study("t", "q", "exploratory", (Arm("a"), Arm("b")), {"cpu": Grid(RATES, (0,))}, (one,) + others)
  together = study.judge(cells, robust=False)[0]
  assert alone.verdict == "Reproduced" and together.verdict == "Inconclusive"
  assert any("Holm over the family of 6 tests" in l for l in together.lines)


def test_a_studys_sweep_is_its_arms_at_every_point_and_rate_and_seed():
  study = Study("t", "q", "confirmatory", (Arm("a"), Arm("b", {"model.qk_norm": True, "model.n_head": 4})),
                {"cpu": Grid((1e-3, 1e-2), (7, 8), shared={"model.n_head": 2, "train.steps": 10},
                             axes={"model.d_model": (32, 64), "model.n_layer": (2,)})}, ())
  cells = study.sweep("cpu").cells
  assert len(cells) == 2 * 2 * 2 * 2 and len({c.name for c in cells}) == len(cells)
  b = [c for c in cells if c.arms == ("b",)]
  assert all(c.overrides["model.n_head"] == 4 and c.overrides["model.qk_norm"] for c in b)
  assert {c.overrides["model.d_model"] for c in b} == {32, 64}
  assert len({c.group for c in cells}) == 4  # one program per (arm, point)
  with pytest.raises(errors.ConfigError, match="scales"):
    study.sweep("gpu")


def test_muons_adam_branch_rate_is_an_axis_a_study_can_tune():
  # Issue 70: Muon's Adam branch (embeddings, head, norms, biases) tuned apart from the
  # matrices' rate, as modded-nanogpt tunes its Adam groups. Each value of the axis is its own
  # program; the program's config carries it; the group's optimizer (multi.py, what the
  # runner trains) steps that branch, and only it, at that multiple of the member's rate.
  import jax
  from andrea_jax import config as config_lib
  from andrea_jax import multi
  from research import sweep as sweep_lib
  study = Study("t", "q", "exploratory", (Arm("muon", {"train.optimizer": "muon"}),),
                {"cpu": Grid((1e-3, 1e-2), (7,), axes={"train.adam_lr_ratio": (0.25, 1.0)},
                             shared={"model.d_model": 32, "model.n_layer": 1, "model.n_head": 2})},
                ())
  sweep = study.sweep("cpu")
  groups = sweep_lib.groups(sweep.cells)
  assert sorted(groups) == ["muon-adam_lr_ratio0.25", "muon-adam_lr_ratio1.0"]
  updates = {}
  for name, members in groups.items():
    run = config_lib.run_config(registry.group_config(sweep.base_config, members[0].overrides))
    ratio = run.train.adam_lr_ratio
    assert name.endswith(f"ratio{ratio}") and run.train.optimizer == "muon"
    optimizer = multi.make_optimizer(run.train, run.model)
    state = multi.init_member(run.model, optimizer, jax.random.key(0), 1e-2)
    grads = jax.tree.map(lambda p: jax.numpy.ones_like(p) * 1e-3, state["params"])
    updates[ratio], _ = optimizer.update(grads, state["opt_state"], state["params"])
  np.testing.assert_allclose(updates[0.25]["wte"], 0.25 * updates[1.0]["wte"], rtol=1e-5)
  np.testing.assert_array_equal(updates[0.25]["blocks"]["mlp"]["w_in"],
                                updates[1.0]["blocks"]["mlp"]["w_in"])


def test_a_study_refuses_an_unknown_design_or_arm():
  with pytest.raises(errors.ConfigError, match="design"):
    Study("t", "q", "a hunch", (Arm("a"),), {}, ())
  with pytest.raises(errors.ConfigError, match=r"\['c'\]"):
    Study("t", "q", "exploratory", (Arm("a"),), {},
          (kinds.Contrast("x", terms=kinds.pair("c", "a")),))


def test_a_budget_costs_what_it_states_or_what_the_grid_measured():
  arms = (Arm("a"), Arm("b", {"model.qk_norm": True}, group="qk"))
  claim = kinds.Contrast("b lowers the loss", terms=kinds.pair("b", "a"), predict="lower", effect=0.1)
  grid = lambda **kw: Grid((1e-3, 1e-2), tuple(range(10)), shared={"train.steps": 100}, **kw)
  with pytest.raises(errors.ConfigError, match="seconds_per_model_step"):
    Study("t", "q", "exploratory", arms, {"cpu": grid(budget=Budget(10.0))}, (claim,))
  # Measured: one seed of an arm is its 2 cells x 100 steps x 0.06 s; its program's 30 s is fixed.
  measured = Study("t", "q", "exploratory", arms, {"cpu": grid(seconds_per_model_step=0.06, budget=Budget(
      30.0, min_seeds=2))}, (claim,), spread={"*": 0.05})
  assert measured.seed_costs("cpu") == ({"a": pytest.approx(0.2), "b": pytest.approx(0.2)},
                                         {"a": 0.5, "b": 0.5})
  planned, seeds, _, family = measured.budget_plan("cpu")
  assert planned[0].powered and family == 1 and seeds == {"b": planned[0].seeds, "a": planned[0].seeds}
  assert measured.budget_plan("cpu", measured.seed_costs("cpu"))[1] == seeds  # costs the caller has
  assert "keep the plan's" in "\n".join(measured.plan_lines("cpu"))  # 10 seeds: 5 minutes of 30
  # Stated: the same plan from the costs the budget states, with no fixed cost.
  stated = dataclasses.replace(measured, scales={"cpu": grid(budget=Budget(30.0, {"a": 0.2, "b": 0.2}, 2))})
  assert stated.seed_costs("cpu") == ({"a": 0.2, "b": 0.2}, {})
  assert stated.budget_plan("cpu")[1] == seeds


def test_leave_one_seed_out_is_for_a_test_outcome_not_a_finding_or_a_premise():
  finding = kinds.Finding("where it departs", arms=("a",))
  study = Study("t", "q", "exploratory", (Arm("a"),), {"cpu": Grid((1e-2,), (1, 2, 3), axes={"model.d_model": (64,)})},
                (finding,))
  cells = [{**record("a", 1e-2, s, 4.0), "overrides": {"model.d_model": 64, "model.vocab_size": 512},
            "log_z_curve": [[10, math.log(512) + 5.0]]} for s in (1, 2, 3)]
  (v,) = study.judge(cells)
  assert v.verdict == kinds.FOUND and v.robustness == "" and study.plan("cpu") == []
  assert "nothing to power" in study.plan_lines("cpu")[0]


def test_the_power_plan_declares_what_its_seeds_cannot_decide():
  study = registry.study("template")
  plan = {c.key: (need, have, powered) for c, need, have, powered in study.plan("cpu")}
  best, sens = plan.values()
  assert best[1] == 5 and best[0] > 5 and not best[2]  # 0.02 nats at sd 0.02 needs 13 seeds
  assert sens[0] <= 5 and sens[2]
  assert "**not powered**" in "\n".join(study.plan_lines("cpu"))


def test_the_template_pre_registers_its_definition():
  """The rules hash covers the grid and claims (a seed or a margin changed changes it),
  not the prose."""
  modules = identity.study_modules("template")
  assert modules[0] == "experiments/studies/template.py" and "research/kinds.py" in modules
  sources = {p: open(os.path.join(ROOT, p), encoding="utf-8").read() for p in modules}
  now = identity.identity(identity.definitions(sources, identity.FILE_ROOTS))
  assert now == identity.rules_version("template")["sha256"]
  path = modules[0]
  edit = lambda a, b: identity.identity(identity.definitions({**sources, path: sources[path].replace(a, b)},
                                                             identity.FILE_ROOTS))
  assert edit("(700, 701, 702, 703, 704)", "(700, 701, 702, 703, 705)") != now
  assert edit("effect=0.05", "effect=0.06") != now
  assert edit("The template study: copy", "The template: copy") == now
  # A kind's code changed (in the module it lives in) changes it.
  kind = "research/kind_contrast.py"
  assert kind in modules and "len(seeds) < 2" in sources[kind]
  assert identity.identity(identity.definitions({**sources, kind: sources[kind].replace(
      "len(seeds) < 2", "len(seeds) < 3")}, identity.FILE_ROOTS)) != now


def test_the_template_reports_through_the_framework(tmp_path):
  sweep = registry.load("template", "smoke")
  d = tmp_path / "sweep"
  for c in sweep.cells:
    cell = d / c.path
    cell.mkdir(parents=True)
    (cell / "cell.json").write_text(json.dumps({"name": c.name, "arms": list(c.arms), "seed": c.seed,
                                                "group": c.group, "overrides": c.overrides}))
    loss = 4.0 + 0.05 * math.log(c.learning_rate / 1e-2) ** 2 - 0.1 * ("pre+qk" in c.arms) + 0.01 * (c.seed - 700)
    (cell / "summary.json").write_text(json.dumps({
        "status": "completed", "steps": 12, "final_val_loss": loss, "unigram_val_loss": 5.5,
        "initial_val_loss": 6.0, "n_params": 1, "wall_time_s": 1.0}))
  (d / "sweep.json").write_text(json.dumps({"name": "template", "scale": "smoke", "study": "template",
                                            "rules": identity.rules_version("template")}))
  path = reporting.write_report("template", str(d), str(tmp_path / "out"))
  text = open(path, encoding="utf-8").read()
  assert "### qk-LayerNorm lowers the best loss" in text and "**Reproduced.**" in text
  assert "Rules: judged with the rules fixed before the run" in text and "| pre+qk | d_model 32 |" in text
  assert (tmp_path / "out" / "loss_vs_rate.png").exists()


def test_a_reexpression_says_same_verdicts_only_when_they_are():
  from research import claims, stats
  e = stats.Effect(-0.1, -0.2, -0.05, 0.01, 3, 4, "paired")
  now = [claims.Verdict("c", "Reproduced", [], "r", e)]
  before = {"commit": "abc", "rules": "x/rules.py",
            "verdicts": [{"claim": "c", "verdict": "Reproduced", "effect": {"diff": -0.1, "lo": -0.2, "hi": -0.0501}}]}
  changed = ["Rules: **re-judged with rules changed since the run.** ..."]
  assert "re-expressed, same verdicts" in reporting.reexpressed(before, now, changed)[0]
  assert "revised" not in reporting.reexpressed(before, now, changed, {"commit": "abc"})[0]
  assert "Those are not the rules the run recorded (commit f00)" in reporting.reexpressed(
      before, now, changed, {"commit": "f00"})[0]
  before["verdicts"][0]["verdict"] = "Inconclusive"
  lines = reporting.reexpressed(before, now, changed)
  assert lines[0] == changed[0] and "'c': Inconclusive" in lines[1]
  assert reporting.reexpressed(None, now, changed) == changed


def test_a_contrasts_terms_read_as_written():
  """A pair reads ``a - b``; a difference of differences keeps its two pairs apart, as a reader
  would write it (not ``a - b - c + d``)."""
  assert kinds.Contrast.expr(kinds.pair("a", "b")) == "a - b"
  assert kinds.Contrast.expr((("a", 1), ("b", -1), ("c", -1), ("d", 1))) == "(a - b) - (c - d)"
  assert kinds.Contrast.expr((("a", 1),)) == "a"


def test_tokens_to_a_target_are_interpolated_between_evaluations_or_not_reached():
  from research import curves
  assert curves.first_reach([[0, 6.0], [100, 5.0], [200, 4.0]], 4.5) == 150.0
  assert curves.first_reach([[0, 6.0], [100, 5.0]], 6.5) == 0.0
  assert curves.first_reach([[0, 6.0], [100, float("nan")], [200, 5.0]], 5.5) == 100.0
  assert curves.first_reach([[0, 6.0], [100, 5.0]], 4.0) == math.inf


def timed(arm, seed, losses, lr=1e-2, group_size=1, status="completed"):
  """A finished cell whose evaluations (every 1000 tokens, 10 s of its program's clock) logged
  their tokens and clock (cells.record)."""
  return {**record(arm, lr, seed, losses[-1]), "status": status, "group_size": group_size,
          "val_tokens_curve": [[1000 * i, l] for i, l in enumerate(losses)],
          "val_seconds_curve": [[10.0 * i, l] for i, l in enumerate(losses)]}


@pytest.mark.parametrize("by, a0, b0", [("tokens", 1500.0, 1000.0), ("seconds", 15.0, 5.0)])
def test_tokens_or_seconds_to_a_target_decide_a_claim_and_a_seed_that_never_reached_it_cannot(by, a0, b0, tmp_path):
  # a reaches 4.5 nats between its second and third evaluations; b at its second. b trains two
  # models in one program (its seconds: the clock over 2), and a diverged rate of b, which
  # had passed 4.5 sooner, does not count.
  a = [timed("a", s, [6.0, 5.0 + 0.01 * s, 4.0]) for s in SEEDS]
  b = [timed("b", s, [6.0, 4.5 - 0.01 * s, 4.0], group_size=2) for s in SEEDS]
  b.append(timed("b", 0, [4.0, 4.0, 4.0], lr=1e-3, status="diverged"))
  target = kinds.ToTarget(4.5, by)
  claim = kinds.Contrast("b reaches 4.5 nats sooner", terms=kinds.pair("b", "a"), predict="lower",
                         quantity=target, edge=False)
  study = Study("t", "q", "exploratory", (Arm("a"), Arm("b")), {"cpu": Grid(RATES, tuple(SEEDS))}, (claim,))
  data = study.data(a + b)
  assert (target.per_seed(data, "a")[0], target.per_seed(data, "b")[0]) == (a0, b0)
  v = study.judge(a + b, robust=False)[0]
  assert v.verdict == "Reproduced" and v.unit == {"tokens": "tokens", "seconds": "s"}[by]
  assert v.effect.kind == "paired" and v.effect.n == len(SEEDS) and v.effect.diff == pytest.approx(
      statistics.mean(target.per_seed(data, "b")[s] - target.per_seed(data, "a")[s] for s in SEEDS))
  # One seed of b never gets to 4.5 nats: censored, said so, and the claim cannot conclude
  # (its other seeds alone would reproduce it).
  b[-2] = timed("b", SEEDS[-1], [6.0, 5.5, 5.0], group_size=2)
  v = study.judge(a + b, robust=False)[0]
  assert v.verdict == "Inconclusive" and v.effect.n == len(SEEDS) - 1
  text = " ".join(v.lines)
  assert f"not reached (censored): seed {SEEDS[-1]}" in text and "did not reach 4.5 nats (censored" in text
  # The report's figure: every arm's loss against tokens and against seconds.
  page = study.page({"scale": "cpu"}, a + b, str(tmp_path))
  assert "to_target_4.5.png" in page.plots and (tmp_path / "to_target_4.5.png").stat().st_size > 1000


def test_a_budget_pays_for_the_arms_no_claim_tests_first():
  # The norm menu's table-only arms (Gemma 2, DyT's alpha_0 sweep) train at their grid's seeds:
  # the plan sizes the claims' arms within what is left, so the committed grid keeps the plan.
  from experiments.studies import norm_menu  # pylint: disable=import-outside-toplevel
  _, seeds, _, _ = norm_menu.STUDY.budget_plan("cpu")
  assert seeds == norm_menu.PLANNED
  assert any(l.startswith("The grid's seeds per arm keep the plan's") for l in norm_menu.STUDY.plan_lines("cpu"))


def horizon_cell(arm, lr, seed, steps, curve):
  """A finished WSD horizon of ``steps`` updates whose evaluations logged ``curve``, ``[(tokens, loss),
  ...]``, its last the final loss."""
  rec = {**record(arm, lr, seed, curve[-1][1]), "val_tokens_curve": [list(p) for p in curve],
         "val_seconds_curve": [[t / 100, l] for t, l in curve]}
  return {**rec, "overrides": {**rec["overrides"], "train.steps": steps}}


def efficiency_cells(fast=3e-3, shortest=True):
  """a, the reference, at horizons 4 and 8 (8000 tokens), best at 3e-3 where each seed s ends at
  4.0 + 0.02 s; b at horizons 2, 4 and 8, whose 4-step run at rate ``fast`` crosses every target between
  3000 and 4000 tokens (at 3500 - 100 s), before any other of its runs; ``shortest``: b's 2-step runs,
  which reach nothing."""
  cells = []
  for s in SEEDS:
    for lr, final in ((1e-3, 4.4), (3e-3, 4.0 + 0.02 * s), (1e-2, 4.2)):
      cells.append(horizon_cell("a", lr, s, 8, [(0, 6.0), (2000, 5.0), (4000, 4.6), (6000, 4.3), (8000, final)]))
      cells.append(horizon_cell("a", lr, s, 4, [(0, 6.0), (2000, 5.0), (4000, 4.5 if lr == 3e-3 else 4.6)]))
    for lr in (1e-3, 3e-3, 1e-2):
      cells += [horizon_cell("b", lr, s, 2, [(0, 6.0), (2000, 4.4)])] if shortest else []
      cells.append(horizon_cell("b", lr, s, 4, [(0, 6.0), (2000, 4.5), (3000, 4.1 if lr == fast else 4.3),
                                                (4000, 3.9 if lr == fast else 4.25)]))
      cells.append(horizon_cell("b", lr, s, 8, [(0, 6.0), (2000, 4.6), (4000, 4.3), (6000, 4.0 if lr == fast else 4.2),
                                                (8000, 3.8)]))
  return cells


def efficiency_study(claims, reports=()):
  return Study("t", "q", "exploratory", (Arm("a"), Arm("b")),
               {"cpu": Grid(RATES, tuple(SEEDS), axes={"train.steps": (2, 4, 8)})}, claims, reports=reports)


def test_tokens_to_a_reference_arms_best_loss_read_per_seed_give_the_efficiency_with_its_interval(tmp_path):
  # The target is a's best loss: its rate whose mean final loss over seeds is lowest at its longest run
  # (3e-3 at 8 steps), each seed reaching for its own a seed's loss there (4.0 + 0.02 s), not their mean.
  target = kinds.ToTarget(reference="a", log=True)
  claim = kinds.Contrast("b reaches a's best loss in fewer tokens", terms=kinds.pair("a", "b"), predict="higher",
                         quantity=target)
  table = kinds.TargetTable(target, ("a", "b"), ("Someone 2024: 2x",))
  study = efficiency_study((claim,), (table,))
  cells = efficiency_cells()
  data = study.data(cells)
  assert target.best(data)[:2] == ((("train.steps", 8),), 3e-3)
  assert target.targets(data) == pytest.approx({s: 4.0 + 0.02 * s for s in SEEDS})
  assert target.level(data) == pytest.approx(4.05)
  # a reaches its own loss at its longest run's end; b first on its 4-step run, between evaluations.
  assert target.per_seed(data, "a") == pytest.approx({s: math.log(8000) for s in SEEDS})
  assert target.per_seed(data, "b") == pytest.approx({s: math.log(3500 - 100 * s) for s in SEEDS})
  logs = [math.log(8000 / (3500 - 100 * s)) for s in SEEDS]
  v = study.judge(cells, robust=False)[0]
  assert v.verdict == "Reproduced" and v.unit == kinds.LOG_RATIO and v.effect.kind == "paired"
  assert v.effect.diff == pytest.approx(statistics.mean(logs)) and v.effect.n == len(SEEDS)
  text = " ".join(v.lines)
  assert "Target: a's best loss, 4.050 nats, its mean over 6 seeds at rate 0.003, steps 8 (8,000 tokens" in text
  assert f"b: tokens to a's best loss geometric mean {math.exp(statistics.mean(math.log(3500 - 100 * s) for s in SEEDS)):,.0f}" in text
  # Shorter runs of a that end lower than its longest do not make the target: its longest runs do.
  low = [horizon_cell("a", 1e-2, s, 4, [(0, 6.0), (2000, 5.0), (4000, 3.5)]) for s in SEEDS]
  assert target.best(study.data(cells + low))[:2] == ((("train.steps", 8),), 3e-3)
  # The report opens with each arm's tokens to the target and the efficiency, the claim's estimate.
  page = study.page({"scale": "cpu"}, cells, str(tmp_path))
  opens = "\n".join(page.opens)
  assert opens.startswith("**Tokens to a's best loss.** Target: a's best loss, 4.050 nats")
  ratio = f"{math.exp(v.effect.diff):.2f} [95 % CI {math.exp(v.effect.lo):.2f}, {math.exp(v.effect.hi):.2f}] (6 seeds)"
  assert "| a | 8,000 [8,000, 8,000] | 6 of 6 | rate 0.003, steps 8 (6 seeds) | 1 (the reference) |" in opens
  assert f"| b | " in opens and f"| 6 of 6 | rate 0.003, steps 4 (6 seeds) | {ratio} |" in opens
  assert "Published, at their own scale and data (beside ours, not comparable in level): Someone 2024: 2x" in opens
  assert "to_target_4.05.png" in page.plots


@pytest.mark.parametrize("cells, why", [
    (efficiency_cells(fast=1e-2), "b seed 0 reached it first at rate 0.01, steps 4, the edge of its rates"),
    (efficiency_cells(shortest=False), "b seed 0 reached it at its shortest horizon, steps 4: a shorter run might")])
def test_tokens_to_a_target_first_reached_at_the_grids_edge_cannot_conclude(cells, why):
  claim = kinds.Contrast("b reaches a's best loss in fewer tokens", terms=kinds.pair("a", "b"), predict="higher",
                         quantity=kinds.ToTarget(reference="a", log=True))
  v = efficiency_study((claim,)).judge(cells, robust=False)[0]
  assert v.verdict == "Inconclusive" and why in " ".join(v.lines)


def test_a_target_is_a_loss_or_an_arm_and_the_arm_must_be_the_studys():
  for bad in ({}, {"loss": 4.5, "reference": "a"}, {"loss": -1.0}):
    with pytest.raises(errors.ConfigError, match="ToTarget"):
      kinds.ToTarget(**bad)
  claim = kinds.Contrast("c", terms=kinds.pair("a", "b"), quantity=kinds.ToTarget(reference="adamW", log=True))
  with pytest.raises(errors.ConfigError, match=r"names arms \['adamW'\]"):
    efficiency_study((claim,))


def test_an_equivalence_around_a_bound_is_two_one_sided_tests_there():
  # An efficiency of about 2x (log ratios near log 2) within a factor 1.25: for; near 1.35x: against.
  from research.kind_contrast import decide
  from research import stats
  near = stats.one_sample([math.log(2) + d for d in (-0.02, 0.0, 0.01, 0.03, -0.01)])
  far = stats.one_sample([math.log(1.35) + d for d in (-0.02, 0.0, 0.01, 0.03, -0.01)])
  p_for, p_against = decide([near], "same", margin=math.log(1.25), bound=math.log(2))
  assert p_for < 0.01 and p_against == 1.0
  p_for, p_against = decide([far], "same", margin=math.log(1.25), bound=math.log(2))
  assert p_for > 0.5 and p_against < 0.01
  # At bound 0, the effect's own TOST p, as before.
  e = stats.one_sample([0.01, -0.02, 0.03], 0.1)
  assert decide([e], "same", margin=0.1)[0] == e.p_same
  claim = kinds.Contrast("~2x", terms=kinds.pair("a", "b"), predict="same", bound=math.log(2), margin=math.log(1.25))
  assert "within log 2 ±log 1.25" in claim.rule()
