"""The run directory: one run at a time, a failed start leaves nothing, the resume rules."""

import json
import time

import pytest

from andrea_jax import errors
from andrea_jax import history
from andrea_jax import resume
from andrea_jax import train
from experiments.configs import common, tiny


def config(**changes):
  return common.apply_overrides(tiny.get_config(), changes)


def saved_run(tmp_path, **changes):
  """A workdir holding the config.json of a run started with ``changes`` (no checkpoint)."""
  (tmp_path / "config.json").write_text(config(**changes).to_json_best_effort())
  return str(tmp_path)


def test_a_second_run_of_a_held_workdir_is_refused(tmp_path):
  workdir = str(tmp_path / "run")
  with resume.claim(workdir):
    with pytest.raises(errors.CheckpointError, match=r"in use by another run \(process \d+\)"):
      train.train_and_evaluate(config(), workdir)
  with resume.claim(workdir):  # released: the next run may take it
    pass


def test_a_failed_start_removes_only_a_workdir_it_created(tmp_path):
  new, old = tmp_path / "new", tmp_path / "old"
  with pytest.raises(RuntimeError):
    with resume.claim(str(new)):
      raise RuntimeError("bad data")
  assert not new.exists()
  old.mkdir()
  (old / "notes.txt").write_text("mine")
  with pytest.raises(RuntimeError):
    with resume.claim(str(old)):
      raise RuntimeError("bad data")
  assert (old / "notes.txt").read_text() == "mine"
  with pytest.raises(RuntimeError):
    with resume.claim(str(new)) as claim:
      claim.started()
      raise RuntimeError("diverged")  # after the start the workdir is the run's
  assert new.exists()


def test_free_fields_may_change_on_resume(tmp_path):
  workdir = saved_run(tmp_path)
  free = {"train.log_every": 3, "train.eval_every": 7, "checkpoint.keep": 9,
          "sample.temperature": 0.1, "data.cache_dir": "/elsewhere", "data.prefetch": 5,
          "mesh.fsdp": 2, "diagnostics.enabled": True, "model.remat_policy": "full"}
  plan = resume.plan_resume(workdir, config(**free))
  assert plan.changes == [] and plan.start_step == 0 and not plan.complete


def test_model_and_data_changes_are_always_refused(tmp_path):
  workdir = saved_run(tmp_path)
  with pytest.raises(errors.CheckpointError, match=r"model.n_layer: 4 -> 2"):
    resume.plan_resume(workdir, config(**{"model.n_layer": 2}), allow_changes=True)
  with pytest.raises(errors.CheckpointError, match=r"data.max_docs: 0 -> 7"):
    resume.plan_resume(workdir, config(**{"data.max_docs": 7}), allow_changes=True)


def test_training_changes_need_the_opt_in_and_are_listed(tmp_path):
  workdir = saved_run(tmp_path)
  changed = config(**{"train.weight_decay": 0.0, "train.min_lr_ratio": 0.5,
                      "model.compute_dtype": "bfloat16"})
  with pytest.raises(errors.ConfigError) as e:
    resume.plan_resume(workdir, changed)
  for line in ("train.weight_decay: 0.1 -> 0.0", "train.min_lr_ratio: 0.1 -> 0.5",
               "model.compute_dtype: 'float32' -> 'bfloat16'", "--allow_resume_changes"):
    assert line in str(e.value)
  plan = resume.plan_resume(workdir, changed, allow_changes=True)
  assert [c["field"] for c in plan.changes] == [
      "model.compute_dtype", "train.min_lr_ratio", "train.weight_decay"]
  (tmp_path / "t.json").write_text("{}")  # the tokenizer record_start copies into the workdir
  resume.record_start(workdir, changed, plan, {"tokenizer_path": str(tmp_path / "t.json")})
  history = json.loads((tmp_path / "config_history.json").read_text())
  assert [h["config"]["train"]["weight_decay"] for h in history] == [0.1, 0.0]


