"""Where the training step's time goes: each component of one block, ours against PyTorch.

Times forward + backward (gradients of every input and weight) of one component at a
time, andrea_jax's jitted function against the same computation in eager PyTorch (the
``benchmarks/peer.py``), interleaved in one process, medians of ``--reps``:

  python -m benchmarks.components --shape=andrea120m --reps=5
  python -m benchmarks.components --unit_axis          # the XLA:CPU effect behind model-on-rows
  python -m benchmarks.components --shape=andrea12m --batch=4 --ops   # XLA's own ops, ranked
  python -m benchmarks.components --separate --shape=tiny,andrea12m,andrea120m --rounds=8 \
      --reps=3 --out=docs/performance_components.json

``--separate`` is the profile docs/ publishes: each side's rows (the components, and the
step's two parts: the whole model's forward + backward and the AdamW update) in a fresh
process of its own (ours never imports PyTorch), the sides alternating round by round as
in ``benchmarks/separate.py``; per row the ratio paired by round with its 95 % t interval,
and the gap per training step (ours - peer, times the runs of the row in one step). The
default mode times both sides in one process, where PyTorch's spinning OpenMP workers and
the shared heap slow whichever side runs next (issue 31): use it to look, not to publish.

Components: LayerNorm; the attention core (causal softmax attention on (B, T, H, K):
``attention_impl`` against ``scaled_dot_product_attention``); the whole attention branch
(QKV projection, core, output projection); the MLP (GELU-tanh); the logits (tied head)
plus cross-entropy. ``--ops`` instead ranks the ops XLA compiled the whole model's
forward + backward into (the profiler's trace of two steps), each with its output shape
and the JAX operation it came from. Figures for docs/ only from an idle machine
(``uptime`` first).
"""

from __future__ import annotations

import argparse
import collections
import functools
import glob
import gzip
import json
import os
import re
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from andrea_jax import attention as kernels
from andrea_jax import model
from andrea_jax import step as step_lib
from benchmarks import peer as peer_lib
from benchmarks import shapes
from benchmarks import timing

ROWS = ("layer_norm", "attention_core", "attention_branch", "mlp", "logits_and_loss")


def ours(cfg: model.ModelConfig, batch: int, seq: int) -> dict:
  """name -> a function running one jitted forward + backward of that component."""
  params = model.init_params(cfg, jax.random.key(0))
  block = jax.tree.map(lambda a: a[0], params["blocks"])
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((batch, seq, cfg.d_model)), jnp.float32)
  qkv = [jnp.asarray(rng.standard_normal((batch, seq, cfg.n_head, cfg.head_dim)), jnp.float32)
         for _ in range(3)]
  targets = jnp.asarray(rng.integers(0, cfg.vocab_size, (batch, seq)), jnp.int32)
  impl = model.resolve_auto(cfg, verbose=False).attention_impl
  ce = lambda p, h: _logits_loss(p, h, targets, cfg)
  losses = {
      "layer_norm": (lambda p, h: model.layer_norm(h, p["scale"], p["bias"]).sum(), block["ln_1"], x),
      "attention_core": (lambda p, q: kernels.causal_attention(q, *p, impl, cfg.attention_block).sum(),
                         qkv[1:], qkv[0]),
      "attention_branch": (lambda p, h: model.attention(h, p, cfg).sum(), block["attn"], x),
      "mlp": (lambda p, h: model.mlp(h, p, cfg).sum(), block["mlp"], x),
      "logits_and_loss": (ce, {k: params[k] for k in ("wte", "ln_f")}, x),
  }
  fns = {}
  for name, (loss, p, h) in losses.items():
    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    fns[name] = lambda grad=grad, p=p, h=h: jax.block_until_ready(grad(p, h))
  return fns


def _logits_loss(params, x_BTD, targets_BT, cfg):
  """Final LayerNorm, tied head and mean cross-entropy: the model's tail."""
  logits = model.unembed(params, x_BTD, cfg)
  return optax.softmax_cross_entropy_with_integer_labels(logits, targets_BT).mean()


