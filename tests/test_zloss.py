"""The z-loss study (experiments/studies/zloss/) before its run: each claim coming out reproduced,
not reproduced, inconclusive and cannot-be-judged on synthetic models, its grid on seeds no
study used, its frozen power plan, its rules' recorded identity, and its report page."""

import dataclasses
import json
import math

import numpy as np
import pytest

from research import claims
from research import identity as rules_identity
from research import registry
from experiments.studies.zloss import grid
from experiments.studies.zloss import plan as plan_lib
from experiments.studies.zloss import report
from experiments.studies.zloss import rules as R

V = 512
LOG_V = math.log(V)
REP, NR, INC = claims.REPRODUCED, claims.NOT_REPRODUCED, claims.INCONCLUSIVE
KEYS = ("holds@0.17", "loss@0.17", "holds@0.3", "loss@0.3")


def models(log_z, final, seeds=grid.SEEDS, lost=(), width=128, noise=0.3):
  """Every (z-loss, rate, seed) of the grid at one width: the log Z at the end is
  ``log_z(z, rate)`` and the final loss ``final(z, rate)`` (either None: not completed), each
  plus a seed's normal noise of ``noise``; the models in ``lost`` did not complete."""
  rng = np.random.default_rng(0)
  rows = []
  for z in grid.Z_LOSSES:
    for lr in grid.RATES:
      for s in seeds:
        a, b = rng.normal(0, noise, 2)
        done = (z, lr, s) not in lost
        rows.append(R.Row(width, V, 0.0, z, lr, s, done, 9.1,
                          log_z(z, lr) + a if done else float("nan"),
                          final(z, lr) + b if done else float("nan")))
  return rows


def verdicts(rows):
  return {k: v.verdict for k, v in zip(KEYS, R.judge(rows, robust=False))}


def held(z, lr):
  """The plain model's log Z 16 nats above log V (the probe's at 0.3), z-loss's held near it."""
  return LOG_V + 16.0 if z == 0 else LOG_V + 0.5


def not_held(z, lr):
  return LOG_V + 16.0 if z == 0 else LOG_V + 25.0


def loss_lower(z, lr):
  return 14.3 if z == 0 else 5.5


def loss_higher(z, lr):
  return 14.3 if z == 0 else 15.3


def test_reproduced_where_z_loss_holds_log_z_and_lowers_the_loss():
  judged = R.judge(models(held, loss_lower))
  assert [v.verdict for v in judged] == [REP] * 4, [v.lines for v in judged]
  holds = judged[2]
  assert holds.claim == "z-loss 0.0001 holds log Z where the plain model's runs away (rate 0.3)"
  assert "ran away in 10 of 10 seeds (10 above log V, 0 below)" in holds.lines[0]
  assert "Holm over the family of 4 tests" in holds.lines[-1]
  assert holds.effect.hi < R.RUNAWAY_NATS and holds.effect.n == 10
  assert "survives leaving out any one seed" in holds.robustness
  # A z-loss model pulled towards its own target, log Z = 0, far below log V, has not run away.
  pulled = R.judge(models(lambda z, lr: LOG_V + 16.0 if z == 0 else 0.3, loss_lower), robust=False)
  assert pulled[0].verdict == pulled[2].verdict == REP


def test_not_reproduced_where_z_loss_lets_it_run_away_and_loses_more():
  got = verdicts(models(not_held, loss_higher))
  assert got == dict.fromkeys(KEYS, NR), got
  # A loss difference too small to matter, however certain, is against the claim too.
  same = verdicts(models(not_held, lambda z, lr: 14.3, noise=0.01))
  assert same["loss@0.3"] == same["loss@0.17"] == NR


def test_inconclusive_when_the_seeds_cannot_decide():
  # Three seeds, the z-loss model's overshoot near the bound and the losses apart by noise.
  rows = models(lambda z, lr: LOG_V + (16.0 if z == 0 else 2.3), lambda z, lr: 14.3,
                seeds=grid.SEEDS[:3], noise=1.5)
  assert verdicts(rows) == dict.fromkeys(KEYS, INC)
  assert all("uninformative at 3 seeds" in v.robustness for v in R.judge(rows))


