"""The real training loop, shrunk (Flax-example style): learning, resume, signals, divergence."""

import datetime
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import types

import jax
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from andrea_jax import checkpoint as ckpt
from andrea_jax import config as config_lib
from andrea_jax import errors
from andrea_jax import loop
from andrea_jax import metrics as metrics_lib
from andrea_jax import model
from andrea_jax import prepare as prepare_lib
from andrea_jax import scoring
from andrea_jax import schedule as schedule_lib
from andrea_jax import step as step_lib
from andrea_jax import train
from andrea_jax import workdir as workdir_lib
from experiments.configs import common, tiny

# Its tests share module-scoped fixtures: on one xdist worker they are computed once
# (pyproject.toml: --dist=loadgroup).
pytestmark = pytest.mark.xdist_group("test_train")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The tiny config shrunk to one small layer, a small vocabulary and a slice of the corpus.
SHRINK = {
    "model.n_layer": 1, "model.d_model": 32, "model.n_head": 2, "model.block_size": 32,
    "model.vocab_size": 321, "data.max_docs": 40, "train.batch_size": 8, "train.steps": 24,
    "train.warmup_steps": 2, "train.learning_rate": 1e-2, "train.log_every": 1,
    "train.eval_every": 12, "train.eval_batches": 2, "checkpoint.every": 6,
    "sample.num_samples": 1, "sample.max_new_tokens": 8,
}


def small_config(data_cache, **changes):
  return common.apply_overrides(tiny.get_config(),
                                {**SHRINK, "data.cache_dir": str(data_cache), **changes})


def overrides(data_cache, **changes):
  return [f"--config.{k}={v}" for k, v in {**SHRINK, "data.cache_dir": data_cache, **changes}.items()]


def losses(workdir):
  return {r["step"]: r["loss"] for r in metrics_lib.read_metrics(str(workdir)) if "loss" in r}


@pytest.fixture(scope="module")
def full_run(data_cache, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("full")
  result = train.train_and_evaluate(small_config(data_cache), str(workdir))
  return workdir, result


def test_real_loop_learns_and_writes_its_outputs(full_run):
  workdir, result = full_run
  assert result.status == "completed" and result.exit_code == 0
  curve = losses(workdir)
  assert sorted(curve) == list(range(1, 25))
  assert np.mean([curve[s] for s in (22, 23, 24)]) < curve[1] - 0.5
  s = json.loads((workdir / "summary.json").read_text())
  assert s["steps"] == 24 and s["final_val_loss"] < s["initial_val_loss"] - 1.0
  assert s["val_bpb"] == pytest.approx(metrics_lib.read_metrics(str(workdir))[-1]["val_bpb"])
  # The training clock: the steps alone, so below the wall time and still at step 0's evaluation.
  rows = metrics_lib.read_metrics(str(workdir))
  trained = [r["train_time_s"] for r in rows]
  assert trained[0] == 0.0 and trained == sorted(trained) and trained[-1] > 0
  assert all(r["train_time_s"] < r["wall_time_s"] for r in rows if "wall_time_s" in r)
  assert 0 < s["val_bpb"] < s["final_val_loss"] / np.log(2)  # more than one byte per token
  assert s["n_params"] == model.count_params(model.ModelConfig(**small_config("x").model))
  assert len(s["corpus_fingerprint"]) == 64 and len(s["samples"]) == 1
  for name in ("loss.png", "config.json", "metrics.jsonl", "samples.txt"):
    assert (workdir / name).stat().st_size > 0, name
  assert os.listdir(workdir / "tensorboard")
  assert sorted(int(p) for p in os.listdir(workdir / "checkpoints") if p.isdigit()) == [12, 18, 24]


def test_attention_learns_what_token_statistics_cannot(data_cache, tmp_path):
  """On documents that each repeat one random word, the next token given the current one is
  as random as the token frequencies (an attention-less model, its attention output zeroed,
  reached the unigram loss, 3.88, measured at 200 steps): only attending to the word's
  previous copy predicts it. The real loop got 2.81 in 400 steps."""
  rng = np.random.default_rng(0)
  words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), 7)) for _ in range(400)]
  corpus = tmp_path / "copy.jsonl"
  corpus.write_text("".join(json.dumps({"text": " ".join([w] * 30)}) + "\n" for w in words))
  config = small_config(tmp_path / "cache", **{
      "data.path": str(corpus), "data.max_docs": 0, "train.steps": 400, "train.log_every": 100,
      "train.eval_every": 400, "checkpoint.every": 400, "sample.num_samples": 0})
  s = train.train_and_evaluate(config, str(tmp_path / "run")).summary
  assert s["final_val_loss"] < s["unigram_val_loss"] - 0.5, s


def test_rerunning_a_finished_run_leaves_it_untouched(full_run, data_cache, capsys):
  workdir, _ = full_run
  files = lambda: {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in workdir.iterdir()
                   if p.is_file() and p.name != ".lock"}  # the lock is held, so touched
  before = files()
  result = train.train_and_evaluate(small_config(data_cache), str(workdir))
  assert result.already_complete and result.status == "completed" and result.exit_code == 0
  assert "already complete at step 24" in capsys.readouterr().out
  assert files() == before and "summary.json" in before
  assert result.summary["final_val_loss"] is not None  # the finished run's own summary
  jax.tree.map(np.testing.assert_array_equal, result.state["params"], full_run[1].state["params"])


@pytest.mark.parametrize("changes, named", [
    ({"train.learning_rate": 1e-3, "train.b2": 0.99},
     ["train.learning_rate: 0.01 -> 0.001", "train.b2: 0.95 -> 0.99"]),
    ({"train.steps": 30}, ["train.steps: 24 -> 30"]),  # more steps on a finished run
    ({"train.seed": 1, "train.grad_accum_steps": 2},
     ["train.seed: 0 -> 1", "train.grad_accum_steps: 1 -> 2"]),
])
def test_resume_that_changes_training_settings_is_refused(full_run, data_cache, changes, named):
  workdir, _ = full_run
  config_before = (workdir / "config.json").read_text()
  with pytest.raises(errors.ConfigError, match="--allow_resume_changes") as e:
    train.train_and_evaluate(small_config(data_cache, **changes), str(workdir))
  for line in named:
    assert line in str(e.value)
  assert (workdir / "config.json").read_text() == config_before


