"""The training step's parts, each side's: where the step's time goes, ours against PyTorch.

What ``python -m benchmarks.step --measure=parts`` times (``--measure=ops`` and
``--measure=unit_axis`` are here too):

- the components of one block, forward + backward (gradients of every input and weight)
  of one at a time (``ROWS``): LayerNorm; the attention core (causal softmax attention on
  (B, T, H, K): ``attention_impl`` against ``scaled_dot_product_attention``); the whole
  attention branch (QKV projection, core, output projection); the MLP (GELU-tanh); the
  logits (tied head) plus cross-entropy;
- the step in its two parts (``PARTS``): the whole model's forward + backward, and the
  AdamW update of every parameter.

Ours is jitted, the peer eager PyTorch (``benchmarks/peer.py``'s model). In separate
processes (``side_round``: ours never imports PyTorch) the sides alternate round by round
and each row's ratio is paired by round, with the gap per training step (``summary``): the
profile docs/performance.md publishes. In one process (``in_process``) PyTorch's spinning
OpenMP workers and the shared heap slow whichever side runs next (issue 31): use it to look,
not to publish. ``ranked_ops`` ranks the ops XLA compiled the whole model's forward +
backward into (the profiler's trace of two steps), each with its output shape and the JAX
operation it came from; ``unit_axis`` is the XLA:CPU effect behind computing on rows.
"""

from __future__ import annotations

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

import jax
import jax.numpy as jnp
import numpy as np
import optax

from andrea_jax import attention as kernels
from andrea_jax import model
from andrea_jax import step as step_lib
from benchmarks import peer as peer_lib
from benchmarks import rounds as rounds_lib
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


def side_round(side: str, config, batch: int, seq: int, reps: int, warmup: int = 1) -> dict:
  """One side's round, in a fresh process: every row ``warmup`` times untimed, then ``reps``
  times, the rows taking turns (``timing.interleave``); the median ms per row."""
  if side == "peer":
    missing = peer_lib.peer_available()
    if missing:
      return {"skipped": missing}
  cfg = shapes.model_config(config, seq)
  fns = side_rows(side, cfg, batch, seq, step_lib.TrainConfig(**config.train))
  times = timing.interleave(fns, reps, warmup, settle_s=0.05)
  return {"ms": {name: 1e3 * statistics.median(ts) for name, ts in times.items()},
          "peak_rss_mb": timing.peak_rss_mb(), "cpu": timing.cpu_model(),
          "torch_loaded": "torch" in sys.modules}


def summary(rounds: list[dict], cfg: model.ModelConfig, max_width: float = 0.10) -> list[dict]:
  """Per row: each side's median ms over rounds, the ratio peer / ours paired by round (above
  1: ours faster) as its median, range and geometric mean with the 95 % t interval
  (``rounds.ratio_interval``), and the gap per training step, ``(ours - peer) x`` the times
  a step runs the row (``PER_STEP``): where the step's remaining time is."""
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
                 "ratio_range": (min(paired), max(paired)), **rounds_lib.ratio_interval(paired, max_width)})
  return rows


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

  Needs ``--xla_cpu_enable_xprof_traceme=true`` in ``XLA_FLAGS`` before JAX starts
  (``benchmarks.step --measure=ops`` sets it), so the CPU runtime records each op in the profiler's trace.
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


def in_process(cfg: model.ModelConfig, batch: int, seq: int, t, reps: int,
               settle_s: float = 0.5) -> list[dict]:
  """Every row (``ROWS`` and ``PARTS``) with both sides in this one process, the two taking
  turns (``timing.interleave``): per row the median ms of each and peer / ours."""
  a = {**ours(cfg, batch, seq), **ours_parts(cfg, batch, seq, t)}
  b = {**peer(cfg, batch, seq), **peer_parts(cfg, batch, seq, t)}
  out = []
  for name in ROWS + PARTS:
    times = timing.interleave({"ours": a[name], "peer": b[name]}, reps, 1, settle_s=settle_s)
    o, p = (1e3 * statistics.median(times[k]) for k in ("ours", "peer"))
    out.append({"row": name, "ours_ms": o, "peer_ms": p, "ratio": p / o})
  return out
