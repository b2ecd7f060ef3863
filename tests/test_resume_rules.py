"""What a resume keeps: the planned schedule, the data and the tokenizer it trained on.

One small run on its own corpus (20 steps), continued to 60; then edits that a resume must
refuse. The shrunk config is ``test_train``'s.
"""

import json
import random
import shutil

import numpy as np
import pytest

from andrea_jax import errors
from andrea_jax import metrics as metrics_lib
from andrea_jax import step as step_lib
from andrea_jax import train
from experiments import cli
from experiments.configs import common, tiny

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
  """A 20-step run, then the same workdir continued to 60 steps (the output of the latter)."""
  cache, workdir = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("run")
  assert train.train_and_evaluate(config_for(corpus, cache), str(workdir)).status == "completed"
  first = lrs(workdir)
  with pytest.MonkeyPatch.context() as mp:
    out = []
    mp.setattr("builtins.print", lambda *a, **k: out.append(" ".join(map(str, a))))
    result = train.train_and_evaluate(config_for(corpus, cache, **{"train.steps": 60}),
                                      str(workdir), allow_resume_changes=True)
  assert result.status == "completed"
  return workdir, cache, first, "\n".join(out)


def test_a_continued_run_keeps_its_schedule_and_extends_the_decay_without_a_jump(continued,
                                                                                corpus):
  workdir, cache, first, out = continued
  lr = lrs(workdir)
  assert sorted(lr) == list(range(1, 61))
  plan = step_lib.make_schedule(step_lib.TrainConfig(**config_for(corpus, cache).train))  # the 20-step plan
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
  continued = step_lib.make_schedule(t, [(0, t20), (4, t60)])
  longer = step_lib.make_schedule(t)
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
  workdir, cache, _, _ = continued
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
  workdir, cache, _, _ = continued
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
  _, cache, _, _ = continued
  workdir = tmp_path / "new"
  # More tokens than the encoded split holds, fewer than its bytes: found after encoding.
  config = config_for(corpus, cache, **{"train.batch_size": 2000})
  with pytest.raises(errors.DataError, match=r"train.batch_size=2000 .* of the training shards .* use a "
                     r"batch_size of at most \d+"):
    train.train_and_evaluate(config, str(workdir))
  assert not workdir.exists()  # the retry with the suggested batch size is a fresh start
