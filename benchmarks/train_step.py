"""Training-step speed of andrea_jax against the Hugging Face GPT-2 peer, side by side.

  python -m benchmarks.train_step                                  # tiny, andrea12m, andrea120m
  python -m benchmarks.train_step --shapes=andrea120m --batch=1 --seq=1024 --reps=5
  python -m benchmarks.train_step --compile_depths=6,12,24          # scan vs unrolled loop
  python -m benchmarks.train_step --generate                        # KV-cache generation

Three steps are timed in one process after warm-up, in two interleaved passes (ours
against model-only, then ours against the peer; each pass alternates the order), and the
medians compared: andrea_jax's ``step.train_step`` (clipping,
divergence guard, accumulation, donated state); the bare model step (``value_and_grad``
+ ``optax.adamw``, no bookkeeping), so the step's overhead shows; and the peer,
``transformers.GPT2LMHeadModel`` of the same shape (GELU-tanh, tied head, no dropout)
with ``torch.optim.AdamW`` and global-norm clipping, eager float32 on a CPU (its best
default there), ``torch.compile`` with SDPA in bf16 on GPUs.

The limit is measured in the same run, since machines differ from day to day: the step's
own dense float32 matmuls, forward and backward, in XLA and in PyTorch (``matmul_limit``)
give each side's FLOP/s ceiling; each step is reported as a fraction of the faster one
(``ours_pct_of_limit``, ``peer_pct_of_limit``; FLOPs counted by ``PCT_COUNTS``).

Honest figures: the machine's 1-minute load average is recorded before and after each
shape, with the process's CPU time against wall time; a run whose load before starting
exceeds ``--max_load`` refuses to write into ``docs/`` (``--force`` measures anyway and
never writes there). Install the peer with ``pip install -r requirements-bench.txt``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from andrea_jax import metrics
from andrea_jax import model
from andrea_jax import step as step_lib
from experiments import cli

SHAPE_DEFAULTS = {"tiny": (16, 128), "andrea12m": (4, 1024), "andrea120m": (1, 1024),
                  "andrea480m": (1, 1024)}


def load_config(name: str, accelerator: bool, settings: str = ""):
  """The named config at its training shape.

  ``settings`` is ``"model.attention_block=256,model.scan_unroll=2"``-style overrides.
  ``accelerator`` is unused (kept for callers): the configs' ``"auto"`` settings resolve
  from the platform (``model.resolve_auto``): float32 and the XLA flash kernel on CPUs,
  bf16 and cuDNN attention on NVIDIA GPUs.
  """
  del accelerator
  import importlib.util  # pylint: disable=import-outside-toplevel
  path = cli.resolve_config_path(name)
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  if settings:
    from experiments.configs import common  # pylint: disable=import-outside-toplevel
    common.apply_variants(config, settings)
  return config


# ----------------------------------------------------------------------------- ours


def model_config(config, seq: int) -> model.ModelConfig:
  cfg = model.ModelConfig(**{**config.model, "block_size": max(seq, config.model.block_size)})
  return model.resolve_auto(cfg, verbose=False)


def model_only_step(state: dict, batch_ABT, cfg, optimizer):
  """The bare model step: ``value_and_grad`` of the loss and an ``optax.adamw`` update."""
  loss, grads = jax.value_and_grad(model.loss_fn)(state["params"], batch_ABT[0, :, :-1],
                                                  batch_ABT[0, :, 1:], cfg)
  updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
  return {**state, "params": optax.apply_updates(state["params"], updates),
          "opt_state": opt_state}, {"loss": loss}


def ours_step(config, batch: int, seq: int, bare: bool = False):
  """A function running one jitted, donated step: ``step.train_step``, or the bare one."""
  cfg = model_config(config, seq)
  t = step_lib.TrainConfig(**config.train)
  schedule = step_lib.make_schedule(t)
  if bare:
    optimizer = optax.adamw(schedule, b1=t.b1, b2=t.b2, eps=t.eps, weight_decay=t.weight_decay,
                            mask=step_lib.decay_mask)
  else:
    optimizer = step_lib.make_optimizer(t)
  state = jax.jit(step_lib.init_state, static_argnums=(0, 1))(cfg, optimizer, jax.random.key(0))
  step = jax.jit(functools.partial(model_only_step if bare else step_lib.train_step, cfg=cfg,
                                   optimizer=optimizer), donate_argnums=0)
  tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, batch, seq + 1), np.int32)
  tokens = jnp.asarray(tokens)
  holder = {"state": state}

  def run():
    holder["state"], m = step(holder["state"], tokens)
    jax.block_until_ready(m["loss"])
    return float(m["loss"])

  return run, cfg


# ----------------------------------------------------------------------------- the peer


def peer_model(cfg: model.ModelConfig, device: str = "cpu"):
  """``transformers.GPT2LMHeadModel`` of ``cfg``'s shape (GELU-tanh, tied head, no dropout, SDPA)."""
  from transformers import GPT2Config, GPT2LMHeadModel  # pylint: disable=import-outside-toplevel
  hf = GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.block_size, n_embd=cfg.d_model,
                  n_layer=cfg.n_layer, n_head=cfg.n_head, n_inner=cfg.mlp_dim,
                  activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                  attn_pdrop=0.0, layer_norm_epsilon=cfg.ln_eps, tie_word_embeddings=True)
  hf._attn_implementation = "sdpa"  # PyTorch's fused scaled_dot_product_attention
  return GPT2LMHeadModel(hf).to(device).train()


