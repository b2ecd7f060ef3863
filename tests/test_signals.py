"""SIGINT in every phase of a run (``andrea_jax/signals.py``): exit 4 within seconds, the resume
line, no traceback.

Real processes (``python -m experiments.run``): the signal is sent when the run prints the
line of the phase (compilation, the step-0 evaluation). The shrunk config is
``test_train``'s.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from andrea_jax import errors
from andrea_jax import signals as signals_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHRINK = {
    "model.n_layer": 1, "model.d_model": 32, "model.n_head": 2, "model.block_size": 32,
    "model.vocab_size": 321, "data.max_docs": 40, "train.batch_size": 8, "train.steps": 20,
    "train.warmup_steps": 2, "train.log_every": 5, "train.eval_every": 10,
    "train.eval_batches": 2, "checkpoint.every": 10, "sample.num_samples": 0,
}
# A signal must end the run within this many seconds (a loaded 2-core machine included).
STOP_WITHIN_S = 30


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("cache")


def start(workdir, cache_dir, **changes):
  args = [f"--config.{k}={v}" for k, v in {**SHRINK, "data.cache_dir": cache_dir,
                                           **changes}.items()]
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO}
  return subprocess.Popen([sys.executable, "-m", "experiments.run", "--config=tiny",
                           f"--workdir={workdir}", *args], cwd=REPO, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def interrupt_at(proc, marker: str, timeout: float = 300) -> tuple[str, float]:
  """SIGINT once ``marker`` is printed; ``(all output, seconds from signal to exit)``."""
  out, deadline = [], time.time() + timeout
  for line in proc.stdout:
    out.append(line)
    if marker in line:
      break
    assert time.time() < deadline, "".join(out)
  else:
    raise AssertionError(f"the run ended before {marker!r}:\n{''.join(out)}")
  sent = time.time()
  proc.send_signal(signal.SIGINT)
  rest, _ = proc.communicate(timeout=120)
  return "".join(out) + rest, time.time() - sent


def test_sigint_during_compilation_exits_4_at_once(cache_dir, tmp_path):
  proc = start(tmp_path / "run", cache_dir)
  out, seconds = interrupt_at(proc, "compiling the train step")
  assert proc.returncode == errors.EXIT_INTERRUPTED, out
  assert seconds < STOP_WITHIN_S and "Traceback" not in out, out
  assert "while compiling" in out and f"--workdir={tmp_path / 'run'}" in out.split(
      "to resume, run: ", 1)[1], out


def test_sigint_during_step0_evaluation_exits_4_with_the_resume_line(cache_dir, tmp_path):
  workdir = tmp_path / "run"
  proc = start(workdir, cache_dir, **{"train.eval_batches": 3000})
  out, seconds = interrupt_at(proc, "step 0: evaluating")
  assert proc.returncode == errors.EXIT_INTERRUPTED, out
  assert seconds < STOP_WITHIN_S and "Traceback" not in out and "Exception ignored" not in out, out
  assert "while evaluating step 0" in out and "to resume, run: " in out, out
  assert json.loads((workdir / "summary.json").read_text())["status"] == "interrupted"


def watched(body: str, grace_s: float = 1) -> subprocess.Popen:
  """A process in ``StopSignals`` that runs ``body`` (``s``: the handler; ``signals``)."""
  code = ("import os, signal, time\n"
          "from andrea_jax import signals\n"
          "with signals.StopSignals() as s:\n"
          "  s.resume = 'python -m experiments.run --workdir=x'\n" +
          "".join(f"  {line}\n" for line in body.splitlines()))
  env = {**os.environ, "PYTHONPATH": REPO, "ANDREA_STOP_GRACE_S": str(grace_s)}
  return subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_a_second_signal_or_a_blocked_main_thread_ends_the_process_with_exit_4(tmp_path):
  """The watcher: the main thread is stuck in a call that never reaches a safe point, before
  the first step of a new run (nothing trained: nothing to save, and it says so)."""
  proc = watched("s.progress(saved=0)\n"
                 "signals.set_phase('compiling')\n"
                 "print('ready', flush=True)\n"
                 "time.sleep(60)")
  out, seconds = interrupt_at(proc, "ready", timeout=60)
  assert proc.returncode == errors.EXIT_INTERRUPTED and seconds < 10, out
  assert "while compiling" in out and "to resume, run: python -m experiments.run" in out, out
  assert "stopped at once: nothing was trained yet, so nothing to save" in out, out


def test_the_watcher_waits_for_the_save_of_steps_trained_since_the_newest_checkpoint():
  """Steps trained since the newest checkpoint are never thrown away by one signal: past the
  grace the watcher says it waits for the running step and the save, and waits; once they
  are saved, a main thread that still blocks is ended (nothing is lost then)."""
  proc = watched("s.progress(saved=2)\n"
                 "s.progress(trained=5)\n"
                 "signals.set_phase('training (step 6)')\n"
                 "print('ready', flush=True)\n"
                 "time.sleep(1.5)  # the running step, three times the grace\n"
                 "s.progress(saved=6)\n"
                 "print('saved step 6', flush=True)\n"
                 "time.sleep(60)", grace_s=0.5)
  out, _ = interrupt_at(proc, "ready", timeout=60)
  assert proc.returncode == errors.EXIT_INTERRUPTED, out
  assert ("waiting for training (step 6) to end, then saving: 3 steps trained since the "
          "checkpoint of step 2 (again to stop at once without them)") in out, out
  assert "saved step 6" in out, out
  assert ("stopped at once: nothing was trained since the checkpoint of step 6, so nothing "
          "is lost") in out, out


def test_check_raises_only_after_a_signal():
  with signals_lib.StopSignals() as s:
    signals_lib.check()  # nothing received
    s._handle(signal.SIGINT, None)  # what the handler does: a flag, nothing raised
    signals_lib.set_phase("evaluating step 0")
    with pytest.raises(signals_lib.Interrupted, match="SIGINT while evaluating step 0"):
      signals_lib.check()
    assert s.acknowledged
  assert signals_lib.active() is None


def test_sigint_to_a_sweeps_group_during_compilation_exits_4_without_a_traceback(cache_dir, tmp_path):
  # A group (``python -m experiments.sweep --run_group=...``, one vmapped program of many
  # models) stopped while it compiles: exit 4, no traceback, the line that says how to resume.
  import dataclasses
  from research import registry
  from research import runner
  sweep = registry.load("zloss_drift_late", "smoke")
  cells = [dataclasses.replace(c, overrides={**c.overrides, "data.cache_dir": str(cache_dir)})
           for c in sweep.cells if c.group == sweep.cells[0].group]
  sweep, workdir = dataclasses.replace(sweep, cells=cells), str(tmp_path / "sweep")
  job, = runner.jobs(sweep, workdir)
  runner.prepare_job(sweep, job, workdir)
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO}
  proc = subprocess.Popen(job.command, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
  out, seconds = interrupt_at(proc, "compiling the train step")
  assert proc.returncode == errors.EXIT_INTERRUPTED, out
  assert seconds < STOP_WITHIN_S and "Traceback" not in out, out
  # Stopped at the safe point after compiling, or (a loaded machine) by the watcher within it.
  assert "while compiling" in out and ("Rerun the sweep's command" in out
                                       or "to resume, run the same command again" in out), out
