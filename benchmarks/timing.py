"""Timing sides against each other: interleaved rounds after warm-up, their medians as
speed figures (tokens/s, our step's overhead, the ratio to the peer), and the machine's
load and this process's CPU time around them.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time


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
