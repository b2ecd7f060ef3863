"""The workdir's record (``andrea_jax/workdir.py``): one run at a time, a failed start
leaves nothing, the resume rules, the clock; then what a resume keeps on a real run: the
planned schedule, the data and the tokenizer it trained on.

The last tests train one small run on its own corpus (20 steps), moved and continued to 60
from another directory; then edits that a resume must refuse, and the workdir reused from
anywhere. The shrunk config is ``test_train``'s.
"""

import json
import os
import random
import re
import shutil
import time

import numpy as np
import pytest

from andrea_jax import config as config_lib
from andrea_jax import errors
from andrea_jax import metrics as metrics_lib
from andrea_jax import schedule as schedule_lib
from andrea_jax import step as step_lib
from andrea_jax import train
from andrea_jax import workdir as workdir_lib
from experiments import cli
from experiments.configs import common, tiny


def config(**changes):
  return common.apply_overrides(tiny.get_config(), changes)


def run_config(**changes) -> config_lib.RunConfig:
  return config_lib.RunConfig.from_configdict(config(**changes))


def saved_run(tmp_path, **changes):
  """A workdir holding the config.json of a run started with ``changes`` (no checkpoint)."""
  (tmp_path / "config.json").write_text(config(**changes).to_json_best_effort())
  return str(tmp_path)


def test_a_second_run_of_a_held_workdir_is_refused(tmp_path):
  workdir = str(tmp_path / "run")
  with workdir_lib.claim(workdir):
    with pytest.raises(errors.CheckpointError, match=r"in use by another run \(process \d+\)"):
      train.train_and_evaluate(config(), workdir)
  with workdir_lib.claim(workdir):  # released: the next run may take it
    pass


def test_a_failed_start_removes_only_a_workdir_it_created(tmp_path):
  new, old = tmp_path / "new", tmp_path / "old"
  with pytest.raises(RuntimeError):
    with workdir_lib.claim(str(new)):
      raise RuntimeError("bad data")
  assert not new.exists()
  old.mkdir()
  (old / "notes.txt").write_text("mine")
  with pytest.raises(RuntimeError):
    with workdir_lib.claim(str(old)):
      raise RuntimeError("bad data")
  assert (old / "notes.txt").read_text() == "mine"
  with pytest.raises(RuntimeError):
    with workdir_lib.claim(str(new)) as claim:
      claim.started()
      raise RuntimeError("diverged")  # after the start the workdir is the run's
  assert new.exists()


def test_free_fields_may_change_on_resume(tmp_path):
  workdir = saved_run(tmp_path)
  free = {"train.log_every": 3, "train.eval_every": 7, "checkpoint.keep": 9,
          "sample.temperature": 0.1, "data.cache_dir": "/elsewhere", "data.prefetch": 5,
          "mesh.fsdp": 2, "diagnostics.enabled": True, "model.remat_policy": "full"}
  plan = workdir_lib.plan_resume(workdir, run_config(**free))
  assert plan.changes == [] and plan.start_step == 0 and not plan.complete


def test_a_start_says_why_it_starts_at_step_0(tmp_path):
  """A new workdir, or one whose run stopped before its first checkpoint (a kill, a crash):
  the start says which, and how far that run had got. (A resume's line, its step and the
  age of its checkpoint: test_train's killed run.)"""
  new = tmp_path / "new"
  plan = workdir_lib.plan_resume(str(new), run_config())
  assert workdir_lib.describe_start(str(new), plan) == f"starting a new run in {new}"
  workdir = saved_run(tmp_path)
  plan = workdir_lib.plan_resume(workdir, run_config())
  assert workdir_lib.describe_start(workdir, plan) == (
      f"starting {workdir} at step 0: no checkpoint in it yet, the previous run stopped "
      f"before training")
  writer = metrics_lib.Writer(workdir, tensorboard=False)
  writer.write(0, {"val_loss": 6.0})
  for step in (10, 20):
    writer.write(step, {"loss": 5.0})
  writer.close()
  assert workdir_lib.describe_start(workdir, plan) == (
      f"starting {workdir} at step 0: no checkpoint in it yet, the previous run stopped after "
      f"step 20 (its newest row in metrics.jsonl) before its first save")


