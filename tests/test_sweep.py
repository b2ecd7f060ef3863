"""The sweep machinery on the micro grid: a vmapped group and single runs, skip on rerun,
divergence, cell files, the report from per-cell files alone; the norm_mlp study's grid."""

import dataclasses
import json
import os

import pytest

from andrea_jax import errors
from experiments import report
from research import runner as sweep_lib
from research import registry
from research import sweep as base
from research.study import Arm, Grid, Study
from experiments.studies.micro import grid as micro

# Its tests share module-scoped fixtures: on one xdist worker they are computed once
# (pyproject.toml: --dist=loadgroup).
pytestmark = pytest.mark.xdist_group("test_sweep")


@pytest.fixture(scope="module")
def swept(tmp_path_factory, data_cache):
  workdir = str(tmp_path_factory.mktemp("sweep"))
  sweep = micro.get_sweep(cache_dir=str(data_cache))
  return sweep, workdir, sweep_lib.run_sweep(sweep, workdir)


def test_cells_run_and_divergence_is_recorded(swept):
  _, workdir, records = swept
  status = {r["path"]: r["status"] for r in records}
  assert status == {"pre-long/lr0.001-s0": "completed", "pre-long/lr0.001-s1": "completed",
                    "pre-long/lr0.01-s0": "completed", "pre-long/lr0.01-s1": "completed",
                    "pre-long/lr1e+30-s0": "diverged",
                    "pre-seed0": "completed", "post-diverge-seed0": "diverged"}
  diverged = json.load(open(os.path.join(workdir, "post-diverge-seed0", "summary.json")))
  assert diverged["exit_code"] == 3 and diverged["diverged_at_step"] >= 1
  member = json.load(open(os.path.join(workdir, "pre-long", "lr1e+30-s0", "summary.json")))
  assert member["exit_code"] == 3 and member["steps"] < 12
  index = json.load(open(os.path.join(workdir, "sweep.json")))
  assert [c["status"] for c in index["cells"]] == [status[c["path"]] for c in index["cells"]]
  for path in ("pre-seed0", "pre-long/lr0.01-s1"):
    diag = [json.loads(l) for l in open(os.path.join(workdir, path, "diagnostics.jsonl"))]
    assert diag[0]["step"] == 0 and len(diag[0]["grad_mlp"]) == 1 and len(diag[0]["residual_norm"]) == 2
    assert any("update_mlp" in row for row in diag)
    cell = json.load(open(os.path.join(workdir, path, "cell.json")))
    assert cell["path"] == path and cell["arms"]
    # The code that trained it: the checked-out commit and whether the tree was clean.
    assert cell["code"] == sweep_lib.provenance.code_version() and len(cell["code"]["commit"]) == 40
    assert isinstance(cell["code"]["clean"], bool)


def test_rerun_skips_finished_cells(swept):
  sweep, workdir, _ = swept
  records = sweep_lib.run_sweep(sweep, workdir)
  assert all(r.get("skipped") for r in records)


def test_report_from_the_packed_cells_alone(swept, tmp_path):
  _, workdir, _ = swept
  # What a commit keeps: the cells packed into one file (no checkpoints or logs), the report apart.
  kept, out = tmp_path / "results" / "micro-cpu", tmp_path / "docs" / "micro-cpu"
  text = open(report.write_report(workdir, str(out), command="python -m experiments.sweep --sweep=micro",
                                  pack=str(kept))).read()
  assert "python -m experiments.sweep --sweep=micro\n" in text and "the 7 cells of cells.jsonl" in text
  assert f"--sweep_dir={workdir}" not in text  # the report prints what regenerates it from results/
  assert sorted(os.listdir(kept)) == ["cells.jsonl", "results.json", "sweep.json", "verdicts_before.json"]
  before = json.load(open(kept / "verdicts_before.json"))  # the verdicts its rules gave, for a re-expression
  assert before["rules"] == "experiments/studies/norm_mlp.py" and before["verdicts"]  # the study that judges it
  os.remove(kept / "sweep.json")
  path = report.write_report(str(kept), str(out), command="python -m experiments.sweep --sweep=micro")
  text = open(path).read()
  assert "python -m experiments.sweep --sweep=micro" in text and "the 7 cells of cells.jsonl" in text
  assert f"python -m experiments.report --sweep_dir={kept} --out={out}\n" in text  # what regenerates it
  assert "| norm:pre/long | — | 0.0" in text  # fitted between 1e-3, 1e-2 and 1e30 (diverged)
  for verdict in ("post-LN needs warmup", "SwiGLU beats GELU", "parameter-matched"):
    assert verdict in text
  results = json.load(open(kept / "results.json"))
  arm = results["arms"]["norm:pre/long"]
  assert sorted(arm["rates"]) == ["0.001", "0.01", "1e+30"] and arm["rates"]["1e+30"]["diverged"] == 1
  assert (out / "lr_norm.png").stat().st_size > 1000 and "![lr_norm.png](lr_norm.png)" in text
  assert (out / "residual_norm_end.png").stat().st_size > 1000  # pre-LN's at init and at the end
  assert sorted(p for p in os.listdir(out) if not p.endswith(".png")) == ["REPORT.md"]