def peer_step(cfg: model.ModelConfig, t, batch: int, seq: int, accelerator: bool,
              compile_backend: str | None = None, autocast: bool | None = None):
  """One peer training step as a function. On an accelerator: CUDA, ``torch.compile``
  and bf16 autocast; ``compile_backend`` / ``autocast`` ask for them explicitly (any device).
  """
  import torch  # pylint: disable=import-outside-toplevel
  device = "cuda" if accelerator else "cpu"
  net = peer_model(cfg, device)
  opt = torch.optim.AdamW(net.parameters(), lr=t.learning_rate, betas=(t.b1, t.b2), eps=t.eps,
                          weight_decay=t.weight_decay)
  if compile_backend or accelerator:
    fwd = torch.compile(net, backend=compile_backend or "inductor")
  else:
    fwd = net
  ids = torch.from_numpy(np.random.default_rng(0).integers(0, cfg.vocab_size, (batch, seq + 1)))
  ids = ids.to(device)
  amp = torch.autocast(device, dtype=torch.bfloat16,
                       enabled=accelerator if autocast is None else autocast)

  def run():
    with amp:
      loss = fwd(input_ids=ids[:, :-1], labels=ids[:, :-1]).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), t.grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if accelerator:
      torch.cuda.synchronize()
    return float(loss)

  return run


def peer_available() -> str | None:
  try:
    import torch  # pylint: disable=import-outside-toplevel,unused-import
    import transformers  # pylint: disable=import-outside-toplevel,unused-import
  except ImportError as e:
    return (f"the PyTorch peer is not installed ({e.name} missing): "
            f"pip install -r requirements-bench.txt")
  return None


# ----------------------------------------------------------------------------- timing


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