def test_model_and_data_changes_are_always_refused(tmp_path):
  workdir = saved_run(tmp_path)
  with pytest.raises(errors.CheckpointError, match=r"model.n_layer: 4 -> 2"):
    workdir_lib.plan_resume(workdir, run_config(**{"model.n_layer": 2}), allow_changes=True)
  with pytest.raises(errors.CheckpointError, match=r"data.max_docs: 0 -> 7"):
    workdir_lib.plan_resume(workdir, run_config(**{"data.max_docs": 7}), allow_changes=True)


def test_training_changes_need_the_opt_in_and_are_listed(tmp_path):
  workdir = saved_run(tmp_path)
  changed = run_config(**{"train.weight_decay": 0.0, "train.min_lr_ratio": 0.5,
                          "model.compute_dtype": "bfloat16"})
  with pytest.raises(errors.ConfigError) as e:
    workdir_lib.plan_resume(workdir, changed)
  for line in ("train.weight_decay: 0.1 -> 0.0", "train.min_lr_ratio: 0.1 -> 0.5",
               "model.compute_dtype: 'float32' -> 'bfloat16'", "--allow_resume_changes"):
    assert line in str(e.value)
  plan = workdir_lib.plan_resume(workdir, changed, allow_changes=True)
  assert [c["field"] for c in plan.changes] == [
      "model.compute_dtype", "train.min_lr_ratio", "train.weight_decay"]
  (tmp_path / "t.json").write_text("{}")  # the tokenizer record_start copies into the workdir
  workdir_lib.record_start(workdir, changed, plan, {"tokenizer_path": str(tmp_path / "t.json")})
  history = json.loads((tmp_path / "config_history.json").read_text())
  assert [h["config"]["train"]["weight_decay"] for h in history] == [0.1, 0.0]


def test_a_config_saved_before_a_field_existed_resumes_at_its_default(tmp_path):
  # config.json as written before issue 23's fields existed.
  old = json.loads(config().to_json_best_effort())
  for group, name in [f.split(".") for f in workdir_lib.ADDED_FIELDS]:
    del old[group][name]
  (tmp_path / "config.json").write_text(json.dumps(old))
  workdir = str(tmp_path)
  plan = workdir_lib.plan_resume(workdir, run_config())
  assert plan.changes == [] and plan.start_step == 0
  # Each value is the default experiments/configs/common.py sets, but for muP's two rules and
  # Muon's two, whose default changed when they became fields: an sp (AdamW) run ignores them
  # (above), a muP (Muon) run keeps the rule it trained with; and for the saves by wall time,
  # which older runs did not make (0; free to change on a resume).
  defaults = {f: config()[f.split(".")[0]][f.split(".")[1]] for f in workdir_lib.ADDED_FIELDS}
  changed = {f for f in workdir_lib.ADDED_FIELDS if defaults[f] != workdir_lib.ADDED_FIELDS[f]}
  assert changed == workdir_lib.MUP_RULES | workdir_lib.MUON_RULES | {"checkpoint.every_seconds"}
  assert workdir_lib.MUP_RULES == {"model.mup_attention", "model.mup_decay"}
  assert workdir_lib.with_added_fields(old)["model"]["mup_attention"] == "inverse"
  mup = {"model.parametrization": "mup", "model.base_width": 16}
  old_mup = json.loads(config(**mup).to_json_best_effort())  # saved before the multipliers
  for name in ("readout_multiplier", "attention_multiplier", "embedding_multiplier",
               "mup_attention", "mup_decay", "zero_query_init"):
    del old_mup["model"][name]
  (tmp_path / "config.json").write_text(json.dumps(old_mup))
  with pytest.raises(errors.CheckpointError, match=r"model.mup_attention: 'inverse' -> 'base'"):
    workdir_lib.plan_resume(workdir, run_config(**mup), allow_changes=True)
  same_rules = run_config(**mup, **{"model.mup_attention": "inverse",
                                    "model.mup_decay": "with_rate"})
  assert workdir_lib.plan_resume(workdir, same_rules).changes == []
  (tmp_path / "config.json").write_text(json.dumps(old))
  # Against the default, a real change is still one: a model field never, z_loss with the opt-in.
  with pytest.raises(errors.CheckpointError, match=r"model.qk_norm: False -> True"):
    workdir_lib.plan_resume(workdir, run_config(**{"model.qk_norm": True}), allow_changes=True)
  with pytest.raises(errors.ConfigError, match=r"train.z_loss: 0.0 -> 0.0001"):
    workdir_lib.plan_resume(workdir, run_config(**{"train.z_loss": 1e-4}))