def test_resume_with_allowed_changes_keeps_the_history(full_run, data_cache, tmp_path):
  source, _ = full_run
  workdir = tmp_path / "run"
  shutil.copytree(source, workdir)
  changes = {"train.steps": 27, "train.learning_rate": 1e-3, "checkpoint.every": 100}
  result = train.train_and_evaluate(small_config(data_cache, **changes), str(workdir),
                                    allow_resume_changes=True)
  assert result.status == "completed" and int(result.state["step"]) == 27
  history = json.loads((workdir / "config_history.json").read_text())
  assert [h["start_step"] for h in history] == [0, 24]
  assert history[0]["config"]["train"]["learning_rate"] == 1e-2
  assert history[1]["config"]["train"]["learning_rate"] == 1e-3
  assert {c["field"] for c in history[1]["changes"]} == {"train.steps", "train.learning_rate"}
  segments = json.loads((workdir / "summary.json").read_text())["config_segments"]
  assert segments == [{k: h[k] for k in ("start_step", "changes")} for h in history]
  assert json.loads((workdir / "config.json").read_text())["train"]["steps"] == 27
  assert sorted(losses(workdir)) == list(range(1, 28))


def test_switching_gradient_clipping_on_resume_says_why_it_cannot(full_run, data_cache):
  workdir, _ = full_run
  with pytest.raises(errors.ConfigError, match=r"train.grad_clip: 1.0 -> 0.0 switches gradient "
                                               r"clipping off.*optimizer state's structure"):
    train.train_and_evaluate(small_config(data_cache, **{"train.grad_clip": 0.0}), str(workdir),
                             allow_resume_changes=True)
  # Restoring the state straight into the other optimizer names what differs.
  config = small_config(data_cache, **{"train.grad_clip": 0.0})
  abstract = step_lib.abstract_state(model.ModelConfig(**config.model),
                                     step_lib.make_optimizer(step_lib.TrainConfig(**config.train)), 0)
  with pytest.raises(ckpt.CheckpointError, match=r"only in the checkpoint: opt_state/1/"):
    ckpt.restore(ckpt.manager(str(workdir / "checkpoints"), 6, 3), abstract)


def test_load_run_restores_the_parameters_alone(full_run, monkeypatch):
  workdir, result = full_run
  def refuse(*args, **kwargs):
    raise AssertionError("load_run built an optimizer or a training state")
  monkeypatch.setattr(step_lib, "make_optimizer", refuse)
  monkeypatch.setattr(step_lib, "init_state", refuse)
  monkeypatch.setattr(optax, "adamw", refuse)
  params, cfg, tok, config = workdir_lib.load_run(str(workdir))
  jax.tree.map(np.testing.assert_array_equal, params, result.state["params"])
  assert cfg.d_model == 32 and config.train.steps == 24 and tok.get_vocab_size() == 321
  older, *_ = workdir_lib.load_run(str(workdir), 12)
  assert not np.array_equal(older["wte"], params["wte"])


def test_a_step_that_does_not_exist_lists_the_available_ones(full_run):
  workdir, _ = full_run
  with pytest.raises(ckpt.CheckpointError,
                     match=r"step 5 does not exist .*available steps: 12, 18, 24"):
    workdir_lib.load_run(str(workdir), 5)


# ----------------------------------------------------------------------------- evaluation only


def test_a_saved_step_scores_what_the_run_logged_and_nothing_is_written(full_run):
  """``experiments.evaluate`` (``scoring.evaluate_run``): the newest checkpoint on the run's
  own validation set scores its logged final val_loss; ``step`` picks an older one (here
  with ``data`` naming the workdir: the data it trained on, the same batches)."""
  workdir, _ = full_run
  logged = {r["step"]: r for r in metrics_lib.read_metrics(str(workdir)) if "val_loss" in r}
  before = sorted((p, p.stat().st_mtime_ns) for p in workdir.rglob("*"))
  for step, data in ((None, None), (12, str(workdir))):
    result = scoring.evaluate_run(str(workdir), step, data)
    row = logged[step or 24]
    assert result["step"] == (step or 24) and result["eval_batches"] == 2
    assert result["val_loss"] == pytest.approx(row["val_loss"], rel=1e-6), step
    assert result["val_bpb"] == pytest.approx(row["val_bpb"], rel=1e-6), step
  summary = json.loads((workdir / "summary.json").read_text())
  assert result["unigram_val_loss"] == pytest.approx(summary["unigram_val_loss"])
  assert sorted((p, p.stat().st_mtime_ns) for p in workdir.rglob("*")) == before


def test_evaluating_on_data_of_another_tokenizer_is_refused(full_run, data_cache):
  workdir, _ = full_run
  # Twenty more documents: a tokenizer trained on them, of the same size as the run's.
  other = prepare_lib.prepare(config_lib.run_config(small_config(
      data_cache, **{"data.max_docs": 60})))
  assert other.vocab_size == 321
  with pytest.raises(errors.DataError) as refused:
    scoring.evaluate_run(str(workdir), data=other.directory)
  message = str(refused.value)
  assert "\n" not in message and "trained with another tokenizer" in message
  assert other.directory in message and (
      f"--config.data.tokenizer_path={workdir / 'tokenizer.json'}") in message


@pytest.mark.parametrize("where, step, named", [
    ("missing", None, r"run directory '.*missing' does not exist: pass the --workdir"),
    ("run", 7, r"step 7 does not exist .*available steps: 12, 18, 24"),
    ("run", None, r"--data='.*' is neither a prepared data directory")])
def test_evaluating_what_is_not_there_is_one_line(full_run, tmp_path, where, step, named):
  workdir = full_run[0] if where == "run" else tmp_path / where
  data = str(tmp_path) if named.startswith("--data") else None
  with pytest.raises(errors.AndreaError, match=named):
    scoring.evaluate_run(str(workdir), step, data)


def test_a_failed_start_leaves_no_workdir(data_cache, tmp_path):
  workdir = tmp_path / "new"
  # Fails after the data is prepared: the validation split is shorter than one window.
  config = small_config(data_cache, **{"model.block_size": 100000})
  with pytest.raises(errors.DataError):
    train.train_and_evaluate(config, str(workdir))
  assert not workdir.exists()


