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

The timing is the step benchmark's (``benchmarks/step.py``): the peer is its child process
(``sides.run_child``), each of our variants its ``measure_side`` in this process, one after
another (a warm-up step, then the timed ones, their median). A variant that fails (out of
memory, a kernel missing) prints its error and the check goes on. ``--smoke`` runs the same
code at the ``tiny`` shape; on a machine without an NVIDIA GPU, cuDNN attention falls back
to ``xla_flash`` (a note says so) and the peer uses ``torch.compile``'s eager backend (no
C++ toolchain or minutes of compiling).
Without a GPU, ``tests/test_export_gpu.py`` lowers the run's step with these settings
(``model_cfg``) for CUDA on an 8-device mesh and checks the StableHLO; cuDNN's attention,
compiling and speed need this check on a GPU.
"""

from __future__ import annotations

import json
import os
import sys
import time

# JAX grows its GPU memory as needed instead of taking 75 % at start: the peer's
# subprocess runs first, and a failed variant must not starve the next one.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from absl import app  # pylint: disable=wrong-import-position
from absl import flags  # pylint: disable=wrong-import-position
from absl import logging  # pylint: disable=wrong-import-position
import jax  # pylint: disable=wrong-import-position

from andrea_jax import metrics  # pylint: disable=wrong-import-position
from andrea_jax import model  # pylint: disable=wrong-import-position
from benchmarks import ours  # pylint: disable=wrong-import-position
from benchmarks import results as results_lib  # pylint: disable=wrong-import-position
from benchmarks import shapes  # pylint: disable=wrong-import-position
from benchmarks import sides  # pylint: disable=wrong-import-position

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


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags: defined when it runs, so importing the module defines none."""
  flags.DEFINE_bool("smoke", False, "tiny shapes: every path, any machine", flag_values=fv)
  flags.DEFINE_bool("skip_peer", False, "do not time the PyTorch peer", flag_values=fv)
  flags.DEFINE_string("out", "", "also write the results as JSON here", flag_values=fv)


def settings(attention_impl: str, remat: str, dtype: str) -> str:
  """A variant as the step benchmark's ``--settings``: the kernel, remat policy and dtype,
  the vocabulary padded to ``PAD``, and no warmup (full-size updates from the first step:
  the schedule does not change what a step costs, and the agreement wants them)."""
  return (f"model.attention_impl={attention_impl},model.remat_policy={remat},"
          f"model.compute_dtype={dtype},model.vocab_pad_multiple={PAD},train.warmup_steps=0")


def model_cfg(config, seq: int, attention_impl: str, remat: str, dtype: str) -> model.ModelConfig:
  """The config's model at ``seq`` tokens with the given kernel, remat policy and dtype
  (what ``settings`` gives the step benchmark; ``tests/test_export_gpu.py`` lowers it)."""
  return model.ModelConfig(**{**config.model, "block_size": max(seq, config.model.block_size),
                              "attention_impl": attention_impl, "remat_policy": remat,
                              "compute_dtype": dtype, "vocab_pad_multiple": PAD})


def kernel_for_platform(impl: str, platform: str) -> str:
  """cuDNN's kernel needs an NVIDIA GPU: elsewhere the XLA flash kernel stands in (printed)."""
  if impl == "cudnn" and platform != "gpu":
    print(f"note: attention_impl=cudnn needs an NVIDIA GPU; on {platform} xla_flash stands in")
    return "xla_flash"
  return impl


def guarded(fn, *args) -> dict:
  """``fn(*args)``, or the error it raised (out of memory, a missing kernel) as a row."""
  try:
    return fn(*args)
  except Exception as e:  # pylint: disable=broad-except
    return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}


def time_variant(s: dict, setting: str, device: str) -> dict:
  """Our step with ``setting`` (``settings``), timed by the step benchmark in this process:
  compile time, median step time, tokens/s, loss and MFU."""
  config = shapes.load_config(s["config"], setting)
  row = sides.measure_side("andrea_jax", config, s["batch"], s["seq"], 1, s["steps"], device)
  cfg = shapes.model_config(config, s["seq"])
  peak = metrics.peak_flops(jax.devices()[0], model.compute_dtype(cfg))
  if peak:
    row["mfu"] = row["tokens_per_s"] * model.flops_per_token(cfg, s["seq"]) / peak
  return row