def test_a_muon_run_saved_before_its_rules_resumes_with_them_or_says_which(tmp_path):
  # A Muon run from before issue 70 orthogonalised QKV as one matrix and did not decay its
  # Adam branch: under the new defaults its resume is refused naming both; with its own
  # settings it resumes as it ran. Flipping the branch's decay changes the optimizer state's
  # tree: refused even where changes are allowed.
  muon = {"train.optimizer": "muon"}
  old = json.loads(config(**muon).to_json_best_effort())
  for name in workdir_lib.MUON_RULES:
    del old["train"][name.split(".")[1]]
  (tmp_path / "config.json").write_text(json.dumps(old))
  workdir = str(tmp_path)
  with pytest.raises(errors.ConfigError) as refused:
    workdir_lib.plan_resume(workdir, run_config(**muon))
  assert ("train.muon_adam_decay: False -> True" in str(refused.value)
          and "train.muon_split_qkv: False -> True" in str(refused.value))
  as_it_ran = {**muon, "train.muon_split_qkv": False, "train.muon_adam_decay": False}
  assert workdir_lib.plan_resume(workdir, run_config(**as_it_ran)).changes == []
  split = run_config(**{**as_it_ran, "train.muon_split_qkv": True})
  split = workdir_lib.plan_resume(workdir, split, allow_changes=True)
  assert [c["field"] for c in split.changes] == ["train.muon_split_qkv"]  # same state tree
  with pytest.raises(errors.ConfigError, match=r"^train.muon_adam_decay: False -> True changes "
                                               r"the optimizer state's structure"):
    workdir_lib.plan_resume(workdir, run_config(**muon), allow_changes=True)


def test_the_clock_counts_every_earlier_segment(tmp_path):
  # An interrupted segment left its summary; a later one was killed after writing rows.
  workdir, member = tmp_path / "run", tmp_path / "run" / "a"
  member.mkdir(parents=True)
  workdir_lib.write_summary(str(workdir), {"status": "interrupted", "wall_time_s": 100.0})
  (workdir / "metrics.jsonl").write_text(json.dumps({"step": 5, "loss": 1.0, "wall_time_s": 130.0}) + "\n")
  clock = workdir_lib.Clock(str(workdir), start=time.time() - 2)
  assert 132 <= clock.seconds() < 140
  # A group's members keep the rows: the newest of all of them counts.
  (member / "metrics.jsonl").write_text(json.dumps({"step": 6, "wall_time_s": 150.0}) + "\n")
  assert 150 <= workdir_lib.Clock(str(workdir), [str(member)]).seconds() < 160
  assert workdir_lib.Clock(str(tmp_path / "new")).seconds() < 10  # a fresh run starts at zero



def test_the_training_clock_leaves_out_what_is_not_training_and_counts_earlier_segments(
    tmp_path, monkeypatch):
  now = [10.0]
  monkeypatch.setattr(workdir_lib.time, "perf_counter", lambda: now[0])
  (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 5, "train_time_s": 7.0}) + "\n")
  clock = workdir_lib.Clock(str(tmp_path))
  now[0] += 3.0  # compiling and the step-0 evaluation: before the clock starts
  assert clock.training_seconds() == 7.0
  clock.start_training()
  now[0] += 2.0  # steps
  with clock.not_training():  # an evaluation
    now[0] += 30.0
    assert clock.training_seconds() == 9.0
  now[0] += 1.0  # more steps
  assert clock.training_seconds() == 10.0
  with clock.not_training(), clock.not_training():  # nested: the clock stays stopped
    now[0] += 5.0
  assert clock.training_seconds() == 10.0