def test_a_run_with_qk_norm_mup_z_loss_and_dropout_resumes_exactly(data_cache, tmp_path):
  # Every new option at once (their diagnostics: tests/test_multi.py): 8 steps straight,
  # then the same run stopped after step 4 (later checkpoint, metrics and summary dropped)
  # and resumed. The resumed steps draw the dropout masks the straight run drew.
  options = {"model.qk_norm": True, "model.parametrization": "mup", "model.base_width": 16,
             "model.loss_chunk": 64, "model.dropout": 0.1, "train.z_loss": 1e-2,
             "train.steps": 8, "train.eval_every": 8, "checkpoint.every": 4,
             "sample.num_samples": 0}
  straight, resumed = tmp_path / "straight", tmp_path / "resumed"
  first = train.train_and_evaluate(small_config(data_cache, **options), str(straight))
  assert first.status == "completed"
  shutil.copytree(straight, resumed)
  shutil.rmtree(resumed / "checkpoints" / "8")
  for name in ("metrics.jsonl", "summary.json"):
    os.remove(resumed / name)
  second = train.train_and_evaluate(small_config(data_cache, **options), str(resumed))
  assert second.status == "completed" and int(second.state["step"]) == 8
  jax.tree.map(np.testing.assert_array_equal, second.state, first.state)
  rows = [r for r in metrics_lib.read_metrics(str(straight)) if "loss" in r]
  assert all(r["z_loss"] > 0 for r in rows)  # the z-loss, logged apart from the loss


# Muon's and WSD's runs, shrunk further: 8 steps, checkpoints at 4 and 8.
SHORT = {"train.steps": 8, "train.eval_every": 8, "checkpoint.every": 4, "sample.num_samples": 0}


def stopped_before_last(straight, resumed, last: int = 8):
  """``resumed``: a copy of the run in ``straight`` as it was before it saved step ``last``
  (that checkpoint, the metrics and the summary dropped)."""
  shutil.copytree(straight, resumed)
  shutil.rmtree(resumed / "checkpoints" / str(last))
  for name in ("metrics.jsonl", "summary.json"):
    os.remove(resumed / name)


@pytest.mark.parametrize("options", [{"train.optimizer": "muon", "train.adam_lr_ratio": 0.5},
                                     {"train.schedule": "wsd", "train.decay_fraction": 0.5}],
                         ids=["muon", "wsd"])
def test_a_muon_or_wsd_run_checkpoints_and_resumes_exactly(data_cache, tmp_path, options):
  straight, resumed = tmp_path / "straight", tmp_path / "resumed"
  config = small_config(data_cache, **SHORT, **options)
  first = train.train_and_evaluate(config, str(straight))
  assert first.status == "completed"
  stopped_before_last(straight, resumed)
  second = train.train_and_evaluate(config, str(resumed))
  assert second.status == "completed" and int(second.state["step"]) == 8
  jax.tree.map(np.testing.assert_array_equal, second.state, first.state)
  t = step_lib.TrainConfig(**config.train)  # the logged rates are the optimizer's schedule
  assert [r["lr"] for r in metrics_lib.read_metrics(str(straight)) if "lr" in r] == [
      pytest.approx(float(schedule_lib.for_config(t)(k)), rel=1e-6) for k in range(8)]


def tree_digest(directory) -> dict:
  return {os.path.relpath(p, directory): open(p, "rb").read()
          for p in glob.glob(f"{directory}/**", recursive=True) if os.path.isfile(p)}


def test_a_cooldown_from_a_stable_checkpoint_is_the_shorter_wsd_run_and_resumes_exactly(
    data_cache, tmp_path):
  # One WSD run of 16 steps (stable to update 12, checkpoints every 4) branched at step 8
  # into a decay of 4 updates: the WSD run planned for 12 steps with the last 4 decaying,
  # in a new workdir; the long run's files stay as they were.
  wsd = {**SHORT, "train.schedule": "wsd", "train.decay_fraction": 0.25, "train.steps": 16}
  long, cool, fresh = tmp_path / "long", tmp_path / "cool", tmp_path / "fresh"
  assert train.train_and_evaluate(small_config(data_cache, **wsd), str(long)).status == "completed"
  before = tree_digest(long)
  # The cooldown saves every 2 steps (a free setting): 10 and 12, to resume from 10 below.
  command = config_lib.RunConfig.from_configdict(small_config(data_cache, **{
      **wsd, "checkpoint.every": 2, "train.decay_shape": "linear"}))
  config = workdir_lib.branch_cooldown(str(long), str(cool), command, steps=4, step=8)
  assert (config.train.steps, config.train.schedule, config.train.decay_shape) == (12, "wsd", "linear")
  cooled = train.train_and_evaluate(config, str(cool))
  planned = train.train_and_evaluate(small_config(data_cache, **{
      **wsd, "train.steps": 12, "train.decay_fraction": 4 / 12, "train.decay_shape": "linear"}),
      str(fresh))
  assert cooled.status == planned.status == "completed" and int(cooled.state["step"]) == 12
  # The same rates and batches through the same program (the cooldown's schedule is the
  # planned run's own: schedule._planned), so the same bits.
  jax.tree.map(np.testing.assert_array_equal, cooled.state, planned.state)
  assert losses(cool) == losses(fresh)
  assert sorted(losses(cool)) == list(range(1, 13))
  assert [r.get("lr") for r in metrics_lib.read_metrics(str(cool))] == [
      r.get("lr") for r in metrics_lib.read_metrics(str(fresh))]
  assert tree_digest(long) == before  # the source is only read
  # Its history: the long run's plan up to step 8, then the cooldown's, naming its source.
  history = workdir_lib.config_history(str(cool))
  assert [s["start_step"] for s in history] == [0, 8]
  assert history[-1]["cooldown_from"] == {"workdir": str(long), "step": 8, "steps": 4}
  assert {c["field"] for c in history[-1]["changes"]} == {
      "train.steps", "train.decay_fraction", "train.decay_shape"}
  assert cooled.summary["config_segments"][-1]["cooldown_from"]["step"] == 8
  # Stopped after its step 10 and rerun with the same command: resumes exactly.
  again = tmp_path / "again"
  stopped_before_last(cool, again, last=12)
  shutil.rmtree(again / "checkpoints" / "8")  # the newest left is the cooldown's own, 10
  rerun = workdir_lib.branch_cooldown(str(long), str(again), command, steps=4)
  assert rerun == config  # the branch it holds, not a new one (nor the long run's newest step)
  resumed = train.train_and_evaluate(rerun, str(again))
  assert resumed.status == "completed"
  jax.tree.map(np.testing.assert_array_equal, resumed.state, cooled.state)