def test_cannot_be_judged_where_the_plain_model_does_not_run_away():
  stays = models(lambda z, lr: LOG_V + 0.4, lambda z, lr: 5.3)
  judged = R.judge(stays)
  assert [v.verdict for v in judged] == [R.CANNOT_JUDGE] * 4
  assert "ran away in 0 of 10 seeds" in judged[0].lines[0]
  assert "not a failure to reproduce" in judged[0].lines[1] and not judged[0].robustness
  # Below 2 nats from log V is not a runaway either way; 2 seeds of 10 are too few.
  few = [dataclasses.replace(r, log_z_end=LOG_V + 17.0, final=14.3)
         if r.z_loss == 0 and r.seed in grid.SEEDS[:2] else r
         for r in models(lambda z, lr: LOG_V + 1.5, lambda z, lr: 5.3, noise=0.1)]
  assert set(verdicts(few).values()) == {R.CANNOT_JUDGE}
  # Runaway at 0.3 only: 0.17 cannot be judged, 0.3 is, in a family of two.
  mixed = R.judge(models(lambda z, lr: held(z, lr) if lr == 0.3 else LOG_V + 0.4, loss_lower))
  assert [v.verdict for v in mixed] == [R.CANNOT_JUDGE] * 2 + [REP] * 2
  assert "Holm over the family of 2 tests" in mixed[2].lines[-1]


def test_a_plain_model_that_runs_away_below_is_judged_on_that_side():
  # log Z far below 0 (Wortsman et al.'s direction): held when the z-loss model's log Z ends
  # inside the band's lower end (above -2), not when it runs away below too.
  down = lambda zl: (lambda z, lr: -14.0 if z == 0 else zl)
  assert verdicts(models(down(1.0), loss_lower))["holds@0.3"] == REP
  assert verdicts(models(down(-12.0), loss_higher))["holds@0.3"] == NR
  rows = models(down(1.0), loss_lower)
  assert "(0 above log V, 10 below)" in R.judge(rows)[2].lines[0]


def test_a_z_loss_model_that_did_not_complete_cannot_support_the_claim():
  lost = {(R.JUDGED_Z, 0.3, grid.SEEDS[0])}
  got = {v.claim: v for v in R.judge(models(held, loss_lower, lost=lost), robust=False)}
  holds = next(v for c, v in got.items() if c.startswith("z-loss 0.0001 holds") and "0.3" in c)
  assert holds.verdict == INC and "did not complete at seed 500" in " ".join(holds.lines)
  assert holds.effect.n == 9
  # ... while the seeds that completed still decide against it.
  assert verdicts(models(not_held, loss_higher, lost=lost))["holds@0.3"] == NR
  # A plain model that did not complete is not a runaway (its log Z cannot be read).
  gone = {(R.PLAIN, 0.3, s) for s in grid.SEEDS[:8]}
  assert verdicts(models(held, loss_lower, lost=gone))["holds@0.3"] == R.CANNOT_JUDGE


def test_a_test_the_plan_declares_not_powered_is_reported_not_judged(monkeypatch):
  monkeypatch.setattr(R, "NOT_POWERED", frozenset({"loss@0.17"}))
  judged = R.judge(models(held, loss_lower), robust=False)
  assert judged[1].verdict == R.NOT_POWERED_VERDICT and "Final validation loss" in judged[1].lines[1]
  assert judged[0].verdict == REP and "Holm over the family of 3 tests" in judged[0].lines[-1]


def test_the_family_is_decided_under_holm():
  # Four tests: p for 0.02 passes alone but not as the second of four (Holm: 3 x 0.02); a
  # test against, and a guarded and a cannot-be-judged one, kept out of the family.
  t = lambda k, pf, pa, **kw: claims.Test(k, k, "rule", [], p_for=pf, p_against=pa, **kw)
  tests = [t("a", 0.001, 1.0), t("b", 0.02, 1.0), t("c", 1.0, 0.001), t("d", 0.5, 0.5),
           t("e", 0.0, 1.0, guards=[(True, "guarded")]),
           t("f", 0.0, 1.0, missing=claims.Verdict("f", R.CANNOT_JUDGE, [], "rule"))]
  got = {k.key: v for k, v in claims.decide_family(tests)}
  assert {k: v.verdict for k, v in got.items()} == {"a": REP, "b": INC, "c": NR, "d": INC,
                                                    "e": INC, "f": R.CANNOT_JUDGE}
  assert "family of 4 tests: adjusted p for 0.06" in got["b"].lines[-1]
  assert got["e"].lines == ["guarded"]


def test_no_models_is_inconclusive():
  assert [v.verdict for v in R.judge([])] == [INC]


# ----------------------------------------------------------------------------- the grid