def test_a_workdir_file_that_is_not_json_is_one_line_naming_it_and_the_fix(tmp_path):
  # Every JSON file of a workdir is read by files.read_json: a torn one is a user error.
  (tmp_path / "config.json").write_text('{"model": {')
  with pytest.raises(errors.CheckpointError,
                     match=r"config\.json is not valid JSON \(.*\); restore it or use a fresh "
                           r"--workdir"):
    workdir_lib.plan_resume(str(tmp_path), run_config())
  (tmp_path / "config.json").write_text(config().to_json_best_effort())
  (tmp_path / "summary.json").write_text("")
  with pytest.raises(errors.CheckpointError, match=r"summary\.json is not valid JSON"):
    workdir_lib.read_summary(str(tmp_path))


# --------------------------------------------------------------- what a resume keeps, on a real run

SHRINK = {
    "model.n_layer": 1, "model.d_model": 32, "model.n_head": 2, "model.block_size": 32,
    "model.vocab_size": 300, "train.batch_size": 8, "train.steps": 20,
    "train.warmup_steps": 2, "train.learning_rate": 1e-2, "train.log_every": 1,
    "train.eval_every": 20, "train.eval_batches": 1, "checkpoint.every": 10,
    "sample.num_samples": 0, "diagnostics.enabled": False,
}
SHRINK_TRAIN = {"learning_rate": 1e-2, "min_lr_ratio": 0.1}
WORDS = "alpha beta gamma delta river stone light north garden window".split()


def config_for(corpus, cache_dir, **changes):
  return common.apply_overrides(tiny.get_config(), {
      **SHRINK, "data.path": str(corpus), "data.cache_dir": str(cache_dir), **changes})