@pytest.mark.parametrize("step, steps, match", [
    (2, 3, "step 2 does not exist in"), (4, 0, "--cooldown_steps=0: expected a positive"),
    (None, 3, "changes training settings besides its decay:\n  train.batch_size: 8 -> 4")])
def test_a_cooldown_that_cannot_branch_is_one_line_and_leaves_nothing(full_run, data_cache,
                                                                      tmp_path, step, steps, match):
  command = config_lib.RunConfig.from_configdict(small_config(
      data_cache, **({"train.batch_size": 4} if step is None else {})))
  with pytest.raises(ValueError, match=match):
    workdir_lib.branch_cooldown(str(full_run[0]), str(tmp_path / "cool"), command, steps, step)
  assert not (tmp_path / "cool").exists()


def test_checkpoint_holds_the_final_state(full_run, data_cache):
  workdir, result = full_run
  config = small_config(data_cache)
  cfg = model.ModelConfig(**config.model)
  optimizer = step_lib.make_optimizer(step_lib.TrainConfig(**config.train))
  mngr = ckpt.manager(str(workdir / "checkpoints"), 6, 3)
  restored = ckpt.restore(mngr, step_lib.abstract_state(cfg, optimizer, 0))
  assert int(restored["step"]) == 24
  jax.tree.map(np.testing.assert_array_equal, restored["params"], result.state["params"])


def test_unigram_loss_is_the_cross_entropy_of_token_frequencies():
  tokens = np.array([0, 0, 0, 1])
  eval_set = np.array([[[9, 0, 1]]])  # targets 0 and 1
  p = (np.array([3, 1, 0]) + 1) / 7
  expected = -(np.log(p[0]) + np.log(p[1])) / 2
  assert loop.unigram_loss(tokens, eval_set, 3) == pytest.approx(expected)


def test_weight_decay_only_on_matrices_and_embeddings():
  cfg = model.ModelConfig(vocab_size=11, block_size=4, d_model=8, n_layer=2, n_head=2,
                          tie_embeddings=False)
  mask = step_lib.decay_mask(jax.eval_shape(lambda k: model.init_params(cfg, k), jax.random.key(0)))
  assert mask["wte"] and mask["wpe"] and mask["lm_head"]
  assert mask["blocks"]["attn"]["w_qkv"] and not mask["blocks"]["attn"]["b_qkv"]
  assert mask["blocks"]["mlp"]["w_out"] and not mask["blocks"]["ln_2"]["scale"]
  assert not mask["ln_f"]["bias"]


def test_schedule_warms_up_from_above_zero_then_decays_to_the_floor(data_cache):
  t = step_lib.TrainConfig(**small_config(data_cache, **{"train.warmup_steps": 4}).train)
  lr = schedule_lib.for_config(t)
  for k in range(t.warmup_steps + 1):  # update k of the warmup: peak * (k + 1) / (warmup + 1)
    assert lr(k) == pytest.approx(t.learning_rate * (k + 1) / (t.warmup_steps + 1))
  assert lr(0) > 0
  assert lr(t.steps) == pytest.approx(t.learning_rate * t.min_lr_ratio)
  assert t.learning_rate * t.min_lr_ratio < lr((t.warmup_steps + t.steps) // 2) < t.learning_rate


def test_a_diverging_run_stops_at_its_first_non_finite_step_and_keeps_the_last_finite_checkpoint(
    data_cache, tmp_path, capsys):
  config = small_config(data_cache, **{"train.learning_rate": 1e4, "train.grad_clip": 0.0,
                                      "train.warmup_steps": 0, "train.steps": 30,
                                      "train.log_every": 1, "train.eval_every": 1,
                                      "checkpoint.every": 1})
  result = train.train_and_evaluate(config, str(tmp_path))
  s = json.loads((tmp_path / "summary.json").read_text())
  assert result.status == s["status"] == "diverged" and result.exit_code == train.EXIT_DIVERGED == 3
  assert s["diverged_at_step"] == s["steps"] + 1 and s["steps"] < 30
  # No final validation loss; the last evaluation, of the last finite state, is named as such.
  rows = metrics_lib.read_metrics(str(tmp_path))
  assert s["final_val_loss"] is None and s["val_bpb"] is None
  assert s["last_val_loss_step"] == s["steps"]
  assert s["last_val_loss"] == [r["val_loss"] for r in rows if "val_loss" in r][-1]
  # Stopped at the first non-finite step: no row from it or after it.
  assert max(r["step"] for r in rows) == s["steps"]
  assert all(np.isfinite(r["loss"]) for r in rows if "loss" in r)
  # Every good step was saved; the diverged one was not: the newest is the last finite state.
  assert s["latest_checkpoint"] == s["steps"] >= 1
  params = workdir_lib.load_run(str(tmp_path))[0]
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(result.state["params"])):
    assert np.all(np.isfinite(a))
    np.testing.assert_array_equal(a, b)
  # A rerun with the same settings is not retrained into the same divergence: exit 3,
  # where it diverged and how to go on.
  capsys.readouterr()
  again = train.train_and_evaluate(config, str(tmp_path))
  out = capsys.readouterr().out
  assert again.status == "diverged" and again.exit_code == 3, out
  assert f"diverged at step {s['diverged_at_step']}" in out and "--allow_resume_changes" in out
  assert f"last finite checkpoint is step {s['steps']}" in out
  assert metrics_lib.read_metrics(str(tmp_path)) == rows  # nothing retrained


def test_resuming_with_a_different_model_is_refused(full_run, data_cache):
  workdir, _ = full_run
  config = small_config(data_cache, **{"model.n_head": 4, "data.val_fraction": 0.1})
  with pytest.raises(ckpt.CheckpointError, match=r"model.n_head: 2 -> 4") as e:
    train.train_and_evaluate(config, str(workdir))
  assert "data.val_fraction: 0.05 -> 0.1" in str(e.value)