def test_a_sweep_saved_in_one_session_restores_in_the_next_and_trains_nothing_again(swept, tmp_path):
  # A study longer than a session: what finished is packed (--save), committed, and written back
  # into a fresh workdir (--restore); the runner then skips every restored cell and the records
  # read back are the same.
  from research import cells as cells_lib  # pylint: disable=import-outside-toplevel
  sweep, workdir, _ = swept
  saved, fresh = str(tmp_path / "saved"), str(tmp_path / "fresh")
  assert cells_lib.pack(workdir, saved) == 7
  assert cells_lib.restore(saved, fresh, sweep.cells) == 7
  assert cells_lib.restore(saved, fresh, sweep.cells) == 0  # finished ones are left as they are
  key = lambda c: c["name"]
  assert sorted(cells_lib.load(fresh)[1], key=key) == sorted(cells_lib.load(workdir)[1], key=key)
  records = sweep_lib.run_sweep(sweep, fresh)
  assert all(r.get("skipped") for r in records) and len(records) == 7
  assert not os.path.exists(os.path.join(fresh, "pre-long", "run.log"))  # nothing trained
  # Another design's pack is refused before a file is written.
  other = [dataclasses.replace(c, overrides={**c.overrides, "train.steps": 99}) for c in sweep.cells]
  with pytest.raises(Exception, match=r"--restore=.*is not this sweep's"):
    cells_lib.restore(saved, str(tmp_path / "other"), other)
  assert not os.path.exists(tmp_path / "other")
  with pytest.raises(Exception, match=r"holds no cells.jsonl"):
    cells_lib.restore(str(tmp_path / "nothing"), fresh, sweep.cells)


def test_norm_mlp_grid_covers_the_issue():
  sweep = registry.load("norm_mlp", "cpu")
  groups = base.groups(sweep.cells)
  arms = {a for c in sweep.cells for a in c.arms}
  for norm in ("pre", "post"):
    for warm in ("none", "long"):
      cells = [c for c in sweep.cells if f"norm:{norm}/{warm}" in c.arms]
      assert len({c.learning_rate for c in cells}) >= 4 and len({c.seed for c in cells}) >= 3
      assert len({c.group for c in cells}) == 1  # the rates and seeds of an arm: one program
      assert all(c.refinable for c in cells)  # the rounds bracket their optima
  # Every arm a verdict uses has three seeds (the research rules).
  for arm in ("mlp_width:1", "mlp_width:2", "mlp_width:8", "mlp_matched:2", "mlp_matched:8",
              "swiglu", "init:xavier/post", "init:gpt2/pre"):
    cells = [c for c in sweep.cells if arm in c.arms]
    assert len({c.seed for c in cells}) >= 3, arm
  assert not any(c.learning_rate == 1e-4 for c in sweep.cells)  # taught nothing last time
  assert {"mlp_width:4", "mlp_matched:4"} <= arms
  assert all(len(members) > 1 for members in groups.values())
  assert len(groups) == len({tuple(sorted(m[0].shared().items())) for m in groups.values()})
  # Parameter-matched arms hold the non-embedding count within a few percent.
  from andrea_jax import model
  from experiments.configs import common, tiny
  counts = []
  for c in sweep.cells:
    if any(a.startswith("mlp_matched") for a in c.arms) and c.seed == 0:
      config = common.apply_overrides(tiny.get_config(), c.overrides)
      cfg = model.ModelConfig(**config.model)
      counts.append(model.count_params(cfg) - (cfg.vocab_size + cfg.block_size) * cfg.d_model)
  assert max(counts) / min(counts) < 1.05, counts