def peer(cfg: model.ModelConfig, batch: int, seq: int) -> dict:
  """The same components in eager PyTorch (float32, the CPU build's defaults)."""
  import torch  # pylint: disable=import-outside-toplevel
  from torch import nn  # pylint: disable=import-outside-toplevel
  F = torch.nn.functional
  D, H, K, V = cfg.d_model, cfg.n_head, cfg.head_dim, cfg.vocab_size
  torch.manual_seed(0)
  req = lambda *shape: torch.randn(*shape, requires_grad=True)
  x = req(batch, seq, D)
  q, k, v = (req(batch, H, seq, K) for _ in range(3))
  ln, ln_f = nn.LayerNorm(D), nn.LayerNorm(D)
  w_qkv, w_out = nn.Linear(D, 3 * D), nn.Linear(D, D)
  w_in, w_mlp_out = nn.Linear(D, cfg.mlp_dim), nn.Linear(cfg.mlp_dim, D)
  wte = nn.Parameter(torch.randn(V, D) * 0.02)
  targets = torch.randint(0, V, (batch, seq))

  def branch():
    a, b, c = w_qkv(x).split(D, dim=-1)
    heads = lambda t: t.view(batch, seq, H, K).transpose(1, 2)
    o = F.scaled_dot_product_attention(heads(a), heads(b), heads(c), is_causal=True)
    return w_out(o.transpose(1, 2).reshape(batch, seq, D)).sum()

  losses = {
      "layer_norm": lambda: ln(x).sum(),
      "attention_core": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(),
      "attention_branch": branch,
      "mlp": lambda: w_mlp_out(F.gelu(w_in(x), approximate="tanh")).sum(),
      "logits_and_loss": lambda: F.cross_entropy((ln_f(x) @ wte.T).view(-1, V), targets.view(-1)),
  }

  def run(loss):
    for t in (x, q, k, v):
      t.grad = None
    loss().backward()

  return {name: (lambda loss=loss: run(loss)) for name, loss in losses.items()}


PARTS = ("model forward + backward", "AdamW update of every parameter")


def ours_parts(cfg: model.ModelConfig, batch: int, seq: int, t) -> dict:
  """Our training step in two parts: the whole model's forward + backward, and the AdamW
  update of every parameter (name -> a function running it once)."""
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (batch, seq + 1)), jnp.int32)
  holder = {"params": model.init_params(cfg, jax.random.key(0))}
  value_and_grad = jax.jit(jax.value_and_grad(functools.partial(model.loss_fn, cfg=cfg)))
  # Not step.make_optimizer: the AdamW update alone at the peer's constant rate, no schedule.
  opt = optax.adamw(t.learning_rate, b1=t.b1, b2=t.b2, eps=t.eps, weight_decay=t.weight_decay,
                    mask=step_lib.decay_mask)
  holder["opt_state"] = opt.init(holder["params"])
  grads = jax.tree.map(jnp.ones_like, holder["params"])

  # The gradients are an argument, as in a training step. Closed over (JAX then passes
  # them as hidden constant arguments, 370 MB at andrea120m) the same update took 5x as
  # long, 331 against 62 ms in one process (why is not pinned down): a gap to the peer
  # that the training step does not have, and that earlier tables reported as ours.
  @functools.partial(jax.jit, donate_argnums=(0, 1))
  def update(params, opt_state, grads):
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  def ours_update():
    holder["params"], holder["opt_state"] = update(holder["params"], holder["opt_state"], grads)
    jax.block_until_ready(holder["params"])

  return {PARTS[0]: lambda: jax.block_until_ready(value_and_grad(holder["params"], tokens[:, :-1],
                                                                 tokens[:, 1:])),
          PARTS[1]: ours_update}


def peer_parts(cfg: model.ModelConfig, batch: int, seq: int, t) -> dict:
  """The peer's step in the same two parts (``benchmarks/peer.py``'s model, ``torch.optim.AdamW``)."""
  import torch  # pylint: disable=import-outside-toplevel
  ids = np.random.default_rng(0).integers(0, cfg.vocab_size, (batch, seq + 1))
  net = peer_lib.peer_model(cfg)
  torch_opt = torch.optim.AdamW(net.parameters(), lr=t.learning_rate, betas=(t.b1, t.b2),
                                eps=t.eps, weight_decay=t.weight_decay)
  torch_ids = torch.from_numpy(ids)

  def peer_forward_backward():
    net.zero_grad(set_to_none=True)
    net(input_ids=torch_ids[:, :-1], labels=torch_ids[:, :-1]).loss.backward()

  def peer_update():
    for p in net.parameters():
      if p.grad is None:
        p.grad = torch.ones_like(p)
    torch_opt.step()

  return {PARTS[0]: peer_forward_backward, PARTS[1]: peer_update}