def test_corrupt_checkpoint_is_a_clear_error(full_run, data_cache, tmp_path):
  workdir, _ = full_run
  mngr = ckpt.manager(str(workdir / "checkpoints"), 6, 3)
  config = small_config(data_cache, **{"model.d_model": 64})
  cfg = model.ModelConfig(**config.model)
  optimizer = step_lib.make_optimizer(step_lib.TrainConfig(**config.train))
  with pytest.raises(ckpt.CheckpointError,
                     match=r"does not match this run's state: different shapes: params/blocks/attn/"
                     r"b_out \(1, 32\) in the checkpoint vs \(1, 64\) here"):
    ckpt.restore(mngr, step_lib.abstract_state(cfg, optimizer, 0))


@pytest.mark.parametrize("field, value, match", [
    ("steps", 0, "train.steps=0"), ("grad_accum_steps", 3, "not divisible by train.grad_accum_steps=3"),
    ("warmup_steps", 50, "train.warmup_steps=50"), ("z_loss", -1.0, "train.z_loss=-1.0"),
    ("wandb_mode", "yes", "train.wandb_mode='yes': expected one of .'off', 'offline', 'online'."),
    ("optimizer", "sgd", r"^train.optimizer='sgd': expected one of \('adamw', 'muon'\)$"),
    ("adam_lr_ratio", -1.0, r"^train.adam_lr_ratio=-1.0: expected a positive multiple"),
    ("muon_momentum", 1.5, r"^train.muon_momentum=1.5: expected a value in \[0, 1\)"),
    ("muon_consistent_rms", -1.0, r"^train.muon_consistent_rms=-1.0: expected 0"),
    ("schedule", "linear", r"^train.schedule='linear': expected one of \('cosine', 'wsd'\)$"),
    ("decay_shape", "exp", r"^train.decay_shape='exp': expected one of"),
    ("decay_fraction", -0.1, r"^train.decay_fraction=-0.1: expected a fraction"),
    ("task_eval_every", -1,
     r"^train.task_eval_every=-1: expected 0 \(off\) or a positive number of updates$"),
    ("task_examples", -5,
     r"^train.task_examples=-5: expected 0 \(all of them\) or a positive number of examples$")])
def test_bad_train_config(field, value, match, data_cache, tmp_path):
  config = small_config(data_cache, **{f"train.{field}": value})
  with pytest.raises(ValueError, match=match):
    train.train_and_evaluate(config, str(tmp_path))


