"""The machine's limit for a training step, measured in the same run.

Two limits:

- the **libraries' ceiling**: the step's own dense float32 matmuls, forward and backward,
  timed one by one in XLA and in PyTorch, give each library's FLOP/s; each step is a
  fraction of the faster one. ``matmul_limit`` (``benchmarks.step --processes=one``: one
  process, both libraries taking turns) times every product, the attention's whole ``T x T``
  squares included, and counts the step as ``PCT_COUNTS`` says (``limit_fields``).
  ``library_ceiling`` (``benchmarks.step --processes=separate``: one fresh process per
  library, settled between calls) times the weight matmuls alone: no attention kernel here runs a
  whole-square product, so the step is counted with causal attention FLOPs
  (``model.flops_per_token(..., causal=True)``, the pairs a causal kernel computes) and
  held against the dense products' rate;
- the **machine's FMA peak** (``fma_peak``): ``benchmarks/fma_peak.c``, compiled here with
  the system's C compiler, runs independent vector FMAs on every core, nothing from
  memory: the most float32 FLOP/s these cores do, whatever the library.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import model
from benchmarks import timing

PCT_COUNTS = ("flops_per_token: 6 N + 12 L H Q T (PaLM), attention over the whole T x T square, "
              "including the half above the diagonal a causal kernel skips")


def matmul_forms(cfg: model.ModelConfig, batch: int, seq: int) -> list[tuple]:
  """The dense matmuls of one training step at ``batch x seq``, forward and backward.

  Each is ``(batch dims, m, k, n, a transposed, b transposed, times per step)``: the
  product ``a @ b`` of ``(m, k)`` by ``(k, n)`` matrices (stored transposed where marked,
  as the backward pass reads them). Every weight matrix ``(k, n)`` over the ``M = B T``
  token rows gives ``y = x w``, ``dx = dy w^T`` and ``dw = x^T dy``; attention gives
  ``q k^T`` and ``do v^T`` (``T x Q`` by ``Q x T``), ``p v`` and ``ds k`` (``T x T`` by
  ``T x Q``), ``p^T do`` and ``ds^T q``, per head, over the whole ``T x T`` square. Their
  FLOPs are PaLM's count (``model.flops_per_token``) less the biases and norms.
  """
  M, D, F, L = batch * seq, cfg.d_model, cfg.mlp_dim, cfg.n_layer
  f_in = 2 * F if cfg.activation == "swiglu" else F
  weights = [(D, 3 * D, L), (D, D, L), (D, f_in, L), (F, D, L), (D, cfg.padded_vocab, 1)]
  forms = []
  for k, n, count in weights:
    forms += [((), M, k, n, False, False, count), ((), M, n, k, False, True, count),
              ((), k, M, n, True, False, count)]
  BH, T, Q = batch * cfg.n_head, seq, cfg.head_dim
  forms += [((BH,), T, Q, T, False, True, 2 * L), ((BH,), T, T, Q, False, False, 2 * L),
            ((BH,), T, T, Q, True, False, 2 * L)]
  return forms


def dense_forms(cfg: model.ModelConfig, batch: int, seq: int) -> list[tuple]:
  """The weight matmuls of ``matmul_forms`` (no batch dimensions): the products that run as
  whole dense GEMMs in both libraries' steps."""
  return [f for f in matmul_forms(cfg, batch, seq) if not f[0]]


def form_flops(form: tuple) -> float:
  """FLOPs of one step's products of ``form`` (all its ``times per step``)."""
  batch, m, k, n, _, _, count = form
  return 2.0 * int(np.prod(batch)) * m * k * n * count


def _operands(form: tuple, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  batch, m, k, n, ta, tb, _ = form
  rng = np.random.default_rng(seed)
  a = rng.standard_normal((*batch, k, m) if ta else (*batch, m, k), np.float32)
  b = rng.standard_normal((*batch, n, k) if tb else (*batch, k, n), np.float32)
  return a, b


def xla_matmul(form: tuple):
  """One jitted float32 product of ``form`` (transposes folded into the dot) as a function."""
  _, _, _, _, ta, tb, _ = form
  a, b = (jnp.asarray(x) for x in _operands(form))
  fn = jax.jit(lambda a, b: (jnp.swapaxes(a, -1, -2) if ta else a) @
               (jnp.swapaxes(b, -1, -2) if tb else b))
  return lambda: fn(a, b).block_until_ready()


def torch_matmul(form: tuple):
  """The same product in PyTorch (transposed views, as its autograd hands them to BLAS)."""
  import torch  # pylint: disable=import-outside-toplevel
  _, _, _, _, ta, tb, _ = form
  a, b = (torch.from_numpy(x) for x in _operands(form))
  return lambda: torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b)