def lrs(workdir) -> dict:
  return {r["step"]: r["lr"] for r in metrics_lib.read_metrics(str(workdir)) if "lr" in r}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  root = tmp_path_factory.mktemp("corpus")
  rng = random.Random(0)
  for i in range(3):
    (root / f"part{i}.txt").write_text("\n".join(
        " ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400)))
  return root


@pytest.fixture(scope="module")
def continued(corpus, tmp_path_factory):
  """A 20-step run started in a directory A with the relative data.cache_dir "runs/cache"
  (the default's kind), its workdir then moved, and continued to 60 steps from another
  directory B: ``(workdir, A's cache, the first segment's rates, the output of the
  continuation, B)``."""
  a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
  workdir = tmp_path_factory.mktemp("moved") / "run"
  with pytest.MonkeyPatch.context() as mp:
    mp.chdir(a)
    assert train.train_and_evaluate(config_for(corpus, "runs/cache"), "run").status == "completed"
  shutil.move(a / "run", workdir)
  first = lrs(workdir)
  with pytest.MonkeyPatch.context() as mp:
    mp.chdir(b)
    out = []
    mp.setattr("builtins.print", lambda *a, **k: out.append(" ".join(map(str, a))))
    result = train.train_and_evaluate(config_for(corpus, "runs/cache", **{"train.steps": 60}),
                                      str(workdir), allow_resume_changes=True)
  assert result.status == "completed"
  return workdir, a / "runs" / "cache", first, "\n".join(out), b


def test_a_continued_run_keeps_its_schedule_and_extends_the_decay_without_a_jump(continued,
                                                                                corpus):
  workdir, cache, first, out, _ = continued
  lr = lrs(workdir)
  assert sorted(lr) == list(range(1, 61))
  plan = schedule_lib.for_config(step_lib.TrainConfig(**config_for(corpus, cache).train))  # the 20-step plan
  for step in range(1, 21):
    assert lr[step] == first[step] == pytest.approx(float(plan(step - 1)), rel=1e-6), step
  # The seam: the first new step's rate is the saved plan's at that update, no jump after.
  assert lr[21] == pytest.approx(float(plan(20)), rel=1e-5)
  assert max(lr[s] for s in range(21, 61)) <= lr[20] * (1 + 1e-6)
  assert all(np.isfinite(list(lr.values())))
  # The accepted change was printed.
  assert "train.steps: 20 -> 60" in out and "resuming at step 20" in out


def test_a_continuation_inside_the_warmup_follows_the_longer_plan():
  t20 = dict(SHRINK_TRAIN, steps=20, warmup_steps=8)
  t60 = dict(t20, steps=60)
  t = step_lib.TrainConfig(**common.apply_overrides(
      tiny.get_config(), {f"train.{k}": v for k, v in t60.items()}).train)
  continued = schedule_lib.learning_rate(
      t.learning_rate, [(0, schedule_lib.Shape.of(t20)), (4, schedule_lib.Shape.of(t60))])
  longer = schedule_lib.for_config(t)
  for k in range(4, 60):  # the warmup was not over at the seam: as if planned for 60
    assert float(continued(k)) == pytest.approx(float(longer(k)), rel=1e-5), k


def test_the_warmup_fitted_on_the_first_start_is_kept_on_a_resume(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps({"train": {"warmup_steps": 2}}))
  config = common.apply_overrides(tiny.get_config(), {"train.steps": 60})
  assert cli.fit_to_data(config, {"train.steps": 60}, str(tmp_path)) == []
  assert config.train.warmup_steps == 2  # not tiny's 40: the saved run's
  fresh = common.apply_overrides(tiny.get_config(), {"train.steps": 20})
  assert cli.fit_to_data(fresh, {}, str(tmp_path / "new"))  # a note: fitted to 2
  assert fresh.train.warmup_steps == 2


def test_a_resume_on_edited_text_is_refused_before_any_tokenizer_is_trained(continued, corpus,
                                                                            tmp_path):
  workdir, cache, _, _, _ = continued
  edited = tmp_path / "corpus"
  shutil.copytree(corpus, edited)
  with open(edited / "part1.txt", "a", encoding="utf-8") as f:
    f.write("\nan added line\n")
  copy = tmp_path / "run"
  shutil.copytree(workdir, copy)
  (copy / "config.json").write_text((copy / "config.json").read_text().replace(
      json.dumps(str(corpus)), json.dumps(str(edited))))  # same data.path, other text
  caches = sorted(p.name for p in cache.iterdir())
  config = config_for(edited, cache, **{"train.steps": 80})
  with pytest.raises(errors.DataError, match=r"trained on other text .*corpus fingerprint "
                     r"[0-9a-f]{12}, now [0-9a-f]{12}.*new --workdir"):
    train.train_and_evaluate(config, str(copy), allow_resume_changes=True)
  assert sorted(p.name for p in cache.iterdir()) == caches  # no tokenizer trained


def test_a_resume_with_another_tokenizer_is_refused(continued, corpus, tmp_path):
  workdir, cache, _, _, _ = continued
  copy = tmp_path / "run"
  shutil.copytree(workdir, copy)
  data = json.loads((copy / "data.json").read_text())
  assert len(data["fingerprint"]) == len(data["tokenizer_sha256"]) == 64  # both recorded
  data["tokenizer_sha256"] = "0" * 64  # as if the run had trained with another tokenizer
  (copy / "data.json").write_text(json.dumps(data))
  with pytest.raises(errors.DataError, match=r"trained with another tokenizer \(sha256 "
                     r"000000000000, now [0-9a-f]{12}"):
    train.train_and_evaluate(config_for(corpus, cache, **{"train.steps": 80}), str(copy),
                             allow_resume_changes=True)


def test_a_start_that_fails_on_a_too_large_batch_leaves_no_workdir_behind(continued, corpus,
                                                                         tmp_path):
  _, cache, _, _, _ = continued
  workdir = tmp_path / "new"
  # More tokens than the encoded split holds, fewer than its bytes: found after encoding.
  config = config_for(corpus, cache, **{"train.batch_size": 2000})
  with pytest.raises(errors.DataError, match=r"train.batch_size=2000 .* training tokens of the shards .* use a "
                     r"train.batch_size of at most \d+"):
    train.train_and_evaluate(config, str(workdir))
  assert not workdir.exists()  # the retry with the suggested batch size is a fresh start


# ------------------------------------------------------- a workdir reused from anywhere (issue 44)


def test_a_moved_workdir_resumes_from_another_directory_on_the_data_it_recorded(continued):
  """The continuation ran from B with data.cache_dir="runs/cache": it read the shards where
  the run recorded them (A's cache), and prepared nothing into B."""
  workdir, cache, _, out, elsewhere = continued
  assert not (elsewhere / "runs").exists()
  assert "data:" not in out
  assert json.loads((workdir / "data.json").read_text())["directory"].startswith(str(cache))


def test_a_finished_workdir_is_already_complete_from_anywhere_without_touching_data(
    continued, corpus, tmp_path, monkeypatch, capsys):
  """``python -m experiments.run`` (``cli.fit_to_data``, then the run) on a copied finished
  workdir from another directory: "already complete", and no runs/cache made there."""
  workdir, _, _, _, _ = continued
  copy = tmp_path / "copy"
  shutil.copytree(workdir, copy)
  monkeypatch.chdir(tmp_path)
  changes = {"data.path": str(corpus), "data.cache_dir": "runs/cache", "train.steps": 60}
  config = config_for(corpus, "runs/cache", **changes)
  assert cli.fit_to_data(config, {**SHRINK, **changes}, str(copy)) == []
  result = train.train_and_evaluate(config, str(copy))
  assert result.already_complete and "already complete at step 60" in capsys.readouterr().out
  assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]


def test_a_resume_whose_recorded_data_is_gone_finds_it_prepares_it_again_or_says_what_is_missing(
    continued, corpus, tmp_path, monkeypatch, capsys):
  workdir, cache, _, _, _ = continued
  copy = tmp_path / "copy"
  shutil.copytree(workdir, copy)
  recorded = json.loads((copy / "data.json").read_text())["directory"]
  key, old = os.path.basename(recorded), str(tmp_path / "gone" / os.path.basename(recorded))
  (copy / "data.json").write_text((copy / "data.json").read_text().replace(recorded, old))
  monkeypatch.chdir(tmp_path)
  prepare_data = lambda path, cache_dir: train.prepare_data(config_lib.RunConfig.from_configdict(
      config_for(path, cache_dir)), workdir=str(copy))
  # The cache moved (its entry is under data.cache_dir) and the corpus is gone: found there.
  assert prepare_data(tmp_path / "nowhere", cache).directory == str(cache / key)
  # Neither the entry nor the corpus: what is missing, and the fixes.
  with pytest.raises(errors.DataError, match=re.escape(
      f"the prepared data this run recorded, {old}, is gone (no {old}/manifest.json), and its "
      f"source cannot be read either (data.path '{tmp_path / 'nowhere'}' does not exist") + ".*" +
      re.escape(f": restore that directory, pass --config.data.cache_dir=<the directory that "
                f"now holds {key}/>, or restore the source")):
    prepare_data(tmp_path / "nowhere", "runs/cache")
  capsys.readouterr()
  # The corpus there: prepared again (the same entry), and said.
  assert prepare_data(corpus, "runs/cache").directory == os.path.join("runs/cache", key)
  assert (f"data: the prepared data this run recorded, {old}, is gone (no {old}/manifest.json); "
          f"preparing it again from its source into data.cache_dir='runs/cache'"
          in capsys.readouterr().out)


def test_a_damaged_tokenizer_copy_in_a_workdir_says_how_to_fix_it(continued, tmp_path):
  workdir, _, _, _, _ = continued
  copy = tmp_path / "copy"
  shutil.copytree(workdir, copy)
  (copy / "tokenizer.json").write_text("")
  with pytest.raises(errors.DataError, match=r"tokenizer.json' is not a readable tokenizer.json "
                     r"\(.*\); restore it, or delete it to read the one .*/copy/data.json names"):
    workdir_lib.load_run(str(copy))
  (copy / "tokenizer.json").unlink()  # as the message says: the one data.json names is read
  assert workdir_lib.load_run(str(copy))[2].get_vocab_size() == 300


def test_sample_settings_the_run_could_not_end_with_are_refused_at_its_start(continued, corpus,
                                                                             tmp_path):
  """Before: the run trained, then failed on its samples and never wrote its summary."""
  _, cache, _, _, _ = continued
  config = config_for(corpus, cache, **{"sample.num_samples": 1, "sample.max_new_tokens": 64})
  with pytest.raises(errors.ConfigError, match=r"the samples this run ends with: prompt length "
                     r"\d+ \+ max_new_tokens 64 = \d+ exceeds the context block_size=32 .*; set "
                     r"--config.sample.max_new_tokens"):
    train.train_and_evaluate(config, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()
