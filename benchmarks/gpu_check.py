"""The GPU check in one command: andrea120m's training step on one NVIDIA GPU, against the peer.

  python -m benchmarks.gpu_check             # one H100/H200 class GPU: under 10 minutes
  python -m benchmarks.gpu_check --smoke     # every path at a tiny shape, on any machine (tests)

At 64 x 1024 tokens in bf16 with the vocabulary padded to a multiple of 128, it prints:

1. the ``torch.compile`` + SDPA peer (``transformers`` GPT-2 of the same shape, bf16
   autocast, AdamW, clipping) in tokens/s, run first in a subprocess so that it and JAX
   never hold the GPU's memory at once (skipped, with the reason, without torch or CUDA);
2. ``step.train_step``'s compile time, step time, tokens/s and MFU for the attention
   kernels cuDNN and XLA (``xla_flash``) under the remat policies ``none`` and
   ``dots_saveable``;
3. bf16-vs-float32 loss agreement over a few updates from the same initialisation.

A variant that fails (out of memory, a kernel missing) prints its error and the check
goes on. ``--smoke`` runs the same code at the ``tiny`` shape; on a machine without an
NVIDIA GPU, cuDNN attention falls back to ``xla_flash`` (a note says so) and the peer
uses ``torch.compile``'s eager backend (no C++ toolchain or minutes of compiling).
Without a GPU, ``tests/test_export_gpu.py`` lowers the run's step with these settings
(``model_cfg``) for CUDA on an 8-device mesh and checks the StableHLO; cuDNN's attention,
compiling and speed need this check on a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import subprocess
import sys
import time

# JAX grows its GPU memory as needed instead of taking 75 % at start: the peer's
# subprocess runs first, and a failed variant must not starve the next one.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position

from andrea_jax import metrics  # pylint: disable=wrong-import-position
from andrea_jax import model  # pylint: disable=wrong-import-position
from andrea_jax import step as step_lib  # pylint: disable=wrong-import-position
from benchmarks import peer as peer_lib  # pylint: disable=wrong-import-position
from benchmarks import results as results_lib  # pylint: disable=wrong-import-position
from benchmarks import shapes  # pylint: disable=wrong-import-position

FULL = {"config": "andrea120m", "batch": 64, "seq": 1024, "steps": 10, "agree_batch": 8,
        "agree_steps": 5, "peer_backend": "inductor"}
# The smoke's peer times one step after its two warm-up calls: on a CPU its bf16 autocast
# step takes about 2 s even at this size.
SMOKE = {"config": "tiny", "batch": 2, "seq": 32, "steps": 2, "agree_batch": 2,
         "agree_steps": 2, "peer_backend": "eager", "peer_steps": 1}
VARIANTS = [("cudnn", "none"), ("cudnn", "dots_saveable"),
            ("xla_flash", "none"), ("xla_flash", "dots_saveable")]
PAD = 128
AGREEMENT_NATS = 0.05  # bf16 vs float32 loss, per step, over the first few updates


# ----------------------------------------------------------------------------- ours


def model_cfg(config, seq: int, attention_impl: str, remat: str, dtype: str) -> model.ModelConfig:
  """The config's model at ``seq`` tokens with the given kernel, remat policy and dtype."""
  return model.ModelConfig(**{**config.model, "block_size": max(seq, config.model.block_size),
                              "attention_impl": attention_impl, "remat_policy": remat,
                              "compute_dtype": dtype, "vocab_pad_multiple": PAD})


def kernel_for_platform(impl: str, platform: str) -> str:
  """cuDNN's kernel needs an NVIDIA GPU: elsewhere the XLA flash kernel stands in (printed)."""
  if impl == "cudnn" and platform != "gpu":
    print(f"note: attention_impl=cudnn needs an NVIDIA GPU; on {platform} xla_flash stands in")
    return "xla_flash"
  return impl


_COMPILED: dict[tuple, tuple] = {}  # one program per (model, train config, batch, seq)


def compiled_step(cfg: model.ModelConfig, t, batch: int, seq: int, seed: int = 0):
  """The jitted, donated train step compiled for ``cfg``: (step, fresh state, compile seconds).

  Compiled once per (model, train config, batch, seq) in a process: a second caller (the
  bf16 agreement at the smoke's shape is the first variant's program) gets the same
  executable, a fresh state and the first compile's seconds."""
  key = (cfg, json.dumps(t.to_dict(), sort_keys=True, default=str), batch, seq)
  if key not in _COMPILED:
    optimizer = step_lib.make_optimizer(step_lib.TrainConfig(**t))
    init = jax.jit(step_lib.init_state, static_argnums=(0, 1))
    step = jax.jit(functools.partial(step_lib.train_step, cfg=cfg, optimizer=optimizer),
                   donate_argnums=0)
    start = time.perf_counter()
    state = init(cfg, optimizer, jax.random.key(0))
    shape = jax.ShapeDtypeStruct((1, batch, seq + 1), np.int32)
    compiled = step.lower(state, shape).compile()
    _COMPILED[key] = (compiled, lambda s: init(cfg, optimizer, jax.random.key(s)),
                      time.perf_counter() - start)
  compiled, init_at, compile_s = _COMPILED[key]
  return compiled, init_at(seed), compile_s