def matmul_limit(cfg: model.ModelConfig, batch: int, seq: int, reps: int, warmup: int,
                 torch_too: bool, clock=time.perf_counter, sleep=time.sleep) -> dict:
  """Each side's float32 FLOP/s over the step's matmuls (``matmul_forms``), run one by one.

  Each product is timed (median of ``reps``, XLA and PyTorch taking turns) and counted as
  often as a step runs it: the ceiling is all their FLOPs over all their seconds, what a
  step made of nothing but these matmuls would reach on this machine today. ``clock`` and
  ``sleep`` are the timing pair (tests pass a fake one: no real settle then).
  """
  forms = matmul_forms(cfg, batch, seq)
  seconds = {"xla": 0.0, "torch": 0.0} if torch_too else {"xla": 0.0}
  for form in forms:
    fns = {"xla": xla_matmul(form), "torch": torch_matmul(form)} if torch_too else \
        {"xla": xla_matmul(form)}
    # Settled: libgomp's workers spin on after a PyTorch call and cost the next XLA product
    # 15-18 % (issue 31); a 50 ms pause lets them sleep.
    times = timing.interleave(fns, reps, warmup, settle_s=0.05, clock=clock, sleep=sleep)
    for side, ts in times.items():
      seconds[side] += form[-1] * statistics.median(ts)
  total = sum(form_flops(f) for f in forms)
  return {f"{side}_matmul_flops_per_s": total / s for side, s in seconds.items()}


def library_ceiling(cfg: model.ModelConfig, batch: int, seq: int, library: str, reps: int = 3,
                    warmup: int = 1, settle_s: float = 0.05, clock=time.perf_counter,
                    sleep=time.sleep) -> float:
  """One library's float32 FLOP/s over the step's weight matmuls (``dense_forms``), each
  product timed alone (median of ``reps``, ``settle_s`` after the call before: a library's
  spinning workers from the previous call do not slow the next), counted as often as a step
  runs it. ``library``: ``"xla"`` or ``"torch"``; call it in a process that runs no other."""
  make = {"xla": xla_matmul, "torch": torch_matmul}[library]
  forms = dense_forms(cfg, batch, seq)
  seconds = 0.0
  for form in forms:
    times = timing.interleave({library: make(form)}, reps, warmup, settle_s=settle_s, clock=clock,
                              sleep=sleep)
    seconds += form[-1] * statistics.median(times[library])
  return sum(form_flops(f) for f in forms) / seconds


FMA_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fma_peak.c")


def fma_peak(seconds: float = 0.3, reps: int = 5, compiler: str | None = None) -> dict:
  """The machine's float32 FMA peak: ``fma_peak.c`` compiled (``-O3 -march=native
  -fopenmp``) and run on every core, each timing about ``seconds`` long, the best of
  ``reps``. ``{"fma_peak_flops_per_s", "fma_lanes", "fma_threads"}``, or
  ``{"fma_peak_skipped": why}`` where no C compiler or OpenMP is at hand."""
  cc = compiler or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
  if not cc or not shutil.which(cc):
    return {"fma_peak_skipped": "no C compiler (cc or $CC) to build benchmarks/fma_peak.c"}
  with tempfile.TemporaryDirectory() as tmp:
    exe = os.path.join(tmp, "fma_peak")
    built = subprocess.run([cc, "-O3", "-march=native", "-fopenmp", FMA_SOURCE, "-o", exe],
                           capture_output=True, text=True, check=False)
    if built.returncode:
      return {"fma_peak_skipped": f"{cc} could not build fma_peak.c: "
                                  f"{(built.stderr.strip().splitlines() or [''])[-1][:200]}"}

    def measure(iters: int, times: int) -> dict:
      out = subprocess.run([exe, str(iters), str(times)], capture_output=True, text=True, check=True)
      return {k: float(v) for k, v in (line.split() for line in out.stdout.splitlines())}

    probe = measure(1_000_000, 1)  # about how fast: the real timings last ``seconds`` each
    per_iter = 2 * probe["LANES"] * probe["ACC"] * probe["THREADS"] / probe["FLOPS"]
    got = measure(max(1_000_000, int(seconds / per_iter)), reps)
  return {"fma_peak_flops_per_s": got["FLOPS"], "fma_lanes": int(got["LANES"]),
          "fma_threads": int(got["THREADS"])}


def limit_fields(times: dict[str, list[float]], tokens: int, limit: dict, flops_per_token: float,
                 flops_per_token_causal: float) -> dict:
  """Each side's step as a fraction of the faster side's matmul ceiling.

  The step's FLOPs are PaLM's count (``flops_per_token``: attention over the whole
  ``T x T`` square, as the ceiling's matmuls do); a causal kernel skips the part above the
  diagonal, so the count it needs (``flops_per_token_causal``) is recorded beside it.
  """
  ceiling = max(limit.values())
  row = {"limit_flops_per_s": ceiling, "flops_per_token": flops_per_token,
         "flops_per_token_causal": flops_per_token_causal, "pct_of_limit_counts": PCT_COUNTS}
  for who, side in (("ours", "andrea_jax"), ("peer", "peer")):
    if side in times:
      row[f"{who}_pct_of_limit"] = tokens / statistics.median(times[side]) * flops_per_token / ceiling
  return row