def test_groups_must_share_their_shape():
  cells = [base.Cell("a", {"model.d_model": 32, "train.learning_rate": 1e-3}, ("x",), 0, "g"),
           base.Cell("b", {"model.d_model": 64, "train.learning_rate": 1e-3}, ("x",), 1, "g")]
  with pytest.raises(ValueError, match="group 'g'"):
    base.groups(cells)


def test_unknown_sweep_and_scale_are_errors():
  with pytest.raises(ValueError, match=r"no study experiments/studies/nope.py or .*; studies: .*template"):
    registry.load("nope", "cpu")
  with pytest.raises(ValueError, match="--scale='tpu': study template has scales"):
    registry.load("template", "tpu")
  with pytest.raises(ValueError, match="--scale='tpu'"):
    registry.load("norm_mlp", "tpu")


def test_refine_adds_a_round_around_each_learning_optimum():
  from research import curves as v
  cells = [base.Cell(f"g-{lr}-{s}", {"train.learning_rate": lr, "train.seed": s, "model.d_model": 8},
                     ("a",), s, "g", 0, True) for lr in (1e-3, 3e-3, 1e-2) for s in (0, 1)]
  cells += [base.Cell("x-0", {"train.learning_rate": 1e-3, "train.seed": 0}, ("x",), 0, "x", 0, False),
            base.Cell("x-1", {"train.learning_rate": 3e-3, "train.seed": 0}, ("x",), 0, "x", 0, False)]
  loss = {1e-3: 4.9, 3e-3: 4.6, 1e-2: 4.8}
  runs = {c.path: v.Run(c.arms, c.learning_rate, c.seed, loss[c.learning_rate], 7.7, unigram=6.2)
          for c in cells}
  new = base.refine(cells, runs, 1)
  assert sorted({c.learning_rate for c in new}) == [0.00173, 0.00548]
  assert {c.group for c in new} == {"g.r1"} and {c.seed for c in new} == {0, 1}
  assert all(c.round == 1 and c.refinable and c.shared() == cells[0].shared() for c in new)
  # A group with an unfinished cell is not refined yet.
  assert base.refine(cells, {k: r for k, r in list(runs.items())[1:]}, 1) == []


# ----------------------------------------------------------------------------- the proxies ladder


def test_proxies_ladder_covers_the_issue():
  sweep = registry.load("proxies", "cpu")
  groups = base.groups(sweep.cells)
  widths = sorted({c.overrides["model.d_model"] for c in sweep.cells})
  assert len(widths) >= 4 and widths[-1] / widths[0] >= 8
  assert {a for c in sweep.cells for a in c.arms} == {"pre", "pre+qk", "pre+z", "post", "pre+mup"}
  assert len(groups) == 5 * len(widths)  # one program per (arm, width)
  for members in groups.values():
    assert len({m.learning_rate for m in members}) * len({m.seed for m in members}) == len(members)
    assert {m.seed for m in members} == {0, 1, 2} and len({m.arms for m in members}) == 1
  rates = sorted({c.learning_rate for c in sweep.cells})
  assert rates[-1] >= 1e-1 and all(b / a <= 3.34 for a, b in zip(rates, rates[1:]))
  for c in sweep.cells:
    o, arm = c.overrides, c.arms[0]
    assert (o["model.n_head"], o["model.n_layer"]) == (2, 2) and not c.refinable  # fixed heads
    assert o["train.warmup_steps"] == o["train.steps"] // 10
    assert o.get("model.qk_norm", False) == (arm == "pre+qk")
    assert o.get("train.z_loss", 0.0) == (1e-4 if arm == "pre+z" else 0.0)
    assert o["model.norm"] == ("post" if arm == "post" else "pre")
    assert (o.get("model.parametrization", "sp"), o.get("model.base_width")) == (
        ("mup", widths[0]) if arm == "pre+mup" else ("sp", None))
  assert sweep.judged_by == "proxies" and micro.get_sweep().judged_by == "norm_mlp"
  smoke, gpu = registry.load("proxies", "smoke"), registry.load("proxies", "gpu")
  assert len(smoke.cells) < len(sweep.cells) / 4 and "Smoke scale" in smoke.description
  assert smoke.cells[0].overrides["train.steps"] < sweep.cells[0].overrides["train.steps"] / 5
  assert {c.overrides["model.n_layer"] for c in gpu.cells} == {12}
  assert max(len(m) for m in base.groups(gpu.cells).values()) <= 6