def random_batch(cfg: model.ModelConfig, batch: int, seq: int, seed: int) -> jax.Array:
  ids = np.random.default_rng(seed).integers(0, cfg.vocab_size, (1, batch, seq + 1), np.int32)
  return jax.device_put(ids)


def time_variant(cfg: model.ModelConfig, t, batch: int, seq: int, steps: int) -> dict:
  """Compile time, median step time, tokens/s and MFU of ``step.train_step``."""
  step, state, compile_s = compiled_step(cfg, t, batch, seq)
  tokens = random_batch(cfg, batch, seq, 0)
  state, m = step(state, tokens)  # warm-up
  jax.block_until_ready(m["loss"])
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    state, m = step(state, tokens)
    jax.block_until_ready(m["loss"])
    times.append(time.perf_counter() - start)
  step_s = statistics.median(times)
  row = {"compile_s": compile_s, "step_s": step_s, "tokens_per_s": batch * seq / step_s,
         "loss": float(m["loss"])}
  peak = metrics.peak_flops(jax.devices()[0])
  if peak:
    row["mfu"] = row["tokens_per_s"] * model.flops_per_token(cfg, seq) / peak
  return row


def losses(cfg: model.ModelConfig, t, batch: int, seq: int, steps: int) -> list[float]:
  """Training losses of ``steps`` updates from seed 0 on fixed batches."""
  step, state, _ = compiled_step(cfg, t, batch, seq)
  out = []
  for i in range(steps):
    state, m = step(state, random_batch(cfg, batch, seq, 100 + i))
    out.append(float(m["loss"]))
  return out


def guarded(fn, *args) -> dict:
  """``fn(*args)``, or the error it raised (out of memory, a missing kernel) as a row."""
  try:
    return fn(*args)
  except Exception as e:  # pylint: disable=broad-except
    return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}


# ----------------------------------------------------------------------------- the peer


def peer_measure(name: str, batch: int, seq: int, steps: int, backend: str, smoke: bool) -> dict:
  """tokens/s of the ``torch.compile`` + SDPA peer, bf16 autocast (runs in the subprocess)."""
  missing = peer_lib.peer_available()
  if missing:
    return {"skipped": missing}
  import torch  # pylint: disable=import-outside-toplevel
  device = "cuda" if torch.cuda.is_available() else "cpu"
  if device == "cpu" and not smoke:
    return {"skipped": f"torch {torch.__version__} sees no CUDA device (a CPU build?)"}
  config = shapes.load_config(name)
  t = config.train
  cfg = model_cfg(config, seq, "xla_flash", "none", "bfloat16")
  # The same padded vocabulary as ours, so both multiply the same matrix shapes.
  cfg = dataclasses.replace(cfg, vocab_size=cfg.padded_vocab)
  run = peer_lib.peer_step(cfg, t, batch, seq, accelerator=(device == "cuda"),
                           compile_backend=backend, autocast=True)
  start = time.perf_counter()
  run()
  run()  # compiles on the first call(s)
  compile_s = time.perf_counter() - start
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    run()
    times.append(time.perf_counter() - start)
  step_s = statistics.median(times)
  return {"device": device, "backend": backend, "warmup_s": compile_s, "step_s": step_s,
          "tokens_per_s": batch * seq / step_s, "torch": torch.__version__}


def peer_in_subprocess(s: dict, smoke: bool) -> dict:
  code = (f"import json, benchmarks.gpu_check as g; print('PEER ' + json.dumps(g.peer_measure("
          f"{s['config']!r}, {s['batch']}, {s['seq']}, {s.get('peer_steps', s['steps'])}, {s['peer_backend']!r}, "
          f"{smoke})))")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                       check=False)
  for line in out.stdout.splitlines():
    if line.startswith("PEER "):
      return json.loads(line[5:])
  return {"error": f"the peer's process exited with {out.returncode}: "
                   f"{(out.stderr.strip().splitlines() or [''])[-1][:300]}"}


# ----------------------------------------------------------------------------- report