def step_parts(cfg: model.ModelConfig, batch: int, seq: int, t) -> dict:
  """The training step split in two, each side: the whole model's forward + backward, and
  the AdamW update of all parameters (name -> {"ours": fn, "peer": fn})."""
  a, b = ours_parts(cfg, batch, seq, t), peer_parts(cfg, batch, seq, t)
  return {name: {"ours": a[name], "peer": b[name]} for name in PARTS}


# ----------------------------------------------------------------------------- each side in its own process

SIDES = ("ours", "peer")
# How many times one step runs each row: LayerNorm twice a block, the block's parts once
# per layer, the tail and the step's parts once.
PER_STEP = {"layer_norm": lambda cfg: 2 * cfg.n_layer, "attention_core": lambda cfg: cfg.n_layer,
            "attention_branch": lambda cfg: cfg.n_layer, "mlp": lambda cfg: cfg.n_layer}


def side_rows(side: str, cfg: model.ModelConfig, batch: int, seq: int, t) -> dict:
  """One side's rows (the components and the step's two parts): name -> a function. Ours
  never imports PyTorch, so its process has only XLA's threads and allocator."""
  if side == "ours":
    return {**ours(cfg, batch, seq), **ours_parts(cfg, batch, seq, t)}
  return {**peer(cfg, batch, seq), **peer_parts(cfg, batch, seq, t)}


def child(side: str, shape: str, batch: int, seq: int, reps: int, warmup: int = 1) -> dict:
  """One side's round, in a fresh process: every row ``warmup`` times untimed, then ``reps``
  times, the rows taking turns (``timing.interleave``); the median ms per row."""
  from benchmarks import separate  # pylint: disable=import-outside-toplevel
  if side == "peer":
    missing = peer_lib.peer_available()
    if missing:
      return {"skipped": missing}
  config = shapes.load_config(shape)
  cfg = shapes.model_config(config, seq)
  fns = side_rows(side, cfg, batch, seq, step_lib.TrainConfig(**config.train))
  times = timing.interleave(fns, reps, warmup, settle_s=0.05)
  return {"ms": {name: 1e3 * statistics.median(ts) for name, ts in times.items()},
          "peak_rss_mb": separate.peak_rss_mb(), "cpu": separate.cpu_model(),
          "torch_loaded": "torch" in sys.modules}


def child_argv(side: str, shape: str, batch: int, seq: int, reps: int) -> list[str]:
  return [sys.executable, "-m", "benchmarks.components", f"--child={side}", f"--shape={shape}",
          f"--batch={batch}", f"--seq={seq}", f"--reps={reps}"]


def separate_rounds(shape: str, batch: int, seq: int, rounds: int, reps: int, run=None,
                    sleep=time.sleep, settle_s: float = 2.0, progress=print) -> list[dict]:
  """``rounds`` rounds, each side's rows in a fresh process of its own, the sides' order
  alternating (``separate.order``); ``run(side)`` (tests pass a fake) returns a side's round."""
  from benchmarks import separate  # pylint: disable=import-outside-toplevel
  run = run or (lambda side: separate.result_of(child_argv(side, shape, batch, seq, reps)))
  out = []
  for i in range(rounds):
    rnd = {}
    for side in separate.order(i, SIDES):
      rnd[side] = run(side)
      sleep(settle_s)
    out.append(rnd)
    progress(f"{shape} round {i + 1}/{rounds}: " + ", ".join(
        f"{side} {sum(rnd[side]['ms'].values()):,.0f} ms over all rows" if "ms" in rnd[side]
        else f"{side} {rnd[side]}" for side in SIDES), flush=True)
  return out


