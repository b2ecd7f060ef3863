"""Training-step speed of andrea_jax against the Hugging Face GPT-2 peer, side by side: the
command, what it measures in which order, and where it writes.

  python -m benchmarks.train_step                                  # tiny, andrea12m, andrea120m
  python -m benchmarks.train_step --shapes=andrea120m --batch=1 --seq=1024 --reps=5
  python -m benchmarks.train_step --compile_depths=6,12,24          # scan vs unrolled loop
  python -m benchmarks.train_step --generate                        # KV-cache generation

Three steps are timed in one process after warm-up, in two interleaved passes (ours
against model-only, then ours against the peer; each pass alternates the order), and the
medians compared (``timing.py``): andrea_jax's ``step.train_step`` and the bare model
step (``ours.py``), so the step's overhead shows, and the PyTorch peer (``peer.py``).
The shapes are ``shapes.py``'s.

The limit is measured in the same run, since machines differ from day to day
(``matmul_limit.py``): each step is reported as a fraction of the faster side's matmul
ceiling (``ours_pct_of_limit``, ``peer_pct_of_limit``). ``--memory`` adds each side's peak
memory (``memory.py``).

Honest figures: the machine's 1-minute load average is recorded before and after each
shape, with the process's CPU time against wall time; a run whose load before starting
exceeds ``--max_load`` refuses to write into ``docs/`` (``--force`` measures anyway and
never writes there; ``results.py``). Install the peer with
``pip install -r requirements-bench.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import jax
import numpy as np

from andrea_jax import metrics
from andrea_jax import model
from benchmarks import matmul_limit as limit_lib
from benchmarks import memory
from benchmarks import ours
from benchmarks import peer
from benchmarks import results as results_lib
from benchmarks import shapes
from benchmarks import timing


def bench_shape(name: str, batch: int, seq: int, reps: int, warmup: int, accelerator: bool,
                settings: str = "", loadavg=os.getloadavg, clock=time.perf_counter,
                sleep=time.sleep) -> dict:
  """One shape in two interleaved passes: our step against the model-only step (the step's
  overhead, peer not running), then our step against the peer (the ratio); then the
  matmul limit of this shape on this machine (``matmul_limit``)."""
  config = shapes.load_config(name, settings)
  mine, cfg = ours.ours_step(config, batch, seq)
  bare, _ = ours.ours_step(config, batch, seq, bare=True)
  before = timing.load_snapshot(loadavg)
  own = timing.interleave({"andrea_jax": mine, "model_only": bare}, reps, warmup, clock=clock,
                          sleep=sleep)
  del bare  # its state (parameters and both moments) is not needed any more
  times = {"model_only": own["model_only"], "andrea_jax_beside_model_only": own["andrea_jax"]}
  missing = peer.peer_available()
  if missing is None:
    theirs = peer.peer_step(cfg, config.train, batch, seq, accelerator)
    times.update(timing.interleave({"andrea_jax": mine, "peer": theirs}, reps, warmup,
                                   clock=clock, sleep=sleep))
    del theirs
  else:
    times["andrea_jax"] = own["andrea_jax"]
  del mine
  limit = limit_lib.matmul_limit(cfg, batch, seq, reps, warmup, torch_too=missing is None,
                                 clock=clock, sleep=sleep)
  row = {"shape": name, "batch": batch, "seq": seq, "params": model.count_params(cfg),
         "compute_dtype": cfg.compute_dtype, "attention_impl": cfg.attention_impl,
         **timing.load_between(before, timing.load_snapshot(loadavg)),
         **timing.speed_fields(times, batch * seq), **limit,
         **limit_lib.limit_fields(times, batch * seq, limit, model.flops_per_token(cfg, seq),
                                  model.flops_per_token(cfg, seq, causal=True))}
  if missing:
    row["peer_missing"] = missing
  peak = metrics.peak_flops(jax.devices()[0])
  if peak:
    flops = model.flops_per_token(cfg, seq)
    for who in ("andrea_jax", "model_only", "peer"):
      if f"{who}_tokens_per_s" in row:
        row[f"{who}_mfu"] = row[f"{who}_tokens_per_s"] * flops / peak
  return row


def bench_generate(name: str, prompt_len: int, new_tokens: int, reps: int) -> dict:
  """KV-cache generation of ``new_tokens`` after a ``prompt_len`` prompt: ours against
  ``transformers``' ``generate``, greedy, tokens/s."""
  from andrea_jax import sample  # pylint: disable=import-outside-toplevel
  config = shapes.load_config(name)
  cfg = model.resolve_auto(model.ModelConfig(**config.model), verbose=False)
  params = model.init_params(cfg, jax.random.key(0))
  prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, prompt_len), np.int32)
  mine = lambda: np.asarray(sample.generate(params, cfg, prompt, new_tokens, jax.random.key(0),
                                            temperature=0.0))
  fns = {"andrea_jax": mine}
  if peer.peer_available() is None:
    import torch  # pylint: disable=import-outside-toplevel
    from transformers import GPT2Config, GPT2LMHeadModel  # pylint: disable=import-outside-toplevel
    net = GPT2LMHeadModel(GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.block_size,
                                     n_embd=cfg.d_model, n_layer=cfg.n_layer, n_head=cfg.n_head,
                                     activation_function="gelu_new")).eval()
    ids = torch.from_numpy(prompt).long()

    def theirs():
      with torch.no_grad():
        return net.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                            do_sample=False, use_cache=True, pad_token_id=0)

    fns["peer"] = theirs
  times = timing.interleave(fns, reps, 1)
  row = {"shape": name, "prompt": prompt_len, "new_tokens": new_tokens}
  for who, ts in times.items():
    row[f"{who}_tokens_per_s"] = new_tokens / statistics.median(ts)
  if "peer" in times:
    row["ratio"] = row["andrea_jax_tokens_per_s"] / row["peer_tokens_per_s"]
  return row


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--shapes", default="tiny,andrea12m,andrea120m")
  p.add_argument("--batch", type=int, default=0, help="sequences per step (0 = per-shape default)")
  p.add_argument("--seq", type=int, default=0, help="tokens per sequence (0 = per-shape default)")
  p.add_argument("--reps", type=int, default=5)
  p.add_argument("--warmup", type=int, default=2)
  p.add_argument("--memory", action="store_true", help="also measure peak RSS per side")
  p.add_argument("--compile_depths", default="", help="e.g. 6,12,24: compile time vs depth")
  p.add_argument("--generate", action="store_true", help="also time KV-cache generation")
  p.add_argument("--set", default="", help="config overrides, e.g. model.attention_block=256")
  p.add_argument("--out", default="", help="write results JSON here (and the tables beside it)")
  p.add_argument("--max_load", type=float, default=0.5,
                 help="refuse to write into docs/ when the 1-minute load average before "
                      "starting is above this")
  p.add_argument("--force", action="store_true",
                 help="measure on a busy machine; never writes into docs/")
  return p.parse_args(argv)