def bench_shape(name: str, batch: int, seq: int, reps: int, warmup: int, accelerator: bool,
                settings: str = "", loadavg=os.getloadavg, clock=time.perf_counter,
                sleep=time.sleep) -> dict:
  """One shape in two interleaved passes: our step against the model-only step (the step's
  overhead, peer not running), then our step against the peer (the ratio); then the
  matmul limit of this shape on this machine (``matmul_limit``)."""
  config = load_config(name, accelerator, settings)
  ours, cfg = ours_step(config, batch, seq)
  bare, _ = ours_step(config, batch, seq, bare=True)
  before = load_snapshot(loadavg)
  own = interleave({"andrea_jax": ours, "model_only": bare}, reps, warmup, clock=clock,
                   sleep=sleep)
  del bare  # its state (parameters and both moments) is not needed any more
  times = {"model_only": own["model_only"], "andrea_jax_beside_model_only": own["andrea_jax"]}
  missing = peer_available()
  if missing is None:
    peer = peer_step(cfg, config.train, batch, seq, accelerator)
    times.update(interleave({"andrea_jax": ours, "peer": peer}, reps, warmup, clock=clock,
                            sleep=sleep))
    del peer
  else:
    times["andrea_jax"] = own["andrea_jax"]
  del ours
  limit = matmul_limit(cfg, batch, seq, reps, warmup, torch_too=missing is None, clock=clock)
  row = {"shape": name, "batch": batch, "seq": seq, "params": model.count_params(cfg),
         "compute_dtype": cfg.compute_dtype, "attention_impl": cfg.attention_impl,
         **load_between(before, load_snapshot(loadavg)),
         **speed_fields(times, batch * seq), **limit,
         **limit_fields(times, batch * seq, limit, model.flops_per_token(cfg, seq),
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


def peak_rss(name: str, batch: int, seq: int, who: str) -> float:
  """Peak resident memory (MB) of a fresh process running three steps of one side (Linux)."""
  code = (f"import benchmarks.train_step as b; "
          f"c = b.load_config({name!r}, False); run, cfg = b.ours_step(c, {batch}, {seq}); "
          if who == "andrea_jax" else
          f"import benchmarks.train_step as b; from andrea_jax import model; "
          f"c = b.load_config({name!r}, False); "
          f"cfg = b.model_config(c, {seq}); "
          f"run = b.peer_step(cfg, c.train, {batch}, {seq}, False); ")
  # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the (large) parent across exec.
  code += ("[run() for _ in range(3)]; "
           "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  return int(out.stdout.strip().splitlines()[-1]) / 1024


# ----------------------------------------------------------------------------- the limit


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
                 torch_too: bool, clock=time.perf_counter) -> dict:
  """Each side's float32 FLOP/s over the step's matmuls (``matmul_forms``), run one by one.

  Each product is timed (median of ``reps``, XLA and PyTorch taking turns) and counted as
  often as a step runs it: the ceiling is all their FLOPs over all their seconds, what a
  step made of nothing but these matmuls would reach on this machine today.
  """
  forms = matmul_forms(cfg, batch, seq)
  seconds = {"xla": 0.0, "torch": 0.0} if torch_too else {"xla": 0.0}
  for form in forms:
    fns = {"xla": xla_matmul(form), "torch": torch_matmul(form)} if torch_too else \
        {"xla": xla_matmul(form)}
    times = interleave(fns, reps, warmup, settle_s=0.0, clock=clock)
    for side, ts in times.items():
      seconds[side] += form[-1] * statistics.median(ts)
  total = sum(form_flops(f) for f in forms)
  return {f"{side}_matmul_flops_per_s": total / s for side, s in seconds.items()}


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


PCT_COUNTS = ("flops_per_token: 6 N + 12 L H Q T (PaLM), attention over the whole T x T square, "
              "including the half above the diagonal a causal kernel skips")


# ----------------------------------------------------------------------------- compile time


def compile_seconds(config, n_layer: int, seq: int, scan: bool) -> float:
  """Seconds to compile the train step at ``n_layer`` layers, with lax.scan or unrolled."""
  cfg = model.resolve_auto(model.ModelConfig(**{**config.model, "n_layer": n_layer,
                                                "scan_unroll": 1 if scan else n_layer}), verbose=False)
  t = step_lib.TrainConfig(**config.train)
  optimizer = step_lib.make_optimizer(t)
  state = jax.eval_shape(lambda k: step_lib.init_state(cfg, optimizer, k), jax.random.key(0))
  batch = jax.ShapeDtypeStruct((1, 1, seq + 1), jnp.int32)
  step = jax.jit(functools.partial(step_lib.train_step, cfg=cfg, optimizer=optimizer))
  start = time.perf_counter()
  step.lower(state, batch).compile()
  return time.perf_counter() - start


# ----------------------------------------------------------------------------- generation


def bench_generate(name: str, prompt_len: int, new_tokens: int, reps: int) -> dict:
  from andrea_jax import sample  # pylint: disable=import-outside-toplevel
  config = load_config(name, False)
  cfg = model.resolve_auto(model.ModelConfig(**config.model), verbose=False)
  params = model.init_params(cfg, jax.random.key(0))
  prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, prompt_len), np.int32)
  ours = lambda: np.asarray(sample.generate(params, cfg, prompt, new_tokens, jax.random.key(0),
                                            temperature=0.0))
  fns = {"andrea_jax": ours}
  if peer_available() is None:
    import torch  # pylint: disable=import-outside-toplevel
    from transformers import GPT2Config, GPT2LMHeadModel  # pylint: disable=import-outside-toplevel
    net = GPT2LMHeadModel(GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.block_size,
                                     n_embd=cfg.d_model, n_layer=cfg.n_layer, n_head=cfg.n_head,
                                     activation_function="gelu_new")).eval()
    ids = torch.from_numpy(prompt).long()

    def peer():
      with torch.no_grad():
        return net.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                            do_sample=False, use_cache=True, pad_token_id=0)

    fns["peer"] = peer
  times = interleave(fns, reps, 1)
  row = {"shape": name, "prompt": prompt_len, "new_tokens": new_tokens}
  for who, ts in times.items():
    row[f"{who}_tokens_per_s"] = new_tokens / statistics.median(ts)
  if "peer" in times:
    row["ratio"] = row["andrea_jax_tokens_per_s"] / row["peer_tokens_per_s"]
  return row


