"""A/B of causal attention kernels on the CPU, interleaved in one process.

Times forward + backward (``grad`` of ``sum(out)`` with respect to q, k and v, jitted) of
``xla_flash`` (``base``: the kernel the model runs on CPUs) against candidate kernels, in
every order (``timing.interleave``), so that the machine's load falls on every side alike.
Prints each side's median, base / side (above 1: faster than the base), the spread of the
per-rep ratios, and each side's CPU seconds per wall second (how many of the cores it kept
busy: a kernel that keeps fewer busy loses less to other work on a shared machine, so
compare ratios only between runs where the base's figure is near the core count):

  python -m benchmarks.attention_ab --shape=andrea12m --batch=4 --reps=12 --variants=kt_f128,kt
  python -m benchmarks.attention_ab --shape=andrea120m --batch=1 --reps=12 --variants=kt_f128,kt
  python -m benchmarks.attention_ab --shape=tiny --batch=16 --seq=128 --reps=12 --variants=kt_f128

Variants: ``block64``, ``block256`` (``xla_flash`` at other query blocks) and ``kt...``, the
key-tiled candidate of ``benchmarks/attention_candidates.py`` with a ``TilePlan`` (see
``variant``). ``--forward_only`` times the forward pass alone; ``--check`` prints each
variant's largest gradient difference from the base first.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import attention
from benchmarks import attention_candidates as candidates
from benchmarks import shapes
from benchmarks import timing

VARIANTS = {
    "base": lambda q, k, v: attention.flash_causal_attention(q, k, v, 128),
    "block64": lambda q, k, v: attention.flash_causal_attention(q, k, v, 64),
    "block256": lambda q, k, v: attention.flash_causal_attention(q, k, v, 256),
}
PLAN_FIELDS = {"q": "query_block", "k": "key_block", "f": "fwd_key_block", "g": "fwd_group",
               "h": "bwd_group"}


def variant(name: str):
  """A kernel by name: one of ``VARIANTS``, or ``kt`` followed by ``candidates.TilePlan``
  fields to change, e.g. ``kt_q128_k128_f1024_g4_h12`` (query blocks of 128, key tiles of
  128 in the backward and 1024 in the forward, heads in groups of 4 in the forward and 12
  in the backward; 0: no groups)."""
  if name in VARIANTS:
    return VARIANTS[name]
  kind, *fields = name.split("_")
  if kind != "kt":
    raise ValueError(f"variant {name!r}: expected one of {sorted(VARIANTS)} or "
                     f"kt followed by TilePlan fields, e.g. kt_q128_k128_f1024_g4_h12")
  plan = candidates.TilePlan(**{PLAN_FIELDS[f[0]]: int(f[1:]) for f in fields})
  return lambda q, k, v: candidates.key_tiled_causal_attention(q, k, v, plan)


def timed(fn, q, k, v, cpu_s: list, forward_only: bool = False):
  """A thunk running one jitted forward + backward of ``fn`` (or its forward alone) and
  waiting for it; appends the process's CPU seconds of each call to ``cpu_s``."""
  if forward_only:
    step = jax.jit(fn)
  else:
    step = jax.jit(jax.grad(lambda q, k, v: fn(q, k, v).sum(), argnums=(0, 1, 2)))

  def run():
    start = time.process_time()
    jax.block_until_ready(step(q, k, v))
    cpu_s.append(time.process_time() - start)
  return run


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--shape", default="andrea12m")
  p.add_argument("--batch", type=int, default=4)
  p.add_argument("--seq", type=int, default=1024)
  p.add_argument("--reps", type=int, default=6)
  p.add_argument("--variants", default="kt", help="comma-separated names (see variant())")
  p.add_argument("--forward_only", action="store_true", help="time the forward pass alone")
  p.add_argument("--check", action="store_true", help="compare each variant's grads with base")
  args = p.parse_args(argv)
  cfg = shapes.model_config(shapes.load_config(args.shape), args.seq)
  shape = (args.batch, args.seq, cfg.n_head, cfg.head_dim)
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(3))
  names = ["base"] + [n for n in args.variants.split(",") if n and n != "base"]
  cpu = {n: [] for n in names}
  fns = {n: timed(variant(n), q, k, v, cpu[n], args.forward_only) for n in names}
  if args.check:
    ref = jax.grad(lambda *a: VARIANTS["base"](*a).sum(), argnums=(0, 1, 2))(q, k, v)
    for n in names[1:]:
      got = jax.grad(lambda *a, n=n: variant(n)(*a).sum(), argnums=(0, 1, 2))(q, k, v)
      err = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(got, ref))
      print(f"{n}: max |grad - base grad| = {err:.2e}")
  print(f"{args.shape} attention core {shape} (B, T, H, K), "
        f"{'forward only' if args.forward_only else 'forward + backward'}; "
        f"load {os.getloadavg()[0]:.2f} before")
  times = timing.interleave(fns, args.reps, 2, settle_s=0.2)
  base = times["base"]
  print("| kernel | median (ms) | base / kernel | per-rep ratios min-max | CPU s / wall s |\n"
        "|---|---|---|---|---|")
  for n in names:
    ratios = [b / t for b, t in zip(base, times[n])]
    print(f"| {n} | {1e3 * statistics.median(times[n]):.1f} | "
          f"{statistics.median(base) / statistics.median(times[n]):.2f} | "
          f"{min(ratios):.2f}-{max(ratios):.2f} | "
          f"{sum(cpu[n][-args.reps:]) / sum(times[n]):.2f} |", flush=True)
  print(f"load {os.getloadavg()[0]:.2f} after")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