def test_an_unknown_task_style_is_one_line_naming_the_styles(data_cache, tmp_path):
  config = small_config(data_cache, **{"train.task_style": "harness"})
  with pytest.raises(ValueError, match=r"^train.task_style='harness': expected one of "
                     r"\('lmeval', 'llmc'\) \(lmeval: lm-eval-harness's HellaSwag, llmc: llm.c's\)$"):
    train.train_and_evaluate(config, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()


def test_muon_with_mup_is_one_line_naming_both(data_cache, tmp_path):
  config = small_config(data_cache, **{"train.optimizer": "muon", "model.parametrization": "mup",
                                       "model.base_width": 16})
  with pytest.raises(ValueError, match=r"^train.optimizer='muon' with model.parametrization='mup'"):
    train.train_and_evaluate(config, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------- Weights & Biases

# wandb's settings from the environment: no system metrics, console capture, banner or git
# probe (each costs start-up time); never the network.
QUIET_WANDB = {"WANDB__DISABLE_STATS": "true", "WANDB__DISABLE_MACHINE_INFO": "true",
               "WANDB_CONSOLE": "off", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true",
               "WANDB_MODE": "offline"}


def wandb_rows(run_dir) -> dict[int, dict]:
  """The rows an offline W&B run logged, by step: its ``run-<id>.wandb`` file read back.

  wandb's format: a 7-byte header (``:W&B``, magic, version), then LevelDB's log format
  (32 KiB blocks of chunks, each with a 7-byte header: crc, length, type 1 = whole record,
  2/3/4 = its first, middle, last part) of protobuf ``Record`` messages.
  """
  from wandb.proto import wandb_internal_pb2  # pylint: disable=import-outside-toplevel
  (path,) = glob.glob(os.path.join(run_dir, "run-*.wandb"))
  data = open(path, "rb").read()
  assert data[:4] == b":W&B"
  block, pos, chunk, rows = 32768, 7, b"", {}
  while pos + 7 <= len(data):
    if block - pos % block < 7:  # too little room for a header: the block's padding
      pos += block - pos % block
      continue
    length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
    chunk, pos = chunk + data[pos + 7:pos + 7 + length], pos + 7 + length
    if kind in (1, 4):
      record = wandb_internal_pb2.Record.FromString(chunk)
      chunk = b""
      if record.WhichOneof("record_type") == "history":
        rows.setdefault(record.history.step.num, {}).update(
            {key: json.loads(i.value_json) for i in record.history.item
             if not (key := i.key or "/".join(i.nested_key)).startswith("_")})
  return rows


def test_a_run_logs_its_rows_to_weights_and_biases_offline(data_cache, tmp_path, monkeypatch):
  pytest.importorskip("wandb")
  for name, value in QUIET_WANDB.items():
    monkeypatch.setenv(name, value)
  monkeypatch.setenv("WANDB_DIR", str(tmp_path))
  workdir = tmp_path / "run"
  config = small_config(data_cache, **{"train.steps": 2, "train.warmup_steps": 0,
                                       "train.eval_every": 2, "sample.num_samples": 0,
                                       "train.wandb_mode": "offline"})
  train.train_and_evaluate(config, str(workdir))
  # Under the workdir, in the W&B run its run_id names (a resume would continue it).
  run_id = (workdir / "wandb" / "run_id").read_text()
  (run_dir,) = glob.glob(str(workdir / "wandb" / f"offline-run-*-{run_id}"))
  # The rows of metrics.jsonl, value for value: step 0's evaluation, steps 1 and 2.
  expected = {r["step"]: {k: v for k, v in r.items() if k != "step" and v is not None}
              for r in metrics_lib.read_metrics(str(workdir))}
  assert sorted(expected) == [0, 1, 2] and "val_loss" in expected[2] and "loss" in expected[2]
  assert wandb_rows(run_dir) == expected


def test_weights_and_biases_asked_for_but_not_installed_is_one_line(data_cache, tmp_path,
                                                                   monkeypatch):
  monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
  config = small_config(data_cache, **{"train.wandb_mode": "online"})
  with pytest.raises(errors.ConfigError, match=r"^train.wandb_mode='online' needs Weights & "
                                                r"Biases, which is not installed: pip install wandb"):
    train.train_and_evaluate(config, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()  # refused before anything was prepared or written


# ----------------------------------------------------------------------------- the command line


def run_cmd(workdir, data_cache, *extra, config="tiny", cwd=REPO):
  workdir_flag = [f"--workdir={workdir}"] if workdir else []
  return popen([sys.executable, "-m", "experiments.run", f"--config={config}", *workdir_flag,
                *overrides(data_cache), *extra], cwd)


def popen(args, cwd=REPO):
  # stdout is a pipe, not a terminal: the run logs progress lines instead of a bar.
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO}
  return subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env)


def test_command_resumes_exactly_after_sigterm(full_run, data_cache, tmp_path):
  """Stop a command-line run with SIGTERM (it saves and exits 4), run the command it prints,
  and compare with the uninterrupted run of the same config (``full_run``, in process).
  (A resume from a periodic checkpoint after a kill -9: the in-process resume test above and
  tests/test_multi.py's group killed mid-run.)"""
  workdir = tmp_path / "run"
  proc = run_cmd(workdir, data_cache, "--config.sample.num_samples=0")  # training alone
  for line in proc.stdout:  # a progress line per step, flushed: stop it early in the run
    if line.startswith("step 3/24:"):
      break
  else:
    raise AssertionError(f"no step 3 in the output (exit code {proc.wait()})")
  proc.send_signal(signal.SIGTERM)
  out, _ = proc.communicate(timeout=120)
  stopped_at = max(losses(workdir))
  assert stopped_at < 24, "the run finished before the signal arrived"
  assert proc.returncode == train.EXIT_INTERRUPTED, out
  first = json.loads((workdir / "summary.json").read_text())
  assert first["status"] == "interrupted"
  assert str(stopped_at) in os.listdir(workdir / "checkpoints")  # saved on the way out
  # The run prints the command that resumes it: run exactly that.
  command = out.split("to resume, run: ", 1)[1].splitlines()[0]
  assert command.endswith(f"--workdir={workdir}")
  proc = popen([sys.executable, *shlex.split(command)[1:]])
  out, _ = proc.communicate(timeout=300)
  assert proc.returncode == 0 and f"resuming {workdir} from step {stopped_at} (" in out, out
  resumed, reference = losses(workdir), losses(full_run[0])
  assert sorted(resumed) == list(range(1, 25))
  # The time of both segments, not of the last alone.
  assert json.loads((workdir / "summary.json").read_text())["wall_time_s"] > first["wall_time_s"]
  for step in range(1, 25):
    assert resumed[step] == reference[step], (step, resumed[step], reference[step])


def test_command_default_workdir_progress_lines_and_rerun(data_cache, tmp_path):
  """No --workdir: runs/<config>_<variants>; without a terminal, a line per log row; the
  end says where things are; the same command again leaves the finished run alone."""
  args = ("--config.train.steps=4", "--config.train.log_every=2", "--config.train.eval_every=4")
  proc = run_cmd(None, data_cache, *args, config="tiny:norm=post", cwd=tmp_path)
  out, _ = proc.communicate(timeout=300)
  # The model, data and training overrides make another run, so they name the folder; the
  # budget (train.steps) and what a resume may always change (logging) do not.
  workdir = ("runs/tiny_norm=post_n_layer=1_d_model=32_n_head=2_block_size=32_vocab_size=321_"
             "max_docs=40_batch_size=8_warmup_steps=2_learning_rate=0.01_eval_batches=2")
  assert proc.returncode == 0, out
  # The first lines name the optimizer and the schedule.
  assert ("optimizer: adamw (b1 0.9, b2 0.95), weight decay 0.1 on w_qkv, w_out, w_in, wte, wpe, "
          "lm_head, clipped at global norm 1; "
          "schedule: 2 warmup steps, then a cosine from the peak 0.01 to 0.001 (0.1 of the "
          "peak) over 4 steps") in out.splitlines()[:4], out
  assert "step 2/4: loss " in out and "step 4/4: loss " in out
  assert "unigram baseline" in out and "bits/byte" in out
  for name in ("summary.json", "loss.png", "samples.txt"):
    assert f"{workdir}/{name}" in out and (tmp_path / workdir / name).exists(), name
  summary = (tmp_path / workdir / "summary.json").read_bytes()
  proc = run_cmd(None, data_cache, *args, config="tiny:norm=post", cwd=tmp_path)
  out, _ = proc.communicate(timeout=300)
  assert proc.returncode == 0 and f"already complete at step 4: {workdir}" in out, out
  assert "--workdir" in out  # how to start a new run instead
  assert (tmp_path / workdir / "summary.json").read_bytes() == summary
  assert sorted(os.listdir(tmp_path / "runs")) == [workdir.removeprefix("runs/")]


def test_command_line_rejects_a_misspelt_override(tmp_path, data_cache):
  proc = run_cmd(tmp_path, data_cache, "--config.train.stpes=3")
  out, _ = proc.communicate(timeout=120)
  assert proc.returncode == errors.EXIT_USER_ERROR, out
  assert out == "error: --config.train.stpes: train has no field 'stpes'; did you mean 'steps'?\n"
  assert not (tmp_path / "config.json").exists()


def test_the_step_0_evaluation_is_optional(data_cache, tmp_path):
  """``train.eval_at_start=False`` skips the evaluation before training (the real models'
  default: an hour on a CPU); the run still evaluates at the end; the small configs keep it."""
  off = tmp_path / "off"
  train.train_and_evaluate(small_config(data_cache, **{"train.steps": 2, "train.warmup_steps": 0,
                                                        "train.eval_at_start": False}), str(off))
  steps = [r["step"] for r in metrics_lib.read_metrics(str(off)) if "val_loss" in r]
  assert steps == [2]
  assert tiny.get_config().train.eval_at_start
  from experiments.configs import andrea120m  # pylint: disable=import-outside-toplevel
  assert not andrea120m.get_config().train.eval_at_start


# ----------------------------------------------------------------------------- saves by wall time


def test_saves_by_wall_time_count_from_the_start_and_from_the_newest_save(tmp_path):
  """``checkpoint.every_seconds``: orbax's time policy, counted from the segment's start
  (not at once where nothing is saved yet, nor at once after a resume from an old
  checkpoint), alongside ``checkpoint.every``."""
  t0 = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)
  at = lambda step, seconds: types.SimpleNamespace(
      step=step, time=t0 + datetime.timedelta(seconds=seconds), metrics=None)
  context = ocp.checkpoint_managers.DecisionContext(
      is_saving_in_progress=False, reached_preemption=False,
      multiprocessing_options=ocp.options.MultiprocessingOptions())
  policy = ckpt.SinceStart(minimum_interval_secs=60, start=t0)
  decide = lambda step, seconds, previous=(): policy.should_save(
      at(step, seconds), list(previous), context=context)
  assert not decide(1, 59) and decide(1, 61)  # the first step of a run: 60 s after its start
  assert not decide(9, 150, [at(5, 100)]) and decide(9, 161, [at(5, 100)])  # after a save
  # A resume: its newest checkpoint is a day old, its own start now.
  assert not decide(501, 30, [at(500, -86400)]) and decide(501, 61, [at(500, -86400)])
  mngr = ckpt.manager(str(tmp_path / "checkpoints"), every=4, keep=2, every_seconds=3600)
  assert mngr.should_save(8) and not mngr.should_save(7)  # checkpoint.every still counts
  mngr.close()