# ----------------------------------------------------------------------------- report


def machine() -> str:
  d = jax.devices()[0]
  cpu = platform.processor() or platform.machine()
  return (f"{d.platform} ({d.device_kind}), {os.cpu_count()} cores ({cpu}), jax {jax.__version__}, "
          f"python {platform.python_version()}")


def _f(row: dict, key: str, fmt: str, suffix: str = "") -> str:
  return format(row[key], fmt) + suffix if key in row else "n/a"


def markdown(results: dict) -> str:
  """The results as Markdown tables, with the machine, the command and the load beside them."""
  lines = [f"Machine: {results['machine']}", "", f"Command: `{results['command']}`", "",
           f"Date: {results.get('date', 'n/a')}; 1-minute load average before starting: "
           f"{results.get('load_at_start', float('nan')):.2f}", ""]
  if results["train"]:
    lines += ["| shape | batch x seq | params | andrea_jax tokens/s | model-only tokens/s | "
              "step overhead | peer tokens/s | ratio | % of matmul limit ours / peer | "
              "matmul limit XLA / PyTorch (GFLOP/s) | load before / after | CPU s per s | "
              "peak RSS ours / peer (MB) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["train"]:
      gflops = {k: v / 1e9 for k, v in r.items() if k.endswith("_matmul_flops_per_s")}
      lines.append(
          f"| {r['shape']} | {r['batch']} x {r['seq']} | {r['params']:,} | "
          f"{_f(r, 'andrea_jax_tokens_per_s', ',.0f')} | {_f(r, 'model_only_tokens_per_s', ',.0f')} | "
          f"{_f(r, 'step_overhead', '+.1%')} | {_f(r, 'peer_tokens_per_s', ',.0f')} | "
          f"{_f(r, 'ratio', '.2f', 'x')} | "
          f"{_f(r, 'ours_pct_of_limit', '.0%')} / {_f(r, 'peer_pct_of_limit', '.0%')} | "
          f"{_f(gflops, 'xla_matmul_flops_per_s', '.0f')} / "
          f"{_f(gflops, 'torch_matmul_flops_per_s', '.0f')} | "
          f"{_f(r, 'load_before', '.2f')} / {_f(r, 'load_after', '.2f')} | "
          f"{_f(r, 'cpu_per_wall', '.2f')} | "
          f"{_f(r, 'andrea_jax_rss_mb', '.0f')} / {_f(r, 'peer_rss_mb', '.0f')} |")
    lines += ["", "% of matmul limit: each side's step FLOP/s (" + PCT_COUNTS + ") over the "
              "faster side's float32 FLOP/s on the step's own matmuls, measured in the same run."]
  if results.get("compile"):
    lines += ["", "| layers | compile, lax.scan (s) | compile, unrolled (s) |", "|---|---|---|"]
    lines += [f"| {r['n_layer']} | {r['scan_s']:.1f} | {r['unrolled_s']:.1f} |" for r in results["compile"]]
  if results.get("generate"):
    lines += ["", "| shape | prompt + new | andrea_jax tokens/s | peer tokens/s | ratio |", "|---|---|---|---|---|"]
    lines += [f"| {r['shape']} | {r['prompt']} + {r['new_tokens']} | {r['andrea_jax_tokens_per_s']:,.0f} | "
              f"{_f(r, 'peer_tokens_per_s', ',.0f')} | {_f(r, 'ratio', '.2f', 'x')} |"
              for r in results["generate"]]
  return "\n".join(lines) + "\n"


DOCS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def writes_docs(path: str) -> bool:
  """Whether ``path`` lies in the repository's ``docs/`` folder (where published figures live)."""
  return bool(path) and os.path.abspath(path).startswith(os.path.abspath(DOCS_DIR) + os.sep)


def refusal(out: str, load_at_start: float, max_load: float, force: bool) -> str | None:
  """Why results may not go to ``out``, or None: docs/ takes figures from idle machines only."""
  if not writes_docs(out):
    return None
  if force:
    return (f"--force never writes into docs/: {out} is left as it is (write the results "
            f"elsewhere with --out, e.g. --out=/tmp/bench.json)")
  if load_at_start > max_load:
    return (f"the machine was busy before starting (1-minute load average {load_at_start:.2f} > "
            f"--max_load={max_load}): figures for docs/ must come from an idle machine; stop "
            f"the other jobs and wait for the load to fall, or pass --force to measure anyway "
            f"without writing docs/")
  return None


def write_results(results: dict, out: str) -> None:
  """The JSON results, and their Markdown tables beside them (same name, ``.md``)."""
  with open(out, "w", encoding="utf-8") as f:
    json.dump(results, f, indent=2)
  with open(os.path.splitext(out)[0] + "_tables.md", "w", encoding="utf-8") as f:
    f.write(markdown(results))


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
  why = refusal(args.out, load_at_start, args.max_load, args.force)
  if why and not args.force:
    print(f"error: {why}", file=sys.stderr)
    return 2
  accelerator = jax.devices()[0].platform != "cpu"
  missing = peer_available()
  if missing:
    print(f"NOTE: {missing}; timing andrea_jax alone", file=sys.stderr)
  results = {"machine": machine(), "command": "python -m benchmarks.train_step " + " ".join(
      sys.argv[1:] if argv is None else argv), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             "load_at_start": load_at_start, "train": [], "compile": [], "generate": []}
  print(f"1-minute load average before starting: {load_at_start:.2f}", flush=True)
  for name in filter(None, args.shapes.split(",")):
    batch, seq = SHAPE_DEFAULTS.get(name, (4, 256))
    batch, seq = args.batch or batch, args.seq or seq
    row = bench_shape(name, batch, seq, args.reps, args.warmup, accelerator, args.set, loadavg,
                      clock, sleep)
    if args.memory and not accelerator:
      row["andrea_jax_rss_mb"] = peak_rss(name, batch, seq, "andrea_jax")
      if not missing:
        row["peer_rss_mb"] = peak_rss(name, batch, seq, "peer")
    results["train"].append(row)
    print(json.dumps(row), flush=True)
  for depth in filter(None, args.compile_depths.split(",")):
    config = load_config("andrea12m", accelerator)
    row = {"n_layer": int(depth), "scan_s": compile_seconds(config, int(depth), 256, True),
           "unrolled_s": compile_seconds(config, int(depth), 256, False)}
    results["compile"].append(row)
    print(json.dumps(row), flush=True)
  if args.generate:
    row = bench_generate("tiny", 16, 96, args.reps)
    results["generate"].append(row)
    print(json.dumps(row), flush=True)
  results["load_at_end"] = loadavg()[0]
  print(markdown(results))
  if why:
    print(f"NOTE: {why}", file=sys.stderr)
  elif args.out:
    write_results(results, args.out)
  return 0


if __name__ == "__main__":
  sys.exit(main())