def separate_summary(rounds: list[dict], cfg: model.ModelConfig, max_width: float = 0.10) -> list[dict]:
  """Per row: each side's median ms over rounds, the ratio peer / ours paired by round (above
  1: ours faster) as its median, range and geometric mean with the 95 % t interval
  (``separate.ratio_interval``), and the gap per training step, ``(ours - peer) x`` the times
  a step runs the row (``PER_STEP``): where the step's remaining time is."""
  from benchmarks import separate  # pylint: disable=import-outside-toplevel
  good = [r for r in rounds if all("ms" in r.get(side, {}) for side in SIDES)]
  rows = []
  for name in (good[0]["ours"]["ms"] if good else ()):
    o = [r["ours"]["ms"][name] for r in good]
    p = [r["peer"]["ms"][name] for r in good]
    paired = [b / a for a, b in zip(o, p)]
    ours_ms, peer_ms = statistics.median(o), statistics.median(p)
    times = PER_STEP.get(name, lambda cfg: 1)(cfg)
    rows.append({"row": name, "ours_ms": ours_ms, "peer_ms": peer_ms, "per_step": times,
                 "gap_ms_per_step": times * (ours_ms - peer_ms), "ratio": statistics.median(paired),
                 "ratio_range": (min(paired), max(paired)), **separate.ratio_interval(paired, max_width)})
  return rows


def separate_markdown(results: dict) -> str:
  """The separate-process profile as a table per shape, the machine and command beside it."""
  from benchmarks import separate  # pylint: disable=import-outside-toplevel
  lines = separate.header_lines(results)
  for s in results["shapes"]:
    lines += ["", f"{s['shape']} ({s['batch']} x {s['seq']}), {s['rounds']} rounds "
              f"({s['good_rounds']} with both sides), each side in its own process, medians of "
              f"{s['reps']} reps a round:", "",
              "| row | ours (ms) | peer (ms) | peer / ours, median [range] | geometric mean [95 % CI] "
              "| runs per step | ours - peer per step (ms) |", "|---" * 7 + "|"]
    for r in s["rows"]:
      ci = (f"{r['ratio_mean']:.2f} [{r['ratio_ci95'][0]:.2f}, {r['ratio_ci95'][1]:.2f}]"
            + ("" if r["ratio_decided"] else ", too wide") if "ratio_ci95" in r else "n/a")
      lines.append(f"| {r['row']} | {r['ours_ms']:,.1f} | {r['peer_ms']:,.1f} | {r['ratio']:.2f} "
                   f"[{r['ratio_range'][0]:.2f}, {r['ratio_range'][1]:.2f}] | {ci} | {r['per_step']} "
                   f"| {r['gap_ms_per_step']:+,.0f} |")
    errors = {side: r[side] for r in s["per_round"] for side in SIDES if "ms" not in r.get(side, {})}
    if errors:
      lines += ["", "Rounds without a side: " + "; ".join(f"{k}: {v}" for k, v in errors.items())]
  return "\n".join(lines) + "\n"


def run_separate(args, argv) -> int:
  """``--separate``: the profile with each side in its own process (what docs/ publishes)."""
  from benchmarks import results as results_lib  # pylint: disable=import-outside-toplevel
  from benchmarks import separate  # pylint: disable=import-outside-toplevel
  from andrea_jax import errors  # pylint: disable=import-outside-toplevel
  load = os.getloadavg()[0]
  why = results_lib.refusal(args.out, load, args.max_load, args.force)
  try:  # every shape read before the first round: a bad name fails at once, not an hour in
    configs = {name: shapes.load_config(name) for name in args.shape.split(",")}
  except errors.ConfigError as e:
    why = why or f"--shape: {e}"
  if why:
    print(f"error: {why}", file=sys.stderr)
    return 2
  out = separate.run_record("benchmarks.components", argv, load)
  for name, config in configs.items():
    batch, seq = shapes.SHAPE_DEFAULTS.get(name, (1, 1024))
    batch, seq = args.batch or batch, args.seq or seq
    cfg = shapes.model_config(config, seq)
    rounds = separate_rounds(name, batch, seq, args.rounds, args.reps)
    out["shapes"].append({"shape": name, "batch": batch, "seq": seq, "reps": args.reps,
                          "rounds": len(rounds), "per_round": rounds,
                          "good_rounds": sum(all("ms" in r.get(s, {}) for s in SIDES) for r in rounds),
                          "rows": separate_summary(rounds, cfg, args.max_spread)})
  return separate.finish_run(out, separate_markdown(out), args.out)


