"""andrea_jax/memory.py: a run that would not fit the machine's free memory stops before its
first step in one line (exit 2), naming settings that fit; followed, they pass the check."""

import os
import pathlib
import re
import subprocess
import sys
import types

import pytest

from andrea_jax import errors
from andrea_jax import memory

REPO = pathlib.Path(__file__).resolve().parents[1]


def run(tmp_path, limit_gb, *args):
  corpus = tmp_path / "text.txt"
  if not corpus.exists():
    corpus.write_text("".join(f"line {i}: the quick brown fox jumps over the lazy dog, {i * 7}\n"
                              for i in range(3000)), encoding="utf-8")
  env = {**os.environ, "JAX_PLATFORMS": "cpu", memory.LIMIT_ENV: str(limit_gb)}
  return subprocess.run(
      [sys.executable, "-m", "experiments.run", "--config=tiny", f"--config.data.path={corpus}",
       f"--config.data.cache_dir={tmp_path / 'cache'}", f"--workdir={tmp_path / 'run'}",
       "--config.train.steps=1", "--config.train.warmup_steps=0", "--config.train.eval_batches=1",
       "--config.train.eval_at_start=False", "--config.sample.num_samples=0", *args],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_a_run_that_does_not_fit_stops_before_its_first_step_and_its_advice_fits(tmp_path):
  done = run(tmp_path, 0.05)  # tiny's batch of 32 x 128 needs about 0.2 GiB
  assert done.returncode == errors.EXIT_USER_ERROR, done.stdout + done.stderr
  err = done.stderr.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("error: memory: this run's step needs about "), err
  assert "compiled estimate" in err[0] and "0.05 GiB free (ANDREA_MEMORY_LIMIT_GB=0.05)" in err[0]
  assert "step 1" not in done.stdout and not (tmp_path / "run" / "checkpoints").exists()
  fix = re.search(r"--config\.train\.grad_accum_steps=\d+", err[0])
  assert fix, err[0]
  followed = run(tmp_path, 0.05, fix[0])  # the same limit: the advice passes the same check
  assert followed.returncode == 0, followed.stdout + followed.stderr
  assert "memory: this run's step needs about" in followed.stdout


def estimate(**kw):
  return memory.Estimate(**{"state": 2 << 30, "work": 10 << 30, "activations": 8 << 30,
                            "source": "compiled", **kw})


def test_each_suggestion_passes_the_estimate_it_was_checked_with():
  cfg = types.SimpleNamespace(remat_policy="none", compute_dtype="float32", block_size=1024,
                              d_model=768, n_layer=12, loss_chunk=0, vocab_size=8449)
  t = types.SimpleNamespace(batch_size=64, grad_accum_steps=1)
  est, free = estimate(), 6 << 30
  fixes = memory.suggestions(est, cfg, t, free)
  # With memory.MARGIN's 20 % to spare: 4 + 8/4 = 6 GiB needs 7.2, 4 + 8/8 = 5 GiB needs 6.
  assert any("grad_accum_steps=8" in f for f in fixes), fixes
  assert any("batch_size=8" in f for f in fixes), fixes
  for f in fixes:
    if "grad_accum_steps" in f:
      assert est.scaled(rows_ratio=1 / 8) * memory.MARGIN <= free
  with pytest.raises(errors.ConfigError, match=r"needs about 12.0 GiB .* does not fit"):
    os.environ[memory.LIMIT_ENV] = "6"
    try:
      memory.check(est, cfg, t)
    finally:
      del os.environ[memory.LIMIT_ENV]
  assert memory.check(estimate(work=1 << 30), cfg, t).startswith("memory: this run's step")
  # An estimate under the limit but without the margin to spare is refused too (5.5 GiB of 6).
  os.environ[memory.LIMIT_ENV] = "6"
  try:
    with pytest.raises(errors.ConfigError, match="20% to spare"):
      memory.check(estimate(state=5 << 30, work=1 << 29, activations=1 << 28), cfg, t)
  finally:
    del os.environ[memory.LIMIT_ENV]


def test_a_forced_limit_that_is_not_a_number_is_refused(monkeypatch):
  monkeypatch.setenv(memory.LIMIT_ENV, "lots")
  with pytest.raises(errors.ConfigError, match=r"ANDREA_MEMORY_LIMIT_GB='lots': expected a number"):
    memory.free_bytes()
