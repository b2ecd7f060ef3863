"""Memory before it runs out: a run's peak, estimated before its first step, against what
the machine has free (issue 73: andrea120m on a 24 GB CPU was killed by the kernel at
15.2 GB, exit 137 and no line; an out-of-memory error raised inside the process is
``train.out_of_memory_advice``'s, a kernel kill never reaches it).

``Estimate.of``: the train step's new memory: the state (parameters and the optimizer's
moments, whatever the optimizer: AdamW two per parameter, Muon one momentum on the hidden
matrices and Adam's two on the rest, read off the state's own shapes) plus the step's
working memory. Where XLA reports the compiled step's sizes (``memory_analysis()``: CPU and
GPU) the working memory is its temporaries (gradients and activations among them) and the
figure is "compiled"; else it is "analytic": a gradient per parameter and the activations
at the remat policy (``ACTIVATIONS_PER_TOKEN``) and the logits. ``free_bytes``: what the
machine can still give (``/proc/meminfo`` MemAvailable on a CPU; a GPU's ``bytes_limit -
bytes_in_use``), or ``ANDREA_MEMORY_LIMIT_GB`` where set (a forced limit, for tests and for
a machine shared with others). ``check`` refuses a run that does not fit in one line (exit
2, before the state is allocated or the workdir is the run's), naming the estimate, what is
free and settings that fit, each checked with the same estimate: more microbatches
(``train.grad_accum_steps``: the same batch, its activations a fraction), a remat policy
that saves less, or a smaller batch (else: a machine with more memory, or a smaller config).
"""

from __future__ import annotations

import dataclasses
import math
import os

import jax
import numpy as np

from andrea_jax import errors

LIMIT_ENV = "ANDREA_MEMORY_LIMIT_GB"
# Values kept per token and layer for the backward pass, in units of d_model, by remat
# policy (the block's matmul outputs: qkv 3, attention 1, projection 1, MLP in 4 (x2 with its
# activation), MLP out 1, norms and residuals; "full" keeps the layer's input alone and
# recomputes one layer at a time). A rough count, used only where XLA reports no figure.
ACTIVATIONS_PER_TOKEN = {"none": 18, "dots_saveable": 10, "dots_with_no_batch_dims_saveable": 10,
                         "full": 1}
# The headroom a run must have beyond the estimate: at three shapes the estimate ran 10-20 % under
# the measured peak (the evaluation program, prefetched batches, allocator pages kept;
# docs/training.md), so a run needs its estimate times this.
MARGIN = 1.2
# What saves less than each policy (the remat suggestion).
LESS = {"none": "dots_with_no_batch_dims_saveable", "dots_saveable": "full",
        "dots_with_no_batch_dims_saveable": "full"}


def tree_bytes(tree) -> int:
  return sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def activation_bytes(cfg, rows: int, policy: str | None = None) -> int:
  """The activations a microbatch of ``rows`` keeps for its backward pass (analytic)."""
  policy = policy or cfg.remat_policy
  size = np.dtype(cfg.compute_dtype).itemsize
  tokens = rows * cfg.block_size
  per_layer = ACTIVATIONS_PER_TOKEN.get(policy, ACTIVATIONS_PER_TOKEN["none"]) * cfg.d_model
  recompute = 0 if policy == "none" else ACTIVATIONS_PER_TOKEN["none"] * cfg.d_model
  logits = 3 * (min(cfg.loss_chunk, cfg.block_size) if cfg.loss_chunk else cfg.block_size)
  return tokens * size * (cfg.n_layer * per_layer + recompute) + rows * logits * cfg.vocab_size * 4


@dataclasses.dataclass(frozen=True)
class Estimate:
  state: int  # parameters and optimizer state (the step's arguments)
  work: int  # the step's own memory beyond its arguments: gradients, activations, temporaries
  activations: int  # of ``work``: the part that scales with the microbatch's rows
  source: str  # "compiled" (XLA's figure) or "analytic"

  @property
  def total(self) -> int:
    return self.state + self.work

  @classmethod
  def of(cls, cfg, t, abstract_state, compiled=None, members: int = 1) -> "Estimate":
    """The estimate of a step over ``abstract_state``, from ``compiled``'s memory analysis
    where XLA gives one, else analytic."""
    state = tree_bytes(abstract_state)
    rows = t.batch_size // t.grad_accum_steps
    grads = tree_bytes(abstract_state["params"])
    acts = members * activation_bytes(cfg, rows)
    stats = _analysis(compiled)
    if stats is not None:
      work = (stats.temp_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes
              + max(stats.argument_size_in_bytes - state, 0))  # the batch
      return cls(state, work, min(acts, max(work - grads, 0)), "compiled")
    return cls(state, grads + acts, acts, "analytic")

  def scaled(self, rows_ratio: float = 1.0, acts_ratio: float = 1.0) -> int:
    """The total with the activations scaled (fewer rows per microbatch, another policy)."""
    return self.total - self.activations + int(self.activations * rows_ratio * acts_ratio)