def test_proxies_overrides_are_the_configs_fields():
  from experiments.configs import tiny
  if "qk_norm" not in tiny.get_config().model:
    pytest.skip("the issue-23 model side (model.qk_norm, train.z_loss, muP) is not on this branch")
  from andrea_jax import model, step as step_lib
  for scale in ("smoke", "cpu", "gpu"):
    sweep = registry.load("proxies", scale)
    for members in base.groups(sweep.cells).values():
      config = registry.group_config(sweep.base_config, members[0].overrides)
      model.ModelConfig(**config.model)  # its own checks: mup needs a base width, ...
      step_lib.TrainConfig(**config.train)


def test_a_sweep_records_the_version_of_its_own_rules(tmp_path):
  from research import identity
  sweep_lib.write_index(registry.load("proxies", "smoke"), str(tmp_path), {})
  index = json.load(open(tmp_path / "sweep.json"))
  recorded = index["rules"]
  assert index["study"] == "proxies" and recorded["sha256"] == identity.rules_version("proxies")["sha256"]
  assert recorded["modules"][0] == "experiments/studies/proxies.py"
  assert "STUDY" in recorded["definitions"] and "Contrast" in recorded["definitions"]


def test_proxies_smoke_group_end_to_end(tmp_path):
  # One program of the smoke ladder (pre+z at the narrowest width, two of its members: the
  # z-loss must reach the group's step) trained in this process as the runner's subprocess
  # would, then the proxies report from its files.
  from experiments.configs import tiny
  if "qk_norm" not in tiny.get_config().model:
    pytest.skip("the issue-23 model side (model.qk_norm, train.z_loss, muP) is not on this branch")
  import dataclasses
  sweep = registry.load("proxies", "smoke")
  cache = {"data.cache_dir": str(tmp_path / "cache")}
  cells = [dataclasses.replace(c, overrides={**c.overrides, **cache}) for c in sweep.cells
           if c.group == "pre-z-d16" and c.seed == 0 and c.learning_rate < 0.05]
  sweep, workdir = dataclasses.replace(sweep, cells=cells), str(tmp_path / "sweep")
  job, = sweep_lib.jobs(sweep, workdir)
  sweep_lib.prepare_job(sweep, job, workdir)
  from experiments import sweep as command  # pylint: disable=import-outside-toplevel
  assert command.run_group(job.directory) == 0
  sweep_lib.write_index(sweep, workdir, {})
  member = tmp_path / "sweep" / cells[0].path
  rows = [json.loads(l) for l in open(member / "metrics.jsonl")]
  assert any(r.get("z_loss", 0) > 0 for r in rows)
  diag = [json.loads(l) for l in open(member / "diagnostics.jsonl")]
  assert diag[-1]["step"] == 20 and len(diag[-1]["attn_logit_max"]) == 2 and "log_z" in diag[-1]
  text = open(report.write_report(workdir)).read()
  assert "## Predicted learning rates for andrea120m" in text and "| pre+z | d_model 16 |" in text


def test_the_code_version_is_the_commit_and_the_trees_state(tmp_path):
  import subprocess
  git = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
  git("init", "-q")
  (tmp_path / "a.py").write_text("x = 1\n")
  git("add", "a.py")
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
  head = git("rev-parse", "HEAD").strip()
  assert sweep_lib.provenance.code_version(str(tmp_path)) == {"commit": head, "clean": True}
  (tmp_path / "a.py").write_text("x = 2\n")
  assert sweep_lib.provenance.code_version(str(tmp_path)) == {"commit": head, "clean": False}
  assert sweep_lib.provenance.code_version(str(tmp_path / "nowhere")) == {"commit": None, "clean": None}
  # A cell resumed by other code keeps the earlier version.
  cell = base.Cell("c", {"train.learning_rate": 1e-3, "train.seed": 100}, ("a",), 100)
  job = sweep_lib.Job([cell], str(tmp_path / "w" / "c"), [])
  sweep_lib.prepare_job(None, job, str(tmp_path / "w"), {"commit": "1" * 40, "clean": True})
  sweep_lib.prepare_job(None, job, str(tmp_path / "w"), {"commit": "2" * 40, "clean": False})
  meta = json.load(open(os.path.join(job.directory, "cell.json")))
  assert meta["code"]["commit"] == "2" * 40 and meta["code_earlier"] == [{"commit": "1" * 40, "clean": True}]