def unit_axis(batch: int, seq: int, d: int, reps: int) -> list[str]:
  """The same reductions on ``(1, T, D)`` and on ``(T, D)`` rows, jitted, interleaved.

  Why the model computes LayerNorm, its dense layers, the loss and the attention blocks
  on rows: with a batch of one, XLA:CPU (jax 0.10) hands reductions over arrays with a
  unit axis to YNNPACK fusions that ran several times slower than the same reductions
  without it.
  """
  rng = np.random.default_rng(0)
  x, y = (jnp.asarray(rng.standard_normal((batch * seq, d)), jnp.float32) for _ in range(2))
  scale, bias = jnp.ones((d,)), jnp.zeros((d,))
  ln_grad = jax.jit(jax.grad(lambda s, b, h: (model.layer_norm(h, s, b) * h).sum(), argnums=(0, 1, 2)))
  cases = {
      "sum(x * y, -1)": jax.jit(lambda a, c: (a * c).sum(-1)),
      "LayerNorm forward + backward": lambda a, c: ln_grad(scale, bias, a),
  }
  lines = ["| computation | on (1, T, D) (ms) | on (T, D) rows (ms) | unit axis / rows |",
           "|---|---|---|---|"]
  unit = lambda a: a.reshape(1, *a.shape)
  for name, fn in cases.items():
    run = {"unit": lambda fn=fn: jax.block_until_ready(fn(unit(x), unit(y))),
           "rows": lambda fn=fn: jax.block_until_ready(fn(x, y))}
    times = timing.interleave(run, reps, 2, settle_s=0.05)
    u, r = (1e3 * statistics.median(times[k]) for k in ("unit", "rows"))
    lines.append(f"| {name} | {u:.2f} | {r:.2f} | {u / r:.1f}x |")
  return lines


def hlo_sources(hlo_text: str) -> dict[str, str]:
  """XLA instruction name -> ``"<output shape>  <the JAX op it came from>"`` in optimized HLO."""
  out = {}
  for line in hlo_text.splitlines():
    m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\S+) ", line)
    if m:
      source = re.search(r'op_name="([^"]*)"', line)
      out[m.group(1)] = f"{m.group(2)}  {source.group(1) if source else ''}".rstrip()
  return out


def ranked_ops(cfg: model.ModelConfig, batch: int, seq: int, top: int = 25, steps: int = 2) -> list[str]:
  """The whole model's forward + backward as XLA runs it: its ops by time per step.

  Needs ``--xla_cpu_enable_xprof_traceme=true`` in ``XLA_FLAGS`` before JAX starts (``main``
  sets it), so the CPU runtime records each op in the profiler's trace.
  """
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (batch, seq + 1)), jnp.int32)
  params = model.init_params(cfg, jax.random.key(0))
  value_and_grad = jax.jit(jax.value_and_grad(functools.partial(model.loss_fn, cfg=cfg)))
  args = (params, tokens[:, :-1], tokens[:, 1:])
  sources = hlo_sources(value_and_grad.lower(*args).compile().as_text())
  jax.block_until_ready(value_and_grad(*args))
  with tempfile.TemporaryDirectory() as d:
    with jax.profiler.trace(d, create_perfetto_trace=True):
      for _ in range(steps):
        jax.block_until_ready(value_and_grad(*args))
    (path,) = glob.glob(os.path.join(d, "**", "perfetto_trace.json.gz"), recursive=True)
    with gzip.open(path) as f:
      events = json.load(f)
  events = events["traceEvents"] if isinstance(events, dict) else events
  total, count = collections.Counter(), collections.Counter()
  for e in events:
    if e.get("ph") == "X" and e.get("name") in sources:
      total[e["name"]] += e.get("dur", 0) / 1e3 / steps
      count[e["name"]] += 1 / steps
  lines = [f"all {len(total)} ops: {sum(total.values()):.0f} ms per step",
           "| op | ms per step | calls per step | output and source |", "|---|---|---|---|"]
  for name, ms in total.most_common(top):
    lines.append(f"| {name} | {ms:.1f} | {count[name]:.0f} | `{sources[name]}` |")
  return lines


