"""What one vmapped program buys over N sequential models, measured (interleaved A/B).

  python -m benchmarks.vmap_members --members=6 --d_model=64 --n_layer=6 --block_size=64
  python -m benchmarks.vmap_members --attention_impl=xla,xla_flash --rounds=5

For each attention kernel, compiles (a) one model's train step, (b) the vmapped step of
``--members`` models (``step.train_step`` over them, as andrea_jax/multi.py runs it) and (c) the same members in
one program through ``lax.map`` (a loop over members: unbatched matmuls), then alternates
timing ``members`` calls of (a) against one call of (b) and of (c), ``--rounds`` times, so
that a machine whose load changes affects all alike. Prints the median time per model-step of each and
the ratio, and the cost of one model-step at this shape (what a sweep's budget is made of).
Random tokens: the speed does not depend on the text.
"""

from __future__ import annotations

import functools
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from andrea_jax import model
from andrea_jax import multi
from andrea_jax import step as step_lib
from experiments.configs import tiny

_MEMBERS = flags.DEFINE_integer("members", 6, "models per vmapped program")
_D = flags.DEFINE_integer("d_model", 64, "width")
_L = flags.DEFINE_integer("n_layer", 6, "depth")
_H = flags.DEFINE_integer("n_head", 4, "heads")
_T = flags.DEFINE_integer("block_size", 64, "context")
_B = flags.DEFINE_integer("batch_size", 16, "sequences per step")
_V = flags.DEFINE_integer("vocab_size", 2305, "vocabulary")
_IMPLS = flags.DEFINE_list("attention_impl", ["xla_flash", "xla"], "kernels to compare")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "interleaved A/B rounds")
_STEPS = flags.DEFINE_integer("steps", 3, "steps per timing")


def programs(impl: str):
  cfg = model.ModelConfig(vocab_size=_V.value, block_size=_T.value, d_model=_D.value,
                          n_layer=_L.value, n_head=_H.value, attention_impl=impl)
  t = step_lib.TrainConfig(**tiny.get_config().train)
  prog = multi.programs(cfg, t)
  step = functools.partial(step_lib.train_step, cfg=cfg, optimizer=multi.make_optimizer(t))
  one = jax.jit(step, donate_argnums=0)
  mapped = jax.jit(lambda s, b: jax.lax.map(lambda sb: step(*sb), (s, b)), donate_argnums=0)
  n = _MEMBERS.value
  rng = np.random.default_rng(0)
  batch = jnp.asarray(rng.integers(0, _V.value, (n, 1, _B.value, _T.value + 1)), jnp.int32)
  stacked = prog.init(jnp.arange(n, dtype=jnp.int32), jnp.full((n,), 1e-3, jnp.float32))
  singles = [jax.tree.map(lambda a, i=i: a[i], stacked) for i in range(n)]
  return prog.step, one, mapped, stacked, singles, batch


def time_calls(fn, steps: int) -> float:
  start = time.perf_counter()
  out = None
  for _ in range(steps):
    out = fn()
  jax.block_until_ready(out)
  return time.perf_counter() - start


def measure(impl: str) -> dict:
  vstep, one, mapped, stacked, singles, batch = programs(impl)
  n, steps = _MEMBERS.value, _STEPS.value
  state = {"v": stacked, "s": singles, "m": jax.tree.map(jnp.copy, stacked)}

  def run_mapped():
    state["m"], m = mapped(state["m"], batch)
    return m["loss"]

  def run_vmapped():
    state["v"], m = vstep(state["v"], batch)
    return m["loss"]

  def run_sequential():
    out = []
    for i in range(n):
      state["s"][i], m = one(state["s"][i], batch[i])
      out.append(m["loss"])
    return out

  run_vmapped(), run_sequential(), run_mapped()  # compile
  seq, vm, mp = [], [], []
  for _ in range(_ROUNDS.value):
    seq.append(time_calls(run_sequential, steps) / (steps * n))
    vm.append(time_calls(run_vmapped, steps) / (steps * n))
    mp.append(time_calls(run_mapped, steps) / (steps * n))
  return {"attention_impl": impl, "members": n, "sequential_s_per_model_step": float(np.median(seq)),
          "vmapped_s_per_model_step": float(np.median(vm)),
          "lax_map_s_per_model_step": float(np.median(mp)),
          "vmap_speedup": float(np.median(seq) / np.median(vm)),
          "lax_map_speedup": float(np.median(seq) / np.median(mp))}


def main(argv):
  del argv
  print(f"{jax.devices()[0].device_kind}: d_model {_D.value}, {_L.value} layers, context "
        f"{_T.value}, batch {_B.value}, vocab {_V.value}, {_MEMBERS.value} members")
  for impl in _IMPLS.value:
    print(json.dumps(measure(impl)), flush=True)


if __name__ == "__main__":
  app.run(main)