def test_dry_run_prints_the_plan():
  from research import registry
  from experiments import sweep as command  # pylint: disable=import-outside-toplevel
  text = "\n".join(command.plan_lines(registry.load("norm_mlp_confirm", "cpu"), "runs/x"))
  assert "| pre-long | 48 |" in text and "100..107 (8)" in text
  assert "Power plan" in text and "Not powered" in text and "SwiGLU beats GELU at equal size" in text
  assert "minutes" in text and "Code: commit" in text
  # A cell that trains at its config's own rate (the micro grid's pre-seed0) is listed, not a crash.
  text = "\n".join(command.plan_lines(micro.get_sweep(), "runs/x"))
  assert "| pre-seed0 | 1 | the config's | 0..0 (1) |" in text


FAKE_JOB = """
import json, os, signal, sys, time
dirs, got = sys.argv[1:], []
signal.signal(signal.SIGINT, lambda s, f: got.append(s))
signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
for d in dirs:
  os.makedirs(d, exist_ok=True)
open(os.path.join(dirs[0], "started"), "w").close()
while not got:
  time.sleep(0.05)
time.sleep(0.5)  # saving: a second signal would arrive now
for d in dirs:
  json.dump({"status": "interrupted", "signals": got}, open(os.path.join(d, "summary.json"), "w"))
sys.exit(4)
"""

SWEEP_DRIVER = """
import dataclasses, json, sys
from research import runner
from experiments.studies.micro import grid as micro
fake, workdir = sys.argv[1:]
sweep = micro.get_sweep(cache_dir=workdir + "/cache")
real = runner.jobs
runner.jobs = lambda s, w, only="": [
    dataclasses.replace(j, command=[sys.executable, fake, *(w + "/" + c.path for c in j.cells)])
    for j in real(s, w, only)]
records = runner.run_sweep(sweep, workdir, parallel=2)
print("RECORDS", json.dumps({r["path"]: r["status"] for r in records}), flush=True)
"""


@pytest.mark.parametrize("sig, to_group", [("SIGINT", True), ("SIGTERM", False)])
def test_a_signal_to_the_sweep_stops_each_running_job_once_and_starts_no_more(tmp_path, sig, to_group):
  # Ctrl-C in a terminal (the signal to the sweep's process group), or `kill` of the sweep's
  # process alone: its running jobs (each in its own process group) get the signal once,
  # through the sweep, save and stop; the queued job never starts.
  import signal
  import subprocess
  import sys
  import time
  (tmp_path / "fake.py").write_text(FAKE_JOB)
  (tmp_path / "driver.py").write_text(SWEEP_DRIVER)
  workdir = tmp_path / "w"
  proc = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "fake.py"),
                           str(workdir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)
  started = lambda: sorted(p.parent.name for p in workdir.rglob("started"))
  deadline = time.time() + 60
  while len(started()) < 2 and time.time() < deadline and proc.poll() is None:
    time.sleep(0.1)
  assert len(started()) == 2, proc.communicate()[0] if proc.poll() is not None else started()
  sent = time.time()
  if to_group:
    os.killpg(proc.pid, getattr(signal, sig))
  else:
    proc.send_signal(getattr(signal, sig))
  out, _ = proc.communicate(timeout=30)
  assert time.time() - sent < 10, out
  records = json.loads(out.split("RECORDS ", 1)[1])
  assert sorted(records.values()).count("not started") >= 1, records
  assert {v for v in records.values()} <= {"interrupted", "not started"}, records
  for summary in workdir.rglob("summary.json"):
    assert json.load(open(summary))["signals"] == [int(getattr(signal, sig))]  # once, not twice
  assert "passed on to the 2 running job(s)" in out and "Rerun the same command" in out
  assert len(started()) == 2  # the third job never started


def test_the_rules_are_recorded_before_the_first_job_runs(tmp_path, monkeypatch):
  # Pre-registration: sweep.json holds the rules' identity before any cell trains, so rules
  # edited while the first program runs cannot be recorded as the ones fixed before it.
  from research import identity
  seen = []
  def run_job(sweep, job, workdir, *a):
    seen.append(json.load(open(os.path.join(workdir, "sweep.json"))))
    return [{"name": c.name, "path": c.path, "status": sweep_lib.NOT_STARTED, "skipped": True} for c in job.cells]
  monkeypatch.setattr(sweep_lib, "run_job", run_job)
  monkeypatch.setattr(sweep_lib.base, "REFINE_ROUNDS", 0)  # nothing trained: nothing to refine
  sweep_lib.run_sweep(registry.load("zloss_drift_late", "smoke"), str(tmp_path))
  assert seen and seen[0]["rules"]["sha256"] == identity.rules_version("zloss_drift_late")["sha256"]
  assert {c["status"] for c in seen[0]["cells"]} == {"pending"}