def compare_table(what: str, rows: dict, reps: int) -> None:
  """Print ``| row | ours (ms) | peer (ms) | peer / ours |``: each row's two sides interleaved."""
  print(f"| {what} | andrea_jax (ms) | peer (ms) | peer / ours |\n|---|---|---|---|")
  for name, fns in rows.items():
    times = timing.interleave(fns, reps, 1)
    o, t = (1e3 * statistics.median(times[k]) for k in ("ours", "peer"))
    print(f"| {name} | {o:.1f} | {t:.1f} | {t / o:.2f} |", flush=True)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--shape", default="andrea120m")
  p.add_argument("--batch", type=int, default=None,
                 help="1; with --separate, each shape's own (benchmarks/shapes.py)")
  p.add_argument("--seq", type=int, default=None,
                 help="1024; with --separate, each shape's own")
  p.add_argument("--reps", type=int, default=5)
  p.add_argument("--unit_axis", action="store_true",
                 help="time reductions on (1, T, D) against (T, D) rows instead")
  p.add_argument("--step_parts", action="store_true",
                 help="time the whole model's forward + backward and the AdamW update instead")
  p.add_argument("--ops", action="store_true",
                 help="rank the ops of our whole model's forward + backward by time instead")
  p.add_argument("--top", type=int, default=25, help="ops listed by --ops")
  p.add_argument("--separate", action="store_true",
                 help="each side's rows in its own fresh process, alternating, --rounds rounds "
                      "(--shape may list several, comma-separated): the profile docs/ publishes")
  p.add_argument("--rounds", type=int, default=8, help="with --separate")
  p.add_argument("--max_spread", type=float, default=0.10,
                 help="with --separate: an interval wider than this share of its mean is 'too wide'")
  p.add_argument("--max_load", type=float, default=0.5)
  p.add_argument("--force", action="store_true", help="measure on a busy machine (never into docs/)")
  p.add_argument("--out", default="", help="with --separate: the JSON (and its _tables.md beside it)")
  p.add_argument("--child", choices=SIDES, default=None, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  for name in ("rounds", "reps"):
    if getattr(args, name) < 1:
      p.error(f"--{name}={getattr(args, name)}: expected at least 1")
  if args.child:
    print("RESULT " + json.dumps(child(args.child, args.shape, args.batch, args.seq, args.reps)),
          flush=True)
    return 0
  if args.separate:
    try:
      return run_separate(args, argv)
    except KeyboardInterrupt:  # the child processes, in our process group, got the same Ctrl-C
      print("interrupted: nothing written (--out is written only when every shape is done)",
            file=sys.stderr, flush=True)
      return 130
  args.batch, args.seq = args.batch or 1, args.seq or 1024
  if args.ops:  # read when the CPU backend starts, so before the first computation
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true").strip()
  config = shapes.load_config(args.shape)
  cfg = shapes.model_config(config, args.seq)
  print(f"{args.shape}: batch {args.batch} x {args.seq}, 1-minute load average "
        f"{os.getloadavg()[0]:.2f} before starting")
  if args.unit_axis:
    print("\n".join(unit_axis(args.batch, args.seq, cfg.d_model, max(args.reps, 20))))
    return 0
  if args.ops:
    print("\n".join(ranked_ops(model.resolve_auto(cfg, verbose=False), args.batch, args.seq, args.top)))
    return 0
  if args.step_parts:
    compare_table("part of the step", step_parts(cfg, args.batch, args.seq, config.train),
                  args.reps)
    return 0
  a, b = ours(cfg, args.batch, args.seq), peer(cfg, args.batch, args.seq)
  compare_table("component", {name: {"ours": a[name], "peer": b[name]} for name in ROWS},
                args.reps)
  return 0

if __name__ == "__main__":
  raise SystemExit(main())