def losses(s: dict, setting: str) -> list[float]:
  """Training losses of ``agree_steps`` updates from seed 0 on fixed batches."""
  st = ours.ours_step(shapes.load_config(s["config"], setting), s["agree_batch"], s["seq"])
  return [st.run(ours.random_tokens(st.cfg, s["agree_batch"], s["seq"], 100 + i))
          for i in range(s["agree_steps"])]


def fmt(row: dict) -> str:
  if "error" in row or "skipped" in row:
    return row.get("error") or f"skipped: {row['skipped']}"
  mfu = f", MFU {row['mfu']:.1%}" if "mfu" in row else ", MFU n/a (no peak FLOP/s for this device)"
  compile_s = f"compile {row['compile_s']:.1f} s, " if "compile_s" in row else ""
  return f"{compile_s}step {row['step_s'] * 1e3:.1f} ms, {row['tokens_per_s']:,.0f} tokens/s{mfu}"


def main(argv: list[str], fv: flags.FlagValues = flags.FLAGS) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; every setting is a --flag")
  if "verbosity" in fv and not fv["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # JAX logs every backend it could not start at INFO
  s = SMOKE if fv.smoke else FULL
  platform = jax.devices()[0].platform
  if platform != "gpu" and not fv.smoke:
    print(f"error: no GPU here (JAX sees {platform}): run this on the GPU machine, or pass "
          f"--smoke for the tiny CPU run of the same paths", file=sys.stderr)
    return 2
  device = "auto" if fv.smoke else "gpu"
  started = time.perf_counter()
  print(f"gpu_check: {results_lib.machine()}; {s['config']} at {s['batch']} x {s['seq']}, bf16, "
        f"vocabulary padded to a multiple of {PAD}", flush=True)
  given = [f.serialize() for f in fv.get_flags_for_module(fv.find_module_defining_flag("smoke"))
           if f.present]
  results = {**results_lib.run_record("benchmarks.gpu_check", given, os.getloadavg()[0]),
             "machine": results_lib.machine(), "settings": s, "variants": []}
  results.pop("shapes")
  # The peer first, in a process of its own: it and JAX never hold the GPU's memory at once.
  results["peer"] = ({"skipped": "--skip_peer"} if fv.skip_peer else sides.run_child(
      "peer", s["config"], s["batch"], s["seq"], 2, s.get("peer_steps", s["steps"]),
      settings=settings("xla_flash", "none", "bfloat16"), device=device,
      peer_backend=s["peer_backend"]))
  print(f"peer (torch.compile + SDPA, bf16): {fmt(results['peer'])}", flush=True)

  measured: dict[tuple, dict] = {}  # a stand-in kernel's program is the one it stands in for
  for impl, remat in VARIANTS:
    ran_as = kernel_for_platform(impl, platform)
    if (ran_as, remat) not in measured:
      measured[ran_as, remat] = guarded(time_variant, s, settings(ran_as, remat, "bfloat16"), device)
    row = {"attention_impl": impl, "ran_as": ran_as, "remat_policy": remat, **measured[ran_as, remat]}
    results["variants"].append(row)
    print(f"ours, attention {impl:9s} remat {remat:13s}: {fmt(row)}", flush=True)
  fastest = [r for r in results["variants"] if "tokens_per_s" in r]
  peer_rate = results["peer"].get("tokens_per_s")
  if fastest and peer_rate:
    best = max(fastest, key=lambda r: r["tokens_per_s"])
    print(f"fastest ({best['attention_impl']}, remat {best['remat_policy']}) against the peer: "
          f"{best['tokens_per_s'] / peer_rate:.2f}x")

  run = lambda impl, dtype: guarded(lambda: {"losses": losses(s, settings(impl, "none", dtype))})
  bf16, f32 = run(kernel_for_platform("cudnn", platform), "bfloat16"), run("xla_flash", "float32")
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
  if fv.out:
    with open(fv.out, "w", encoding="utf-8") as f:
      json.dump(results, f, indent=2)
  return 0


if __name__ == "__main__":
  define_flags()
  from experiments import cli  # pylint: disable=wrong-import-position
  cli.run(main)