def fmt(row: dict) -> str:
  if "error" in row or "skipped" in row:
    return row.get("error") or f"skipped: {row['skipped']}"
  mfu = f", MFU {row['mfu']:.1%}" if "mfu" in row else ", MFU n/a (no peak FLOP/s for this device)"
  compile_s = f"compile {row['compile_s']:.1f} s, " if "compile_s" in row else ""
  return f"{compile_s}step {row['step_s'] * 1e3:.1f} ms, {row['tokens_per_s']:,.0f} tokens/s{mfu}"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--smoke", action="store_true", help="tiny shapes: every path, any machine")
  p.add_argument("--skip_peer", action="store_true", help="do not time the PyTorch peer")
  p.add_argument("--out", default="", help="also write the results as JSON here")
  args = p.parse_args(argv)
  s = SMOKE if args.smoke else FULL
  platform = jax.devices()[0].platform
  if platform != "gpu" and not args.smoke:
    print(f"error: no GPU here (JAX sees {platform}): run this on the GPU machine, or pass "
          f"--smoke for the tiny CPU run of the same paths", file=sys.stderr)
    return 2
  started = time.perf_counter()
  print(f"gpu_check: {results_lib.machine()}; {s['config']} at {s['batch']} x {s['seq']}, bf16, "
        f"vocabulary padded to a multiple of {PAD}", flush=True)
  results = {"machine": results_lib.machine(), "settings": s, "variants": []}
  results["peer"] = ({"skipped": "--skip_peer"} if args.skip_peer
                     else peer_in_subprocess(s, args.smoke))
  print(f"peer (torch.compile + SDPA, bf16): {fmt(results['peer'])}", flush=True)

  config = shapes.load_config(s["config"])
  # One train config for every program: the agreement's, without warmup (full-size updates
  # from the first step); the schedule does not change what a step costs, and at the
  # smoke's shape the agreement's bf16 program is then the first variant's, compiled once.
  agree = config.train.copy_and_resolve_references()
  agree.warmup_steps = 0
  measured: dict[tuple, dict] = {}  # a stand-in kernel's program is the one it stands in for
  for impl, remat in VARIANTS:
    cfg = model_cfg(config, s["seq"], kernel_for_platform(impl, platform), remat, "bfloat16")
    key = (cfg.attention_impl, remat)
    if key not in measured:
      measured[key] = guarded(time_variant, cfg, agree, s["batch"], s["seq"], s["steps"])
    row = {"attention_impl": impl, "ran_as": cfg.attention_impl, "remat_policy": remat,
           **measured[key]}
    results["variants"].append(row)
    print(f"ours, attention {impl:9s} remat {remat:13s}: {fmt(row)}", flush=True)
  fastest = [r for r in results["variants"] if "tokens_per_s" in r]
  peer_rate = results["peer"].get("tokens_per_s")
  if fastest and peer_rate:
    best = max(fastest, key=lambda r: r["tokens_per_s"])
    print(f"fastest ({best['attention_impl']}, remat {best['remat_policy']}) against the peer: "
          f"{best['tokens_per_s'] / peer_rate:.2f}x")

  cfg16 = model_cfg(config, s["seq"], kernel_for_platform("cudnn", platform), "none", "bfloat16")
  cfg32 = model_cfg(config, s["seq"], "xla_flash", "none", "float32")
  run = lambda cfg: guarded(lambda: {"losses": losses(cfg, agree, s["agree_batch"], s["seq"],
                                                      s["agree_steps"])})
  bf16, f32 = run(cfg16), run(cfg32)
  results["agreement"] = {"bfloat16": bf16, "float32": f32}
  if "losses" in bf16 and "losses" in f32:
    diff = max(abs(a - b) for a, b in zip(bf16["losses"], f32["losses"]))
    results["agreement"]["max_abs_diff"] = diff
    verdict = "agree" if diff < AGREEMENT_NATS else "DISAGREE"
    print(f"bf16 vs float32 losses over {s['agree_steps']} updates: "
          f"{[round(x, 4) for x in bf16['losses']]} vs {[round(x, 4) for x in f32['losses']]}; "
          f"max |diff| {diff:.4f} nats: {verdict} (threshold {AGREEMENT_NATS})")
  else:
    print(f"bf16 vs float32 losses: {bf16.get('error', '')} {f32.get('error', '')}")
  results["wall_s"] = time.perf_counter() - started
  print(f"gpu_check took {results['wall_s']:.0f} s", flush=True)
  if args.out:
    with open(args.out, "w", encoding="utf-8") as f:
      json.dump(results, f, indent=2)
  return 0


if __name__ == "__main__":
  sys.exit(main())
