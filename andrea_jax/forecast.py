"""What a run is in for, said before its first long wait.

After data preparation a run compiles its train step and its evaluation ahead of time,
before its state exists (``compile_programs``: the compilation is a phase of its own, which
a SIGINT ends with exit 4; ``memory.py`` then checks the step's memory), then prints an estimate of its cost from the model's FLOPs and this machine's
measured matmul speed (``estimate``): seconds per step, tokens per second, the time of the
step-0 evaluation and of the whole run. The first logged window prints the measured figures
(``measured``). A config meant for GPUs started on a CPU gets a one-line note naming the
small config to use instead (``gpu_config_note``).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from andrea_jax import metrics
from andrea_jax import signals as signals_lib

# Configs sized for accelerators (experiments/configs): on a CPU, a step takes minutes.
GPU_CONFIGS = ("andrea120m", "andrea480m")
CPU_CONFIG = "tiny"  # what to run on a CPU instead
# The share of the matmul speed a whole train step reaches (a rough, conservative figure).
EFFICIENCY = 0.5


def gpu_config_note(config_name: str, backend: str) -> str | None:
  """A note when a config meant for GPUs runs on a CPU, else None."""
  if backend != "cpu" or config_name not in GPU_CONFIGS:
    return None
  return (f"{config_name} is sized for GPUs; on this CPU each step takes minutes (the "
          f"estimate follows compilation). For a run that finishes on a CPU use "
          f"--config={CPU_CONFIG}")


def duration(seconds: float) -> str:
  """``42 s``, ``12 min``, ``3.5 h``, ``2.1 days``."""
  if seconds < 10:
    return f"{seconds:.2g} s"
  if seconds < 90:
    return f"{seconds:.0f} s"
  if seconds < 90 * 60:
    return f"{seconds / 60:.0f} min"
  if seconds < 48 * 3600:
    return f"{seconds / 3600:.1f} h"
  return f"{seconds / 86400:.1f} days"


def _say(message: str) -> None:
  from tqdm.auto import tqdm  # pylint: disable=import-outside-toplevel
  tqdm.write(message)


def compile_programs(step, evaluate, state, batch, eval_batch):
  """``(step, evaluate)`` compiled ahead of time for these arguments (``state`` may be
  abstract: the state's shapes and shardings); the seconds it took; the compiled step
  itself (its ``memory_analysis``: ``memory.py``).

  Where an argument's layout does not match the compiled program at the first call, the
  jitted function is used instead (it compiles again, as before).
  """
  signals_lib.set_phase("compiling the train step")
  _say("compiling the train step and the evaluation (Ctrl-C stops the run)")
  start = time.time()
  compiled_step = step.lower(state, batch).compile()
  signals_lib.check()
  signals_lib.set_phase("compiling the evaluation")
  compiled_eval = evaluate.lower(state["params"], eval_batch).compile()
  signals_lib.check()
  return (_or_jit(compiled_step, step), _or_jit(compiled_eval, evaluate), time.time() - start,
          compiled_step)


def _or_jit(compiled, jitted):
  state = {"fn": compiled}

  def call(*args):
    try:
      return state["fn"](*args)
    except (TypeError, ValueError):  # other shardings or layouts than were compiled
      if state["fn"] is jitted:
        raise
      state["fn"] = jitted
      return jitted(*args)

  return call


def matmul_flops(device=None) -> float:
  """This machine's measured FLOP/s on one float32 matmul (a probe of a few ms to a second)."""
  device = device or jax.devices()[0]
  return metrics.matmul_flops(device, jnp.float32, n=1024 if device.platform == "cpu" else 4096,
                              calls=3)


def estimate(flops: float, tokens: int, t, n_devices: int, start_step: int, compile_s: float,
             eval_at_start: bool) -> str:
  """One line: the estimated seconds per step, tokens per second, evaluation and run time
  of a step of ``flops`` FLOPs over ``tokens`` tokens (all members of a group together)."""
  rate = EFFICIENCY * matmul_flops() * n_devices
  per_step = flops / rate
  per_eval = t.eval_batches * per_step / 3  # a forward pass: a third of a train step
  left = t.steps - start_step
  evals = left // t.eval_every + 1 + int(eval_at_start)
  total = left * per_step + evals * per_eval
  first = f"; the step-0 evaluation about {duration(per_eval)}" if eval_at_start else ""
  step_s = f"{per_step:.3g} s" if per_step < 10 else duration(per_step)
  return (f"compiled in {compile_s:.1f} s. Estimated from this machine's matmul speed: "
          f"{step_s} per step, {tokens / per_step:,.0f} tokens/s{first}; "
          f"{left} steps about {duration(total)} (measured figures follow the first log)")


def measured(seconds_per_step: float, tokens_per_s: float, steps_left: int) -> str:
  """One line: the measured seconds per step and tokens per second, and the time left."""
  left = seconds_per_step * steps_left
  end = time.strftime("%H:%M", time.localtime(time.time() + left))
  return (f"measured: {seconds_per_step:.3g} s per step, {tokens_per_s:,.0f} tokens/s; "
          f"the remaining {steps_left} steps take about {duration(left)} (until {end}, "
          f"evaluations aside)")
