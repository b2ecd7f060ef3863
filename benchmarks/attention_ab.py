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

import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app
from absl import flags

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


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags: defined when it runs, so importing the module defines none."""
  d = dict(flag_values=fv)
  flags.DEFINE_string("shape", "andrea12m", "named config whose heads and head size are timed", **d)
  flags.DEFINE_integer("batch", 4, "sequences", lower_bound=1, **d)
  flags.DEFINE_integer("seq", 1024, "tokens per sequence", lower_bound=1, **d)
  flags.DEFINE_integer("reps", 6, "interleaved reps", lower_bound=1, **d)
  flags.DEFINE_list("variants", ["kt"], "kernels against the base (see variant())", **d)
  flags.DEFINE_bool("forward_only", False, "time the forward pass alone", **d)
  flags.DEFINE_bool("check", False, "compare each variant's grads with base", **d)


def main(argv: list[str], fv: flags.FlagValues = flags.FLAGS) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; every setting is a --flag")
  cfg = shapes.model_config(shapes.load_config(fv.shape), fv.seq)
  shape = (fv.batch, fv.seq, cfg.n_head, cfg.head_dim)
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(3))
  names = ["base"] + [n for n in fv.variants if n and n != "base"]
  cpu = {n: [] for n in names}
  fns = {n: timed(variant(n), q, k, v, cpu[n], fv.forward_only) for n in names}
  if fv.check:
    ref = jax.grad(lambda *a: VARIANTS["base"](*a).sum(), argnums=(0, 1, 2))(q, k, v)
    for n in names[1:]:
      got = jax.grad(lambda *a, n=n: variant(n)(*a).sum(), argnums=(0, 1, 2))(q, k, v)
      err = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(got, ref))
      print(f"{n}: max |grad - base grad| = {err:.2e}")
  print(f"{fv.shape} attention core {shape} (B, T, H, K), "
        f"{'forward only' if fv.forward_only else 'forward + backward'}; "
        f"load {os.getloadavg()[0]:.2f} before")
  times = timing.interleave(fns, fv.reps, 2, settle_s=0.2)
  base = times["base"]
  print("| kernel | median (ms) | base / kernel | per-rep ratios min-max | CPU s / wall s |\n"
        "|---|---|---|---|---|")
  for n in names:
    ratios = [b / t for b, t in zip(base, times[n])]
    print(f"| {n} | {1e3 * statistics.median(times[n]):.1f} | "
          f"{statistics.median(base) / statistics.median(times[n]):.2f} | "
          f"{min(ratios):.2f}-{max(ratios):.2f} | "
          f"{sum(cpu[n][-fv.reps:]) / sum(times[n]):.2f} |", flush=True)
  print(f"load {os.getloadavg()[0]:.2f} after")
  return 0


if __name__ == "__main__":
  define_flags()
  from experiments import cli  # pylint: disable=ungrouped-imports
  cli.run(main)