def test_the_grid_trains_seeds_no_study_used():
  used = registry.used_seeds("zloss")
  assert {0, 1, 2, 100, 118, 200, 202, 300, 308, 400, 401} <= used  # it reads them all
  for scale in grid.SCALES:
    cells = grid.get_sweep(scale).cells
    mine = {c.seed for c in cells} | {c.overrides["train.seed"] for c in cells}
    assert not mine & used, f"{scale}: seeds {sorted(mine & used)} were used before"


def test_the_grid_pairs_every_arm_at_the_probes_setting():
  sweep = grid.get_sweep("cpu", {"readout_multiplier": 8.0, "attention_multiplier": 1.0})
  assert sweep.judged_by == "zloss" and len(sweep.cells) == 3 * 2 * 10
  by_group = {}
  for c in sweep.cells:
    o = c.overrides
    assert (o["model.d_model"], o["train.weight_decay"], o["model.readout_multiplier"]) == (128, 0.0, 8.0)
    assert o.get("model.parametrization", "sp") == "sp" and o["model.norm"] == "pre"
    assert o["diagnostics.every"] == 50 and o["train.steps"] == 200 and not c.refinable
    by_group.setdefault(c.group, set()).add((c.learning_rate, c.seed))
    assert c.arms == (f"wd0+z{o['train.z_loss']:g}",)
  assert set(by_group) == set(plan_lib.JUDGED + plan_lib.REPORTED)
  assert len({frozenset(v) for v in by_group.values()}) == 1  # the same rates x seeds: paired
  assert {c.overrides["train.z_loss"] for c in sweep.cells} == {R.PLAIN, R.JUDGED_Z, R.REPORTED_Z}
  assert "60 models in 3 programs, about 12 minutes" in sweep.description


def test_the_study_is_registered_and_its_cells_are_valid_configs():
  from andrea_jax import model, step as step_lib  # pylint: disable=import-outside-toplevel
  from research import runner as sweep_lib  # pylint: disable=import-outside-toplevel
  from research import sweep as base  # pylint: disable=import-outside-toplevel
  assert registry.judges("zloss") and registry.study_of({"name": "zloss"}) == "zloss"
  assert registry.design("zloss").startswith("**Confirmatory study.**")
  for scale in grid.SCALES:
    sweep = registry.load("zloss", scale)
    for members in base.groups(sweep.cells).values():
      config = registry.group_config(sweep.base_config, members[0].overrides)
      model.ModelConfig(**config.model)
      step_lib.TrainConfig(**config.train)
  smoke = grid.get_sweep("smoke")
  assert smoke.description.startswith("**Smoke scale") and len(smoke.cells) == 3 * 2 * 3


def test_the_dry_run_prints_the_groups_and_the_plan():
  from research import runner as sweep_lib  # pylint: disable=import-outside-toplevel
  text = "\n".join(sweep_lib.plan_lines(grid.get_sweep("cpu"), "runs/x"))
  assert "| wd0-z0.0001-d128 | 20 | 0.17, 0.3 | 500..509 (10) |" in text
  assert "Power plan" in text and "Not powered (declared before the run" in text


# ----------------------------------------------------------------------------- the plan


def test_the_frozen_plan_is_the_plan():
  p = plan_lib.compute()
  assert set(p.not_powered) == set(R.NOT_POWERED)
  assert [c.plan.key for c in p.claims] == [t.key for t, _ in R.family(models(held, loss_lower))]
  assert all(c.seeds <= len(grid.SEEDS) for c in p.claims if c.powered)
  assert all(c.seeds >= plan_lib.MIN_SEEDS for c in p.claims if c.powered)
  assert p.seeds == dict.fromkeys(plan_lib.JUDGED + plan_lib.REPORTED, len(grid.SEEDS))
  assert p.total_minutes <= plan_lib.BUDGET_MINUTES
  # The plan's cost is the grid's description's (one cost table).
  from research import ladder  # pylint: disable=import-outside-toplevel
  assert p.total_minutes == pytest.approx(ladder.minutes_cpu(grid.get_sweep("cpu").cells))
  # At a budget that buys nothing, nothing is powered.
  assert set(plan_lib.make(budget=3).not_powered) == set(KEYS)


# ----------------------------------------------------------------------------- rules' identity


