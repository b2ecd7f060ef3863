"""Reading the residual stream of the scanned model: capture, logit lens, contributions, ablation.

Every block reads the residual stream through a LayerNorm and adds its branch's output
back. This module runs the model's own pieces (``model.embed``, ``model.block_forward`` with hooks,
``branches.attention``, ``branches.mlp``, ``model.unembed``) under the model's own scan
over the stacked blocks (``model.scan_layers``) and returns, beside the logits, what the
scan saw:

    capture points  p = 0 .. 2L     0: after the embedding, 2l+1: after block l's attention
                                    sublayer, 2l+2: after its MLP sublayer  (suffix P)
    sublayers       s = 0 .. 2L-1   2l: block l's attention, 2l+1: its MLP  (suffix S)

By default only per-token reductions leave the scan (a few floats per token and point);
the full streams ``(P, B, T, D)``, the branch outputs ``(S, B, T, D)`` and the attention
probabilities ``(L, B, H, T, T)`` are opt-in. Each public function is pure and jit-able
with ``cfg`` static: one compile per shape.

Post-norm models (``post``, ``deepnorm``) have no final LayerNorm: their head reads the last
stream directly, and every stream after a sublayer is already a LayerNorm output. So the
logit lens decodes each point exactly as the head would read it there: through ``ln_f`` and
the unembedding where the placement has a final norm (nostalgebraist's logit lens), through
the unembedding alone where it has none (the embedding point, which no LayerNorm has
touched yet, is decoded raw). The scan walks the layer index beside the blocks, as the
model's does (Mix-LN and LayerNorm scaling read it).

The model's variants come with its pieces: ``qk_norm`` and muP's attention scale live in
``branches.qkv_project`` (the queries and keys every reader here uses, the probabilities of
``causal_probs`` included; so do rotary positions, rotated there at ``0 .. T-1``), the
readout multiplier in ``model.unembed`` (and in the unembedding rows of the attribution).
Under ``bias=False`` the norms have no bias: their share of the attribution is zero.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from andrea_jax import branches
from andrea_jax import errors
from andrea_jax import model
from andrea_jax import mup
from andrea_jax import norms
from andrea_jax.model_config import ModelConfig, Params

ABLATIONS = ("zero", "mean")


def point_names(cfg: ModelConfig) -> list[str]:
  """Names of the capture points: ``embed``, ``0.attn``, ``0.mlp``, ``1.attn``, ..."""
  return ["embed"] + sublayer_names(cfg)


def sublayer_names(cfg: ModelConfig) -> list[str]:
  return [f"{l}.{kind}" for l in range(cfg.n_layer) for kind in ("attn", "mlp")]


# ----------------------------------------------------------------------------- the capturing scan


def causal_probs(q_BTHK: jax.Array, k_BTHK: jax.Array) -> jax.Array:
  """Plain masked softmax attention probabilities ``(B, H, T, S)`` in float32."""
  T = q_BTHK.shape[1]
  s_BHTS = jnp.einsum("bthk,bshk->bhts", q_BTHK.astype(jnp.float32), k_BTHK.astype(jnp.float32))
  s_BHTS = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s_BHTS / math.sqrt(q_BTHK.shape[-1]),
                     -jnp.inf)  # every query sees key 0: rows stay finite
  return jax.nn.softmax(s_BHTS, axis=-1)


def _heads_attention(h_BTD, attn: Params, cfg: ModelConfig, head_fn, extra):
  """Attention through explicit per-head outputs: ``(out_BTD, probs_BHTS, aux)``."""
  q, k, v = branches.qkv_project(h_BTD, attn, cfg)
  p_BHTS = causal_probs(q, k)
  o_BTHK = jnp.einsum("bhts,bshk->bthk", p_BHTS.astype(v.dtype), v)
  aux = None
  if head_fn is not None:
    o_BTHK, aux = head_fn(o_BTHK, extra)
  return branches.out_project(o_BTHK, attn, cfg), p_BHTS, aux


def _pair(a, b):
  return jax.tree.map(lambda u, v: jnp.stack([u, v]), a, b)


def _flatten_pairs(tree):
  return jax.tree.map(lambda a: a.reshape(-1, *a.shape[2:]), tree)


def scan_blocks(params: Params, tokens_BT, cfg: ModelConfig, *,
                point_fn: Callable = lambda x: (), sublayer_fn: Callable = lambda *a: (),
                head_fn: Callable | None = None, probs: bool = False, layer_xs: Any = None):
  """The model's forward pass with hooks; returns ``(final_BTD, points, sublayers, layers)``.

  ``point_fn(x_BTD)`` runs at each capture point (stacked to a leading P axis);
  ``sublayer_fn(x_read, f_out, x_new, extra)`` at each sublayer (stacked to S), where
  ``extra`` is this sublayer's slice of ``layer_xs["sub"]`` (shaped ``(L, 2, ...)``).
  With ``head_fn(o_BTHK, extra) -> (o_BTHK, aux)`` the attention is computed through
  explicit per-head outputs (a plain masked softmax; ``layers["aux"]`` stacks the aux);
  otherwise it is ``branches.attention`` itself, so the logits are the model's bit for bit.
  ``probs=True`` adds ``layers["probs"]`` ``(L, B, H, T, T)``.
  """
  model.check_tokens(tokens_BT, cfg)
  x0 = model.embed(params, tokens_BT, cfg)
  layer_xs = {} if layer_xs is None else layer_xs

  def step(x, block, index, extra):
    layer = {}
    if head_fn is not None:
      def attn_fn(h, attn):
        out, layer["probs"], layer["aux"] = _heads_attention(h, attn, cfg, head_fn,
                                                             extra.get("head"))
        return out
    elif probs:
      def attn_fn(h, attn):  # beside the model's own attention, whose output stays the one used
        layer["probs"] = causal_probs(*branches.qkv_project(h, attn, cfg)[:2])
        return branches.attention(h, attn, cfg)
    else:
      attn_fn = None  # the model's own attention
    seen = {}
    x2 = model.block_forward(block, x, cfg, attn_fn=attn_fn, layer=index,
                             on_sublayer=lambda i, *read_f_new: seen.update({i: read_f_new}))
    (_, fa, x1), (_, fm, _) = seen[0], seen[1]
    sub = extra.get("sub")
    pick = lambda i: None if sub is None else jax.tree.map(lambda a: a[i], sub)
    out = {"points": _pair(point_fn(x1), point_fn(x2)),
           "sub": _pair(sublayer_fn(x, fa, x1, pick(0)), sublayer_fn(x1, fm, x2, pick(1)))}
    if not probs:
      layer.pop("probs", None)
    out["layer"] = {k: v for k, v in layer.items() if v is not None}
    return x2, out

  final, ys = model.scan_layers(step, x0, params["blocks"], cfg, layer_xs)
  points = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), point_fn(x0),
                        _flatten_pairs(ys["points"]))
  return final, points, _flatten_pairs(ys["sub"]), ys["layer"]


# ----------------------------------------------------------------------------- capture


def _f32(x):
  return x.astype(jnp.float32)


def _norm(x_BTD):
  return jnp.linalg.norm(_f32(x_BTD), axis=-1)


def _cosine(a_BTD, b_BTD):
  dot = jnp.sum(_f32(a_BTD) * _f32(b_BTD), axis=-1)
  return dot / jnp.maximum(_norm(a_BTD) * _norm(b_BTD), 1e-12)


def capture(params: Params, tokens_BT, cfg: ModelConfig, *, streams: bool = False,
            outputs: bool = False, attention: bool = False) -> dict:
  """Logits plus what the scan saw at every layer; the heavy parts are opt-in.

  Always (per token, reduced inside the scan): ``logits_BTV``, ``final_BTD`` (the stream
  the head reads), ``norm_PBT`` (the stream's L2 norm at each capture point), and per
  sublayer ``rel_norm_SBT`` = |f| / |x| and ``cos_SBT`` = cos(f, x), where x is the stream
  the sublayer reads and f what its branch returns (added to x; post-norm then
  normalises the sum). Opt-in: ``streams_PBTD``, ``outputs_SBTD`` (the branch outputs f)
  and ``probs_LBHTS`` (attention probabilities from a plain masked softmax of the model's
  own queries and keys, computed beside ``branches.attention``, whose output is the one used).
  """
  def point_fn(x):
    return {"norm": _norm(x), **({"stream": x} if streams else {})}

  def sublayer_fn(x, f, x_new, extra):
    del x_new, extra
    out = {"rel_norm": _norm(f) / jnp.maximum(_norm(x), 1e-12), "cos": _cosine(f, x)}
    return {**out, **({"output": f} if outputs else {})}

  final, points, subs, layer = scan_blocks(params, tokens_BT, cfg, point_fn=point_fn,
                                           sublayer_fn=sublayer_fn, probs=attention)
  result = {"logits_BTV": model.unembed(params, final, cfg), "final_BTD": final,
            "norm_PBT": points["norm"], "rel_norm_SBT": subs["rel_norm"], "cos_SBT": subs["cos"]}
  if streams:
    result["streams_PBTD"] = points["stream"]
  if outputs:
    result["outputs_SBTD"] = subs["output"]
  if attention:
    result["probs_LBHTS"] = layer["probs"]
  return result


# ----------------------------------------------------------------------------- logit lens


def _nll(logits_BTV, targets_BT):
  return optax.softmax_cross_entropy_with_integer_labels(_f32(logits_BTV), targets_BT)


def logit_lens(params: Params, tokens_BT, targets_BT, cfg: ModelConfig) -> dict:
  """Decode the stream at every capture point as the head would (see the module docstring).

  Per point and token: ``nll_PBT`` (cross-entropy of ``targets``), ``kl_PBT`` =
  KL(final || lens) in nats, ``top_PBT`` (the lens's top token), ``top_prob_PBT`` (its
  probability) and ``agree_PBT`` (top token equals the model's final top token). Two
  passes in one compile: the first gives the final distribution the second compares to.
  Also ``logits_BTV``, the model's own logits.
  """
  final, _, _, _ = scan_blocks(params, tokens_BT, cfg)
  logits_BTV = model.unembed(params, final, cfg)
  logp_final = jax.nn.log_softmax(logits_BTV, axis=-1)
  top_final = jnp.argmax(logits_BTV, axis=-1)

  def point_fn(x):
    logp = jax.nn.log_softmax(_f32(model.unembed(params, x, cfg)), axis=-1)
    top = jnp.argmax(logp, axis=-1)
    return {"nll": -jnp.take_along_axis(logp, targets_BT[..., None], -1)[..., 0],
            # where= skips padded vocabulary ids (logit -inf in both: 0 * nan otherwise)
            "kl": jnp.sum(jnp.exp(logp_final) * (logp_final - logp), axis=-1,
                          where=logp_final > -jnp.inf),
            "top": top, "top_prob": jnp.exp(jnp.max(logp, axis=-1)), "agree": top == top_final}

  _, points, _, _ = scan_blocks(params, tokens_BT, cfg, point_fn=point_fn)
  return {**{f"{k}_PBT": v for k, v in points.items()}, "logits_BTV": logits_BTV}


# ----------------------------------------------------------------------------- direct logit attribution


def _unembedding_rows(params: Params, targets_BT, cfg: ModelConfig):
  """The unembedding vector of each target token, times the readout multiplier: ``(B, T, D)``."""
  w_VD = params["wte"] if cfg.tie_embeddings else params["lm_head"].T
  return _f32(jnp.take(w_VD, targets_BT, axis=0)) * mup.readout_multiplier(cfg)


def _inv_std(y_BTD, eps):
  y = _f32(y_BTD)
  return jax.lax.rsqrt(jnp.var(y, axis=-1) + eps)


def _through_ln(d_BTD, scale_D, inv_std_BT):
  """The transpose of a LayerNorm linearised at its input: ``center(scale * d) / std``."""
  g = d_BTD * _f32(scale_D)
  return (g - jnp.mean(g, axis=-1, keepdims=True)) * inv_std_BT[..., None]


def _ln_bias(ln: Params) -> jax.Array:
  """A LayerNorm's bias, zeros where it has none (``ModelConfig.bias=False``)."""
  return ln["bias"] if "bias" in ln else jnp.zeros_like(ln["scale"])


def _dot(a_BTD, b_BTD):
  return jnp.sum(_f32(a_BTD) * _f32(b_BTD), axis=-1)


def attribution_refusal(cfg: ModelConfig) -> str | None:
  """Why ``direct_logit_attribution`` cannot read this model (one line), or None if it can.

  Its linearisations are the placement's ``lens`` (``norms.PLACEMENTS``): pre-norm's "final"
  (one frozen ``ln_f``; LayerNorm scaling changes only what the branches read, so it is
  pre-norm's too) and post-norm's "blocks" (every later block's norm), both with a norm type
  whose ``lens`` is set (LayerNorm's); peri, reordered, deepnorm (alpha on the stream) and mix
  have none here.
  """
  if norms.placement(cfg.norm).lens is None:
    some = " and ".join(name for name, p in norms.PLACEMENTS.items() if p.lens)
    return f"model.norm={cfg.norm!r} has no linearisation here ({some} do)"
  if not norms.normaliser(cfg.norm_type).lens:
    return (f"model.norm_type={cfg.norm_type!r}: the frozen-std linearisation is LayerNorm's; "
            f"use norm_type=layernorm")
  if not norms.normaliser(cfg.final_norm).lens:
    return (f"model.final_norm_type={cfg.final_norm_type!r}: the frozen-std linearisation is "
            f"LayerNorm's; use final_norm_type='' (norm_type's)")
  return None


def direct_logit_attribution(params: Params, tokens_BT, targets_BT, cfg: ModelConfig) -> dict:
  """Each component's direct contribution to the logit of the target token.

  A LayerNorm is ``scale * center(y) / std(y) + bias``: linear in y once ``std(y)`` is
  frozen at its actual value (TransformerLens's "linearised at the final stream"). With
  every LayerNorm on the path to the head frozen that way, the target's logit splits
  exactly into ``embed_BT`` (token + position embedding; rope: the token embedding alone), ``sublayers_SBT`` (each branch's
  output, its ``b_out`` included) and ``bias_BT`` (the LayerNorm biases that reach the head:
  ``ln_f`` pre-norm, every block's two post-norm): they sum to ``logit_BT`` (the model's
  own logit, also returned) up to float rounding. ``heads_LHBT`` splits each attention
  sublayer's share by head (plus its ``b_out``'s share, the remainder). The attribution is
  the linearisation: it ignores how a component would change ``std``. Pre-norm: one frozen
  LayerNorm (ln_f), one direction for all components. Post-norm: a component passes every
  later block's LayerNorms, so its direction is pulled back through each of them (a
  reverse scan that holds ``(S, B, T, D)`` directions).
  """
  refusal = attribution_refusal(cfg)
  if refusal:
    raise errors.ConfigError(f"direct_logit_attribution: {refusal}")
  u_BTD = _unembedding_rows(params, targets_BT, cfg)
  w_out = params["blocks"]["attn"]["w_out"]
  if norms.placement(cfg.norm).lens == "final":
    final, _, _, _ = scan_blocks(params, tokens_BT, cfg)
    ln_f = params["ln_f"]
    d_BTD = _through_ln(u_BTD, ln_f["scale"], _inv_std(final, cfg.ln_eps))
    bias_BT = _dot(jnp.broadcast_to(_f32(_ln_bias(ln_f)), u_BTD.shape), u_BTD)
    embed_dir, layer_xs = d_BTD, {"head": {"w_out": w_out}}
    sublayer_fn = lambda x, f, x_new, extra: _dot(f, d_BTD)
    head_fn = lambda o, extra: (o, _head_shares(o, extra["w_out"], d_BTD))
  else:
    embed_dir, dirs_SBTD, bias_BT = _post_norm_directions(params, tokens_BT, u_BTD, cfg)
    dirs = dirs_SBTD.reshape(cfg.n_layer, 2, *dirs_SBTD.shape[1:])
    layer_xs = {"sub": dirs, "head": {"w_out": w_out, "dir": dirs[:, 0]}}
    sublayer_fn = lambda x, f, x_new, d: _dot(f, d)
    head_fn = lambda o, extra: (o, _head_shares(o, extra["w_out"], extra["dir"]))
  final, embed, subs, layer = scan_blocks(params, tokens_BT, cfg, point_fn=lambda x: _dot(x, embed_dir),
                                          sublayer_fn=sublayer_fn, head_fn=head_fn,
                                          layer_xs=layer_xs)
  logits_BTV = model.unembed(params, final, cfg)
  logit_BT = jnp.take_along_axis(logits_BTV, targets_BT[..., None], -1)[..., 0]
  return {"embed_BT": embed[0], "sublayers_SBT": subs, "bias_BT": bias_BT, "logit_BT": logit_BT,
          "heads_LHBT": jnp.moveaxis(layer["aux"], -1, 1)}


def _head_shares(o_BTHK, w_out, d_BTD):
  """Each head's output, through its rows of the output projection, along ``d``: ``(B, T, H)``."""
  H, K = o_BTHK.shape[-2:]
  wd_BTHK = jnp.einsum("hkd,btd->bthk", _f32(w_out).reshape(H, K, -1), d_BTD)
  return jnp.sum(_f32(o_BTHK) * wd_BTHK, axis=-1)


def _post_norm_directions(params, tokens_BT, u_BTD, cfg):
  """Post-norm: ``(embedding direction, per-sublayer directions (S, B, T, D), LN bias share)``."""
  # 1/std of every post-norm LayerNorm's input x + f.
  fn = lambda x, f, x_new, extra: _inv_std(_f32(x) + _f32(f), cfg.ln_eps)
  _, _, inv_std_SBT, _ = scan_blocks(params, tokens_BT, cfg, sublayer_fn=fn)
  blocks = params["blocks"]
  interleave = lambda a, b: jnp.stack([a, b], axis=1).reshape(-1, *a.shape[1:])
  scale_SD = interleave(blocks["ln_1"]["scale"], blocks["ln_2"]["scale"])
  bias_SD = interleave(_ln_bias(blocks["ln_1"]), _ln_bias(blocks["ln_2"]))

  def back(d_BTD, xs):  # from the head backwards: d is the direction the stream after s feeds
    scale, bias, inv_std = xs
    pulled = _through_ln(d_BTD, scale, inv_std)
    return pulled, (pulled, _dot(jnp.broadcast_to(_f32(bias), d_BTD.shape), d_BTD))

  d0_BTD, (dirs_SBTD, bias_SBT) = jax.lax.scan(back, u_BTD, (scale_SD, bias_SD, inv_std_SBT),
                                               reverse=True)
  return d0_BTD, dirs_SBTD, jnp.sum(bias_SBT, axis=0)


# ----------------------------------------------------------------------------- head ablation


def head_means(params: Params, tokens_BT, cfg: ModelConfig) -> jax.Array:
  """Each head's output averaged over the batch and positions: ``(L, H, K)`` (mean ablation)."""
  head_fn = lambda o, extra: (o, jnp.mean(_f32(o), axis=(0, 1)))
  _, _, _, layer = scan_blocks(params, tokens_BT, cfg, head_fn=head_fn)
  return layer["aux"]


def ablated_loss(params: Params, tokens_BT, targets_BT, cfg: ModelConfig, keep_LH,
                 replacement_LHK=None) -> jax.Array:
  """Mean loss with head (l, h)'s output scaled by ``keep[l, h]`` (1 keeps, 0 ablates).

  An ablated head's output is replaced by ``replacement[l, h]`` (zeros: zero ablation;
  ``head_means``: mean ablation) before the output projection; ``b_out`` stays.
  """
  L, H, K = cfg.n_layer, cfg.n_head, cfg.head_dim
  if replacement_LHK is None:
    replacement_LHK = jnp.zeros((L, H, K), jnp.float32)

  def head_fn(o_BTHK, extra):
    keep = extra["keep"][:, None].astype(o_BTHK.dtype)
    return keep * o_BTHK + (1 - keep) * extra["repl"].astype(o_BTHK.dtype), None

  xs = {"head": {"keep": jnp.asarray(keep_LH, jnp.float32), "repl": replacement_LHK}}
  final, _, _, _ = scan_blocks(params, tokens_BT, cfg, head_fn=head_fn, layer_xs=xs)
  return jnp.mean(_nll(model.unembed(params, final, cfg), targets_BT))


def head_ablation(params: Params, tokens_BT, targets_BT, cfg: ModelConfig, mode: str = "zero",
                  batch_size: int | None = None) -> dict:
  """The loss with each of the L x H heads ablated alone, all in one compiled call.

  ``loss_LH[l, h]`` is the loss with head (l, h) ablated (``mode`` "zero" or "mean"),
  ``baseline`` the loss with none. The L*H masks go through ``lax.map`` with
  ``batch_size`` of them vmapped at a time (None: all at once, the fastest and the most
  memory: batch_size copies of the activations).
  """
  if mode not in ABLATIONS:
    raise errors.ConfigError(f"mode={mode!r}: expected one of {ABLATIONS}")
  L, H = cfg.n_layer, cfg.n_head
  repl = head_means(params, tokens_BT, cfg) if mode == "mean" else None
  keep_NLH = 1.0 - jnp.eye(L * H, dtype=jnp.float32).reshape(L * H, L, H)
  loss = lambda keep: ablated_loss(params, tokens_BT, targets_BT, cfg, keep, repl)
  losses = jax.lax.map(loss, keep_NLH, batch_size=batch_size or L * H)
  return {"loss_LH": losses.reshape(L, H), "baseline": loss(jnp.ones((L, H), jnp.float32))}