def test_the_steps_checkpoint_keep_steps_names_are_saved_and_kept_beside_the_newest(tmp_path):
  # Where cooldowns branch off a run (cooldown.py): steps 3 and 5 are saved though
  # checkpoint.every is 4, and kept though only the newest one is.
  steps = config_lib.CheckpointConfig(every=4, every_seconds=0, keep=1, keep_steps="5, 3").kept_steps
  mngr = ckpt.manager(str(tmp_path / "checkpoints"), every=4, keep=1, keep_steps=steps)
  saved = [step for step in range(1, 10) if ckpt.save(mngr, step, {"w": np.full(2, step)})]
  assert saved == [3, 4, 5, 8] and sorted(mngr.all_steps()) == [3, 5, 8]
  mngr.close()


def test_a_killed_run_keeps_its_save_by_time_and_the_rerun_says_it_resumes_from_it(
    data_cache, tmp_path):
  """A run whose ``checkpoint.every`` it would never reach is killed with SIGKILL (nothing
  can be saved on the way out) once a checkpoint appears: ``checkpoint.every_seconds`` saved
  it, and the same command again says that it resumes from that step, and how old it is."""
  workdir = tmp_path / "run"
  args = ("--config.train.steps=100000", "--config.train.log_every=1000",
          "--config.train.eval_every=100000", "--config.checkpoint.every=100000",
          "--config.checkpoint.every_seconds=1", "--config.sample.num_samples=0")
  proc = run_cmd(workdir, data_cache, *args)
  deadline = time.time() + 120
  while workdir_lib.latest_checkpoint(str(workdir)) is None:
    if proc.poll() is not None or time.time() > deadline:
      proc.kill()
      raise AssertionError(f"no checkpoint in 120 s:\n{proc.communicate()[0]}")
    time.sleep(0.2)
  proc.kill()
  out, _ = proc.communicate(timeout=60)
  assert "starting a new run in" in out, out
  saved = workdir_lib.latest_checkpoint(str(workdir))
  assert 0 < saved < 100000, out  # by time: not at checkpoint.every, nor at the end
  proc = run_cmd(workdir, data_cache, *args)
  for line in proc.stdout:  # said before anything is prepared or compiled: stop it there
    if line.startswith(("resuming", "compiling")):
      break
  proc.kill()
  rest, _ = proc.communicate(timeout=60)
  assert line.startswith(f"resuming {workdir} from step {saved} (checkpoint saved "), line + rest
  assert line.rstrip().endswith(" ago)"), line


def test_a_signal_during_a_steps_rows_saves_that_step(data_cache, tmp_path, monkeypatch):
  """The stop is asked at the end of a step, after its rows (and its wait, diagnostics and
  evaluation): a SIGTERM that arrives while step 4 writes its rows saves step 4 and stops,
  rather than training step 5 first."""
  write = loop.Logger.log_train

  def log_train(self, step, alive):
    write(self, step, alive)
    if step == 4:
      os.kill(os.getpid(), signal.SIGTERM)  # handled (a flag) before the next line runs

  monkeypatch.setattr(loop.Logger, "log_train", log_train)
  config = small_config(data_cache, **{"train.steps": 8, "train.log_every": 2,
                                       "train.eval_every": 8, "checkpoint.every": 100,
                                       "sample.num_samples": 0})
  result = train.train_and_evaluate(config, str(tmp_path))
  assert result.status == "interrupted" and int(result.state["step"]) == 4
  assert workdir_lib.latest_checkpoint(str(tmp_path)) == 4 and max(losses(tmp_path)) == 4


def test_out_of_memory_in_training_is_one_line_naming_the_microbatches_that_fit():
  # andrea120m's first step on a 24 GB CPU asks for one 31 GB buffer (measured): the line
  # says so and names grad_accum_steps; another runtime error passes through as it is.
  t = types.SimpleNamespace(batch_size=64, grad_accum_steps=1)  # what the advice reads
  oom = jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 31200282976 bytes.")
  with pytest.raises(errors.ConfigError, match=r"out of memory in training: a buffer of 29.1 GiB .*"
                     r"train.batch_size=64, train.grad_accum_steps=1; split each batch into "
                     r"microbatches: --config.train.grad_accum_steps=\d+ ") as e:
    with train.out_of_memory_advice(t):
      raise oom
  accum = int(__import__("re").search(r"grad_accum_steps=(\d+) \(", str(e.value)).group(1))
  have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  assert 64 % accum == 0 and 31200282976 / (accum) <= max(have, 31200282976 / 64)
  other = jax.errors.JaxRuntimeError("INTERNAL: something else")
  with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
    with train.out_of_memory_advice(t):
      raise other