def main(argv=None, loadavg=os.getloadavg, clock=time.perf_counter, sleep=time.sleep) -> int:
  args = parse_args(argv)
  load_at_start = loadavg()[0]
  why = results_lib.refusal(args.out, load_at_start, args.max_load, args.force)
  if why and not args.force:
    print(f"error: {why}", file=sys.stderr)
    return 2
  accelerator = jax.devices()[0].platform != "cpu"
  missing = peer.peer_available()
  if missing:
    print(f"NOTE: {missing}; timing andrea_jax alone", file=sys.stderr)
  command = "python -m benchmarks.train_step " + " ".join(sys.argv[1:] if argv is None else argv)
  results = {"machine": results_lib.machine(), "command": command,
             "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             "load_at_start": load_at_start, "train": [], "compile": [], "generate": []}
  print(f"1-minute load average before starting: {load_at_start:.2f}", flush=True)
  for name in filter(None, args.shapes.split(",")):
    batch, seq = shapes.SHAPE_DEFAULTS.get(name, (4, 256))
    batch, seq = args.batch or batch, args.seq or seq
    row = bench_shape(name, batch, seq, args.reps, args.warmup, accelerator, args.set, loadavg,
                      clock, sleep)
    if args.memory and not accelerator:
      row["andrea_jax_rss_mb"] = memory.peak_rss(name, batch, seq, "andrea_jax")
      if not missing:
        row["peer_rss_mb"] = memory.peak_rss(name, batch, seq, "peer")
    results["train"].append(row)
    print(json.dumps(row), flush=True)
  for depth in filter(None, args.compile_depths.split(",")):
    config = shapes.load_config("andrea12m")
    row = {"n_layer": int(depth),
           "scan_s": ours.compile_seconds(config, int(depth), 256, True),
           "unrolled_s": ours.compile_seconds(config, int(depth), 256, False)}
    results["compile"].append(row)
    print(json.dumps(row), flush=True)
  if args.generate:
    row = bench_generate("tiny", 16, 96, args.reps)
    results["generate"].append(row)
    print(json.dumps(row), flush=True)
  results["load_at_end"] = loadavg()[0]
  print(results_lib.markdown(results))
  if why:
    print(f"NOTE: {why}", file=sys.stderr)
  elif args.out:
    results_lib.write_results(results, args.out)
  return 0


if __name__ == "__main__":
  sys.exit(main())