# ----------------------------------------------------------------------------- horizons as cooldowns


def horizons(cache_dir: str = "runs/cache", steps=(16, 8), **grid) -> Study:
  """One arm at WSD horizons ``steps`` (a quarter of each decaying), the shorter ones branched as
  cooldowns off the longest's stable phase; two rates, one seed, a loss logged every update."""
  shared = {**micro.COMMON, "data.cache_dir": cache_dir, "train.schedule": "wsd",
            "train.decay_fraction": 0.25, "train.eval_every": 2, "train.log_every": 1,
            "checkpoint.every": 100, "diagnostics.enabled": False}
  return Study("horizons", "q", "exploratory", (Arm("a"),), {"cpu": Grid(
      (1e-3, 1e-2), (0,), shared={**shared, **grid.pop("shared", {})}, axes={"train.steps": steps},
      cooldowns=True, **grid)}, ())


def test_a_grid_of_horizons_branches_the_shorter_ones_off_the_longest():
  study = horizons(steps=(8, 12, 16), members_per_program=1, seconds_per_model_step=1.0,
                   seconds_per_program=0.0)
  cells = study.sweep("cpu").cells
  at = lambda steps: [c for c in cells if c.overrides["train.steps"] == steps]
  # The longest keeps the checkpoints the others branch from (16 steps: stable to update 12).
  assert [(c.group, c.cooldown_from, c.overrides["checkpoint.keep_steps"]) for c in at(16)] == [
      ("a-steps16.0", "", "6,9"), ("a-steps16.1", "", "6,9")]
  # 8 steps decaying over the last 2 (round(0.25 x 8)): a cooldown of 2 from step 6, written as
  # the fresh WSD run it equals; each split group off its own stable group (the same members).
  assert [(c.group, c.cooldown_from, c.cooldown_step, c.trained_steps, c.overrides["train.decay_fraction"])
          for c in at(8)] == [("a-steps8.0", "a-steps16.0", 6, 2, 2 / 8), ("a-steps8.1", "a-steps16.1", 6, 2, 2 / 8)]
  assert [c.cooldown_step for c in at(12)] == [9, 9] and "checkpoint.keep_steps" not in at(12)[0].overrides
  # The plan's cost is the steps trained: one stable run and two decays per model, not 36 steps.
  assert study.minutes("cpu", cells) == pytest.approx(2 * (16 + 3 + 2) / 60)
  assert "cooldowns branched off the longest" in study.describe("cpu", cells)
  from experiments import sweep as command  # pylint: disable=import-outside-toplevel
  text = "\n".join(command.plan_lines(study.sweep("cpu"), "runs/x"))  # the dry run says so
  assert "| a-steps8.0 (cooldown off a-steps16.0 at step 6) | 1 | 0.001 |" in text


@pytest.mark.parametrize("shared, match", [
    ({"train.schedule": "cosine"}, "cooldowns branch a group's WSD runs, whose horizons and decay the grid"),
    ({"train.decay_fraction": 0.01}, r"train.decay_fraction=0.01 gives 16 steps no decay, so no cooldown")])
def test_horizons_that_cannot_branch_are_refused_when_the_sweep_is_built(shared, match):
  with pytest.raises(errors.ConfigError, match=match):
    horizons(shared=shared).sweep("cpu")