def test_a_profiled_run_writes_a_trace_tensorboard_reads_and_prints_mfu_on_the_cpu(
    data_cache, tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the CPU's peak, measured here
  # No row between the traced updates: the host's work between them is small.
  config = small_config(data_cache, **{"train.steps": 6, "train.profile_steps": "3-5",
                                       "train.eval_every": 6, "sample.num_samples": 0,
                                       "train.log_every": 6})
  workdir = tmp_path / "run"
  train.train_and_evaluate(config, str(workdir))
  out = capsys.readouterr().out
  # TensorBoard's profile plugin reads <logdir>/plugins/profile/<run>/<host>.xplane.pb.
  traces = glob.glob(str(workdir / "profile" / "plugins" / "profile" / "*" / "*.xplane.pb"))
  assert len(traces) == 1 and os.path.getsize(traces[0]) > 0
  # Read back (the XSpace proto the plugin reads): it holds updates 3 to 5, whole, and no other.
  lines = [(line.name, list(line.events))  # read once: the planes and lines are iterators
           for plane in jax.profiler.ProfileData.from_file(traces[0]).planes for line in plane.lines]
  steps = [e for _, events in lines for e in events if e.name == "train"]
  assert [dict(e.stats)["step_num"] for e in steps] == [3, 4, 5]
  # Each covers its update's run, not only its dispatch: the executable's run (PjRt's CPU client
  # thread, ``ThunkExecutor::Execute``) that starts inside an annotation ends inside it; around
  # the asynchronous call alone the annotation ends once the update is dispatched. Read from
  # the trace's own events, so a busy machine (the host's work slowed) cannot change the answer.
  xla = [e for name, events in lines if name.startswith("tf_XLAPjRtCpuClient")
         for e in events if e.name == "ThunkExecutor::Execute"]
  for step in steps:
    end = step.start_ns + step.duration_ns
    inside = [e for e in xla if step.start_ns <= e.start_ns < end]
    assert inside and max(e.start_ns + e.duration_ns for e in inside) <= end + 1e5, (
        dict(step.stats)["step_num"], step.start_ns, end,
        [(e.start_ns, e.start_ns + e.duration_ns) for e in inside])
  line = next(l for l in out.splitlines() if l.startswith("profile of updates 3-5: "))
  assert os.path.dirname(traces[0]) in line
  assert f"tensorboard --logdir {workdir / 'profile'}" in line
  # MFU against this CPU's measured peak: printed beside the step time, in every train row.
  assert "measured on this CPU" in next(l for l in out.splitlines() if l.startswith("measured: "))
  rows = [r for r in metrics_lib.read_metrics(str(workdir)) if "loss" in r]
  assert len(rows) == 1 and all(0 < r["mfu"] < 1 for r in rows)
  assert len(json.loads((tmp_path / "cache" / "andrea_jax" / "cpu_peak.json").read_text())) == 1


def test_a_cached_peak_below_the_models_speed_prints_and_logs_no_mfu_above_100_percent(
    data_cache, tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  # A peak cached at an idle load on this CPU (so trusted), but far below what any run reaches.
  metrics_lib.cpu_peak("float32")
  path = tmp_path / "cache" / "andrea_jax" / "cpu_peak.json"
  cached = json.loads(path.read_text())
  path.write_text(json.dumps({key: {**entry, "flops": 1e6, "load_per_core": 0.0}
                              for key, entry in cached.items()}))
  config = small_config(data_cache, **{"train.steps": 4, "train.eval_every": 4,
                                       "sample.num_samples": 0, "model.compute_dtype": "float32"})
  train.train_and_evaluate(config, str(tmp_path / "run"))
  out = capsys.readouterr().out
  rows = [r for r in metrics_lib.read_metrics(str(tmp_path / "run")) if "loss" in r]
  assert len(rows) == 4 and not any("mfu" in r for r in rows)
  assert "MFU not shown: the model ran at " in out and "0.0 GFLOP/s it would divide by" in out
  assert not re.search(r"MFU \d{3,}", out) and "% of " not in out


@pytest.mark.parametrize("value", ["10-", "5-3", "0-2", "3-99", "abc"])
def test_a_bad_profile_range_is_one_line_naming_the_field(value):
  fields = {**common.train_group().to_dict(), "steps": 20, "warmup_steps": 2,
            "profile_steps": value}
  with pytest.raises(errors.ConfigError,
                     match=rf"^train.profile_steps='{value}': expected the updates to trace as "
                           r"'first-last' within 1..train.steps=20, e.g. '10-12' \(or '' for none\)$"):
    step_lib.TrainConfig(**fields)


def test_a_run_scores_hellaswag_every_task_eval_every_updates_as_evaluate_scores_it(
    data_cache, tmp_path, capsys):
  task_file = tmp_path / "hellaswag.jsonl"  # HellaSwag's format (tests/test_tasks.py: its scorer)
  task_file.write_text("".join(json.dumps(
      {"activity_label": "Python", "ctx_a": f"def f{i}(x):", "ctx_b": "", "endings": [
          "return x", "pass", "x = 1", "print(x)"], "label": i % 4}
  ) + "\n" for i in range(6)))
  config = small_config(data_cache, **{"train.steps": 6, "train.task_eval_every": 3,
                                       "train.task_file": str(task_file), "train.task_examples": 5,
                                       "train.eval_every": 6, "sample.num_samples": 0})
  workdir = tmp_path / "run"
  train.train_and_evaluate(config, str(workdir))
  scored = {r["step"]: r for r in metrics_lib.read_metrics(str(workdir)) if "hellaswag_acc" in r}
  assert sorted(scored) == [3, 6]
  out = capsys.readouterr().out
  assert "step 3: hellaswag (lmeval) acc " in out and "over 5 examples (chance 0.25)" in out
  # The final checkpoint scored from its workdir by the command (scoring.evaluate_task).
  out_json = tmp_path / "hellaswag.json"
  done = subprocess.run(
      [sys.executable, "-m", "experiments.evaluate", f"--workdir={workdir}", "--task=hellaswag",
       f"--task_file={task_file}", "--task_examples=5", f"--out={out_json}"],
      cwd=REPO, env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO},
      capture_output=True, text=True, timeout=300, check=True)
  final = json.loads(out_json.read_text())
  assert f"{workdir} at step 6: hellaswag (lmeval) acc {final['acc']:.4f}, " in done.stdout
  assert final["step"] == 6 and final["examples"] == 5
  assert final["acc"] == scored[6]["hellaswag_acc"]
  assert final["acc_norm"] == scored[6]["hellaswag_acc_norm"]
  assert final["acc_bytes"] == scored[6]["hellaswag_acc_bytes"]