def test_a_sweep_records_the_rules_it_will_be_judged_by(tmp_path):
  from research import runner as sweep_lib  # pylint: disable=import-outside-toplevel
  sweep_lib.write_index(grid.get_sweep("smoke"), str(tmp_path), {})
  index = json.load(open(tmp_path / "sweep.json"))
  recorded = index["rules"]
  assert index["study"] == "zloss" and recorded["sha256"] == rules_identity.rules_version("zloss")["sha256"]
  assert recorded["modules"][0] == "experiments/studies/zloss/rules.py"
  for name in ("judge", "family", "check_holds", "check_loss", "runaway", "overshoot",
               "RUNAWAY_NATS", "LOSS_MARGIN", "MIN_RUNAWAY_SEEDS", "NOT_POWERED", "decide_family",
               "holm", "below", "directed"):
    assert name in recorded["definitions"], name
  line, = rules_identity.rules_lines(recorded, "zloss")
  assert "fixed before the run" in line and "unchanged since" in line
  module, _ = recorded["definitions"]["overshoot"]
  edited = {**recorded, "definitions": {**recorded["definitions"], "overshoot": [module, "0" * 12]}}
  assert "changed: `overshoot`" in rules_identity.rules_lines(edited, "zloss")[0]


# ----------------------------------------------------------------------------- the report


def cell_records(rows):
  return [{"name": f"c{i}", "group": f"wd0-z{r.z_loss:g}-d{r.width}", "arms": [f"wd0+z{r.z_loss:g}"],
           "seed": r.seed, "learning_rate": r.lr, "status": "completed" if r.completed else "diverged",
           "final_val_loss": r.final, "wall_time_s": 100.0,
           "overrides": {"model.d_model": r.width, "model.vocab_size": V, "train.weight_decay": 0.0,
                         "train.z_loss": r.z_loss},
           "init": {"log_z": r.log_z_init}, "end": {"log_z": r.log_z_end}}
          for i, r in enumerate(rows)]


def test_the_report_page_gives_the_verdicts_the_pairs_and_the_reported_arm(tmp_path):
  rows = models(lambda z, lr: LOG_V + {0.0: 16.0, R.JUDGED_Z: 0.5, R.REPORTED_Z: -1.0}[z],
                loss_lower, lost={(R.REPORTED_Z, 0.17, 501)}, noise=0.0)
  page = report.page({}, cell_records(rows), str(tmp_path))
  text = "\n".join(page.sections)
  assert [v.verdict for v in page.verdicts] == [REP] * 4
  assert "| 0.3 | 500 | +16.00 | above | +0.50 | -1.00 | 14.300 | 5.500 | 5.500 |" in text
  assert "| 0.17 | 501 | +16.00 | above | +0.50 | — | 14.300 | 5.500 | — |" in text
  assert "## z-loss 0.001 (reported, not judged)" in text and "did not complete at seeds 501" in text
  assert "## Pre-registered plan" in text and "## log Z per setting and rate" in text
  assert page.results["plan"]["seeds"]["wd0-z0.0001-d128"] == 10
  assert (tmp_path / page.plots[0]).exists()


def test_the_report_command_sends_a_zloss_sweep_to_this_study(tmp_path):
  # Per-cell files as a sweep leaves them, read back by python -m experiments.report's function.
  from experiments import report as report_cmd  # pylint: disable=import-outside-toplevel
  sweep = tmp_path / "sweep"
  for c in cell_records(models(held, loss_lower, seeds=grid.SEEDS[:5])):
    d = sweep / c["group"] / f"lr{c['learning_rate']:g}-s{c['seed']}"
    d.mkdir(parents=True)
    (d / "cell.json").write_text(json.dumps({"name": c["name"], "arms": c["arms"], "seed": c["seed"],
                                             "group": c["group"], "overrides": {
                                                 **c["overrides"], "train.learning_rate": c["learning_rate"]}}))
    (d / "summary.json").write_text(json.dumps({
        "status": "completed", "steps": 200, "final_val_loss": c["final_val_loss"],
        "initial_val_loss": 9.0, "unigram_val_loss": 5.29, "n_params": 1, "wall_time_s": 60.0}))
    (d / "diagnostics.jsonl").write_text("".join(
        json.dumps({"step": s, "residual_norm": [1.0], "log_z": z}) + "\n"
        for s, z in ((0, c["init"]["log_z"]), (200, c["end"]["log_z"]))))
  (sweep / "sweep.json").write_text(json.dumps({"name": "zloss", "scale": "cpu", "study": "zloss",
                                                "description": "synthetic"}))
  path = report_cmd.write_report(str(sweep), str(tmp_path / "out"), pack=str(tmp_path / "results"))
  text = open(path).read()
  assert text.startswith("# Sweep `zloss` at scale `cpu`") and "**Confirmatory study.**" in text
  assert text.count("**Reproduced.**") == 4 and "### z-loss 0.0001 holds log Z" in text
  assert json.load(open(tmp_path / "results" / "results.json"))["verdicts"][0]["verdict"] == REP
