"""Timing a step: one side's steps after warm-up (``time_steps``: wall and CPU seconds and
page faults of each, ``side_result``: their median and what the process held), sides
interleaved in one process (``interleave``), their medians as speed figures (tokens/s, our
step's overhead, the ratio to the peer), and the machine's load and this process's CPU
time around them. Every mode of ``benchmarks/step.py`` and ``benchmarks/gpu_check.py``
times through these.
"""

from __future__ import annotations

import itertools
import os
import platform
import resource
import statistics
import time


def cpu_model() -> str:
  """The CPU's model name (Linux ``/proc/cpuinfo``), else what ``platform`` knows."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def cpu_class() -> str:
  """The instruction-set class the matmul kernels run on: ``AVX-512``, ``AVX2`` or the machine
  (the step ratio against the peer differs by class: docs/performance.md)."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
  except OSError:
    flags = []
  return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else platform.machine()


def peak_rss_mb() -> float:
  """This process's peak resident memory (VmHWM: ru_maxrss carries the parent's over exec)."""
  try:
    with open("/proc/self/status", encoding="utf-8") as f:
      for line in f:
        if line.startswith("VmHWM"):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  return float("nan")


def timed(run) -> dict:
  """One call of ``run``: its wall seconds, CPU seconds and minor page faults."""
  before = resource.getrusage(resource.RUSAGE_SELF)
  start = time.perf_counter()
  run()
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_SELF)
  return {"s": wall, "faults": after.ru_minflt - before.ru_minflt,
          "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)}


def time_steps(run, warmup: int, steps: int) -> tuple[float, list[dict]]:
  """``warmup`` untimed calls of ``run`` (a compile, if any, falls there), then ``steps``
  timed ones: the warm-up's wall seconds and each timed call (``timed``)."""
  start = time.perf_counter()
  for _ in range(warmup):
    run()
  return time.perf_counter() - start, [timed(run) for _ in range(steps)]


def side_result(steps: list[dict]) -> dict:
  """A side's timed steps (``timed``) as its figures: the median step, faults and CPU
  seconds per step, the process's peak resident memory and the CPU model."""
  n = len(steps)
  return {"step_s": statistics.median(t["s"] for t in steps), "times": [t["s"] for t in steps],
          "minor_faults_per_step": sum(t["faults"] for t in steps) / n,
          "cpu_s_per_step": sum(t["cpu_s"] for t in steps) / n,
          "peak_rss_mb": peak_rss_mb(), "cpu": cpu_model()}


def interleave(fns: dict, reps: int, warmup: int, settle_s: float = 0.5,
               clock=time.perf_counter, sleep=time.sleep) -> dict[str, list[float]]:
  """Time each function ``reps`` times, taking turns, after ``warmup`` untimed calls each.

  Rep ``r`` runs the sides in the ``r``-th permutation of their order (all ``n!`` in turn),
  so with ``reps`` a multiple of ``n!`` every side runs right after every other side
  equally often. A side that runs after the PyTorch peer pays for the peer's after-effects
  (its threads winding down, the memory it hands back), and a rotation that only shifts
  the starting side keeps the cyclic order, so one side kept that place: at andrea120m
  our step read 17 % over model-only that way, and 3 % in a pass without the peer.
  A short pause before each call lets the previous side settle. ``clock`` reads seconds
  and ``sleep`` waits (tests pass a fake pair).
  """
  for fn in fns.values():
    for _ in range(warmup):
      fn()
  orders = list(itertools.permutations(fns))
  times = {name: [] for name in fns}
  for rep in range(reps):
    for name in orders[rep % len(orders)]:
      if settle_s:
        sleep(settle_s)
      start = clock()
      fns[name]()
      times[name].append(clock() - start)
  return times


def load_snapshot(loadavg=os.getloadavg) -> dict:
  """The machine's 1-minute load average and this process's CPU and wall clocks."""
  return {"load_1m": loadavg()[0], "cpu_s": time.process_time(), "wall_s": time.perf_counter()}


def load_between(before: dict, after: dict) -> dict:
  """Load before and after, and the process's CPU seconds per wall second in between."""
  wall = max(after["wall_s"] - before["wall_s"], 1e-9)
  return {"load_before": before["load_1m"], "load_after": after["load_1m"],
          "cpu_per_wall": (after["cpu_s"] - before["cpu_s"]) / wall}


def speed_fields(times: dict[str, list[float]], tokens: int) -> dict:
  """Median step seconds and tokens/s per side, our step's overhead over the model-only
  step (timed beside it) and, with the peer, ours over the peer's tokens/s (the ratio)."""
  row = {}
  for who in ("andrea_jax", "model_only", "peer"):
    if who in times:
      row[f"{who}_step_s"] = statistics.median(times[who])
      row[f"{who}_tokens_per_s"] = tokens / row[f"{who}_step_s"]
  row["andrea_jax_step_s_beside_model_only"] = statistics.median(
      times["andrea_jax_beside_model_only"])
  row["step_overhead"] = row["andrea_jax_step_s_beside_model_only"] / row["model_only_step_s"] - 1
  if "peer" in times:
    row["ratio"] = row["andrea_jax_tokens_per_s"] / row["peer_tokens_per_s"]
  return row