def test_a_cooldown_group_runs_after_the_group_it_branches_off(tmp_path, monkeypatch):
  # The branch's group comes first in the grid; the rules recorded: norm_mlp's, as micro's.
  sweep = dataclasses.replace(horizons(steps=(8, 16)).sweep("cpu"), study="norm_mlp")
  workdir = str(tmp_path)
  branch = next(j for j in sweep_lib.jobs(sweep, workdir) if j.cells[0].cooldown_from)
  # Its stable group not finished: not started, nothing made.
  recs = sweep_lib.run_job(sweep, branch, workdir, 0, 0, {}, sweep_lib.Jobs())
  assert {r["status"] for r in recs} == {sweep_lib.NOT_STARTED} and not os.path.exists(branch.directory)
  # Finished but holding nothing to branch from: failed, in one line naming why.
  for c in branch.cells:
    os.makedirs(os.path.join(workdir, c.cooldown_from, c.member))
    json.dump({"status": "completed"}, open(os.path.join(workdir, c.cooldown_from, c.member, "summary.json"), "w"))
  recs = sweep_lib.run_job(sweep, branch, workdir, 0, 0, {}, sweep_lib.Jobs())
  assert {r["status"] for r in recs} == {"failed"} and "has no config.json" in recs[0]["error"]
  seen = []
  def run_job(sweep, job, workdir, *a):
    seen.append(os.path.basename(job.directory))
    return [{"name": c.name, "path": c.path, "status": "completed"} for c in job.cells]
  monkeypatch.setattr(sweep_lib, "run_job", run_job)
  monkeypatch.setattr(sweep_lib.base, "REFINE_ROUNDS", 0)
  sweep_lib.run_sweep(sweep, workdir, parallel=2)
  assert seen == ["a-steps16", "a-steps8"]


def test_a_cooldown_the_sweep_branches_is_the_fresh_wsd_group_bit_for_bit(tmp_path, data_cache):
  # The acceptance of issue 70: the 8-step horizon, branched at update 6 off the 16-step run's
  # stable phase (its checkpoint kept there), logs the same losses, rates and evaluations,
  # bit for bit, as the same group trained from step 0 (the same program: schedule._planned).
  from andrea_jax import metrics, multi, run_record
  from experiments import sweep as command
  sweep, workdir = horizons(str(data_cache)).sweep("cpu"), str(tmp_path / "sweep")
  stable, branch = sweep_lib.jobs(sweep, workdir)
  for job in (stable, branch):
    sweep_lib.prepare_job(sweep, job, workdir)
    assert command.run_group(job.directory) == 0
  fresh = str(tmp_path / "fresh")
  multi.train_members(registry.group_config("tiny", branch.cells[0].shared()),
                      [multi.Member(**m) for m in sweep_lib.members(branch.cells)], fresh)
  rows = lambda d: [{k: v for k, v in r.items() if k not in metrics.CLOCK_FIELDS}
                    for r in metrics.read_rows(f"{d}/metrics.jsonl")]
  for cell in branch.cells:
    branched = rows(os.path.join(workdir, cell.path))
    assert [r["step"] for r in branched if "loss" in r] == list(range(1, 9))
    assert branched == rows(os.path.join(fresh, cell.member)), cell.member
  # Branched, not trained again: its history names the stable run and step, its own
  # checkpoints start there, and the stable run kept that step beside its newest.
  history = run_record.config_history(branch.directory)
  assert history[-1]["cooldown_from"] == {"workdir": os.path.abspath(stable.directory), "step": 6, "steps": 2}
  assert sorted(os.listdir(os.path.join(branch.directory, "checkpoints")), key=int) == ["6", "8"]
  assert "6" in os.listdir(os.path.join(stable.directory, "checkpoints"))
  # A single run (experiments.run --cooldown_from) off the group, or a group of other members:
  # one line, nothing made.
  from andrea_jax import config as config_lib, cooldown
  config = config_lib.RunConfig.from_configdict(registry.group_config("tiny", branch.cells[0].shared()))
  for members, what in ((None, "a single run"), (sweep_lib.members(branch.cells[:1]), "a group of 1 models of other")):
    with pytest.raises(errors.ConfigError, match=f"holds a group of 2 models and this cooldown is {what}"):
      cooldown.branch_cooldown(stable.directory, str(tmp_path / "other"), config, 2, 6, members=members)
  assert not (tmp_path / "other").exists()
  # Its evaluations logged the tokens each model had seen and the clock, which the record reads
  # as the loss against tokens (8 x 32 per update) and against seconds (from the stable run's on).
  from research import cells as cells_lib
  rec = cells_lib.record(cells_lib.cell_parts(workdir, branch.cells[0].path))
  assert rec["val_tokens_curve"] == [[256 * step, loss] for step, loss in rec["val_curve"]]
  seconds = [s for s, _ in rec["val_seconds_curve"]]
  assert len(seconds) == 5 and seconds == sorted(seconds) and seconds[0] > 0