def test_a_config_saved_before_a_field_existed_resumes_at_its_default(tmp_path):
  # config.json as written before issue 23's fields existed.
  old = json.loads(config().to_json_best_effort())
  for group, name in [f.split(".") for f in resume.ADDED_FIELDS]:
    del old[group][name]
  (tmp_path / "config.json").write_text(json.dumps(old))
  workdir = str(tmp_path)
  plan = resume.plan_resume(workdir, config())
  assert plan.changes == [] and plan.start_step == 0
  # Each value is the default experiments/configs/common.py sets, but for muP's two rules,
  # whose default changed when they became fields: an sp run ignores them (above), a muP run
  # keeps the rule it trained with.
  defaults = {f: config()[f.split(".")[0]][f.split(".")[1]] for f in resume.ADDED_FIELDS}
  changed = {f for f in resume.ADDED_FIELDS if defaults[f] != resume.ADDED_FIELDS[f]}
  assert changed == resume.MUP_RULES == {"model.mup_attention", "model.mup_decay"}
  assert resume.with_added_fields(old)["model"]["mup_attention"] == "inverse"
  mup = {"model.parametrization": "mup", "model.base_width": 16}
  old_mup = json.loads(config(**mup).to_json_best_effort())  # saved before the multipliers
  for name in ("readout_multiplier", "attention_multiplier", "embedding_multiplier",
               "mup_attention", "mup_decay", "zero_query_init"):
    del old_mup["model"][name]
  (tmp_path / "config.json").write_text(json.dumps(old_mup))
  with pytest.raises(errors.CheckpointError, match=r"model.mup_attention: 'inverse' -> 'base'"):
    resume.plan_resume(workdir, config(**mup), allow_changes=True)
  same_rules = config(**mup, **{"model.mup_attention": "inverse", "model.mup_decay": "with_rate"})
  assert resume.plan_resume(workdir, same_rules).changes == []
  (tmp_path / "config.json").write_text(json.dumps(old))
  # Against the default, a real change is still one: a model field never, z_loss with the opt-in.
  with pytest.raises(errors.CheckpointError, match=r"model.qk_norm: False -> True"):
    resume.plan_resume(workdir, config(**{"model.qk_norm": True}), allow_changes=True)
  with pytest.raises(errors.ConfigError, match=r"train.z_loss: 0.0 -> 0.0001"):
    resume.plan_resume(workdir, config(**{"train.z_loss": 1e-4}))


def test_the_clock_counts_every_earlier_segment(tmp_path):
  # An interrupted segment left its summary; a later one was killed after writing rows.
  workdir, member = tmp_path / "run", tmp_path / "run" / "a"
  member.mkdir(parents=True)
  history.write_summary(str(workdir), {"status": "interrupted", "wall_time_s": 100.0})
  (workdir / "metrics.jsonl").write_text(json.dumps({"step": 5, "loss": 1.0, "wall_time_s": 130.0}) + "\n")
  clock = history.Clock(str(workdir), start=time.time() - 2)
  assert 132 <= clock.seconds() < 140
  # A group's members keep the rows: the newest of all of them counts.
  (member / "metrics.jsonl").write_text(json.dumps({"step": 6, "wall_time_s": 150.0}) + "\n")
  assert 150 <= history.Clock(str(workdir), [str(member)]).seconds() < 160
  assert history.Clock(str(tmp_path / "new")).seconds() < 10  # a fresh run starts at zero


def test_a_workdir_file_that_is_not_json_is_one_line_naming_it_and_the_fix(tmp_path):
  # Every JSON file of a workdir is read by files.read_json: a torn one is a user error.
  (tmp_path / "config.json").write_text('{"model": {')
  with pytest.raises(errors.CheckpointError,
                     match=r"config\.json is not valid JSON \(.*\); restore it or use a fresh "
                           r"--workdir"):
    resume.plan_resume(str(tmp_path), config())
  (tmp_path / "config.json").write_text(config().to_json_best_effort())
  (tmp_path / "summary.json").write_text("")
  with pytest.raises(errors.CheckpointError, match=r"summary\.json is not valid JSON"):
    history.read_summary(str(tmp_path))