def _analysis(compiled):
  try:
    stats = compiled.memory_analysis() if compiled is not None else None
  except (AttributeError, NotImplementedError, jax.errors.JaxRuntimeError):
    return None
  return stats if stats is not None and hasattr(stats, "temp_size_in_bytes") else None


def free_bytes(device=None) -> tuple[int | None, str]:
  """``(bytes, where from)``: what this machine can still give the run, or None (unknown)."""
  forced = os.environ.get(LIMIT_ENV, "").strip()
  if forced:
    try:
      return int(float(forced) * 2**30), f"{LIMIT_ENV}={forced}"
    except ValueError:
      raise errors.ConfigError(f"{LIMIT_ENV}={forced!r}: expected a number of GiB, e.g. 12"
                               ) from None
  device = device or jax.devices()[0]
  if device.platform == "cpu":
    try:
      with open("/proc/meminfo", encoding="ascii") as f:
        found = {line.split(":")[0]: line.split()[1] for line in f}
      return int(found["MemAvailable"]) * 1024, "MemAvailable in /proc/meminfo"
    except (OSError, KeyError, IndexError, ValueError):
      return None, ""
  stats = device.memory_stats() or {}
  if "bytes_limit" not in stats:
    return None, ""
  return stats["bytes_limit"] - stats.get("bytes_in_use", 0), f"{device.platform} memory_stats"


def _resident() -> str:
  """``, beside the x GiB this process holds`` on Linux (the peak is both), else ``""``."""
  try:
    with open("/proc/self/status", encoding="ascii") as f:
      kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
  except (OSError, StopIteration, ValueError, IndexError):
    return ""
  return f", beside the {gb(kb * 1024)} this process holds"


def gb(n: int) -> str:
  return f"{n / 2**30:.2f} GiB" if n < 10 * 2**30 else f"{n / 2**30:.1f} GiB"


def suggestions(est: Estimate, cfg, t, free: int) -> list[str]:
  """Settings that fit ``free``, each checked with ``est``'s model (module docstring)."""
  out, rows = [], t.batch_size // t.grad_accum_steps
  for accum in (2 ** k for k in range(1, 11)):
    total = t.grad_accum_steps * accum
    if total > t.batch_size or t.batch_size % total:
      break
    if est.scaled(rows_ratio=1 / accum) * MARGIN <= free:
      out.append(f"--config.train.grad_accum_steps={total} (the same batch in {total} "
                 f"microbatches: about {gb(est.scaled(rows_ratio=1 / accum))})")
      break
  policy = LESS.get(cfg.remat_policy)
  if policy:
    ratio = activation_bytes(cfg, rows, policy) / max(activation_bytes(cfg, rows), 1)
    if est.scaled(acts_ratio=ratio) * MARGIN <= free:
      out.append(f"--config.model.remat_policy={policy} (about {gb(est.scaled(acts_ratio=ratio))})")
  for batch in (t.batch_size // 2 ** k for k in range(1, 11)):
    if batch < t.grad_accum_steps or batch % t.grad_accum_steps:
      break
    if est.scaled(rows_ratio=batch / t.batch_size) * MARGIN <= free:
      out.append(f"--config.train.batch_size={batch} (about "
                 f"{gb(est.scaled(rows_ratio=batch / t.batch_size))})")
      break
  return out


def check(est: Estimate, cfg, t, device=None) -> str:
  """One line: the estimate and what is free; a ConfigError where it does not fit."""
  free, where = free_bytes(device)
  said = f"memory: this run's step needs about {gb(est.total)} ({est.source} estimate: " \
         f"state {gb(est.state)}, the step's own {gb(est.work)})"
  if free is None:
    return said + "; free memory unknown here"
  said += f"; {gb(free)} free ({where}){_resident()}"
  if est.total * MARGIN <= free:
    return said
  fixes = suggestions(est, cfg, t, free)
  raise errors.ConfigError(
      f"{said}: it does not fit with {MARGIN - 1:.0%} to spare, and the machine would stop it partway (a kernel kill says "
      f"nothing); " + (f"settings that fit: {'; or '.join(fixes)}" if fixes else
                       "no smaller batch or remat policy fits: use a smaller config or a "
                       "machine with more memory")
      + f" ({LIMIT_ENV} sets the limit this check uses)")
