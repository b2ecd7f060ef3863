"""The ANDREA transformer as pure functions over an explicit parameter pytree.

Read top to bottom: one block, the scan over the stacked blocks that every reader of the
model shares (``scan_layers``, with ``remat``), the whole model (embeddings, the scan, the
head), the loss, and the exact parameter count.

    x = wte[ids] + wpe[positions]                       # (B, T, D); rope: wte[ids] alone
    for each block (lax.scan over params stacked on a leading n_layer axis):
        x = x + Attention(LN(x))                        # pre-norm (default)
        x = x + MLP(LN(x))
    x = LN(x)                                           # final norm (pre-norm only)
    logits = x @ wte.T                                  # tied unembedding, (B, T, V)

The parts have their own modules: the config (``ModelConfig``, ``resolve_auto``,
``compute_dtype``) ``model_config.py``; the initialisation (``init_params``,
``block_init_stds``) ``init.py``; the norms and their placements (``layer_norm``, the tables
``NORMALISERS`` and ``PLACEMENTS``, ``residual_sublayer``, ``layer_site``) ``norms.py``; the two branches
(``attention`` with ``qkv_project``, ``rope`` and ``out_project``; ``mlp`` and its
activations) ``branches.py``, over the attention kernels of ``attention.py``. The names the
notebooks read as ``model.X`` are imported here too.

The norm placement (``model.norm``) is an entry of ``norms.PLACEMENTS``: pre, post, peri,
reordered, deepnorm and mix, with LayerNorm scaling (``norm_depth_scaling``) on pre; what
differs by layer (Mix-LN, LayerNorm scaling) reads the layer index the scan walks beside the
parameters (``norms.layer_site``). docs/model.md has the table.

Variants beside the norm placement: ``position="rope"`` (rotary positions, Su et al. 2021:
no ``wpe``; each head's queries and keys rotated by their position, ``branches.rope``),
``activation="relu2"`` (ReLU squared, So et al. 2021), ``bias=False`` (no bias in any linear
layer or norm, nanoGPT's flag), ``qk_norm`` (a LayerNorm on each head's queries and
keys before their dot product), ``parametrization="mup"`` (the width rules of ``mup.py``),
the base model's readout, attention and embedding multipliers (``mup.py``; 1 by default)
and, in the loss, PaLM's z-loss (``loss_terms``).

Dropout (``dropout``, nanoGPT's: off by default) acts only where a caller passes a
``dropout_key`` (the train step does; evaluation, sampling and the probes do not): on the
embeddings, on the attention probabilities and on each block's attention and MLP outputs
before they are added back. The key is split once per layer and scanned with the stacked
blocks. At ``dropout=0``, or without a key, no random number is drawn.

Names carry their layout as a suffix (nanodo style): B batch, T time, D d_model,
H heads, K head size, F MLP width, V vocabulary, L layers.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import attention as kernels
from andrea_jax import cross_entropy
from andrea_jax import errors
from andrea_jax import mup
from andrea_jax.branches import attention, mlp
from andrea_jax.model_config import ModelConfig, Params, compute_dtype, resolve_auto
from andrea_jax.norms import layer_site, norm_size, normalise, normaliser, placement, residual_sublayer
from andrea_jax.precision import at_least_f32
# Re-exported: the names the notebooks and the README's snippets read as model.X.
from andrea_jax.branches import gelu as gelu, gelu_tanh as gelu_tanh, relu as relu
from andrea_jax.init import block_init_stds as block_init_stds, init_params as init_params
from andrea_jax.norms import NORMS as NORMS, PLACEMENTS as PLACEMENTS, layer_norm as layer_norm


# ----------------------------------------------------------------------------- one block


def block_forward(block: Params, x_BTD: jax.Array, cfg: ModelConfig, stats: bool = False,
                  dropout_key: jax.Array | None = None,
                  attn_fn: Callable[[jax.Array, Params], jax.Array] | None = None,
                  on_sublayer: Callable[[int, jax.Array, jax.Array, jax.Array], None] | None = None,
                  sublayer: Callable | None = None, layer: Any = None):
  """One transformer block: attention, then MLP, each wrapped in ``residual_sublayer``.

  The only block: the KV-cache sampler, the lens and the diagnostics call it with hooks.
  ``attn_fn(h_BTD, block["attn"])`` replaces the attention (the sampler's cached attention,
  the lens's per-head one); ``on_sublayer(i, x_read, f, x_new)`` sees sublayer ``i`` (0
  attention, 1 MLP): the stream it read, what its branch wrote and the stream after it;
  ``sublayer(x, f, n, n_out, site)`` replaces the placement's residual pattern
  (``residual_sublayer``). ``layer``: this block's 0-based index (the layer scans pass it;
  ``mix`` and ``norm_depth_scaling`` need it, ``layer_site``). ``stats=True`` returns ``(x_BTD, {"attn_logit_max": scalar})`` (see ``attention``; not
  with ``attn_fn``). With a ``dropout_key`` (and ``cfg.dropout > 0``): attention-probability
  dropout, and dropout on the attention and MLP outputs before they are added back
  (nanoGPT's).
  """
  seen = {}
  k_probs = k_attn = k_mlp = None
  if dropout_key is not None and cfg.dropout:
    k_probs, k_attn, k_mlp = jax.random.split(dropout_key, 3)
  if stats and attn_fn is not None:
    raise ValueError("block_forward: stats=True reads the model's own attention; pass no attn_fn")

  def attn_branch(h):
    if attn_fn is not None:
      out = attn_fn(h, block["attn"])
    elif not stats:
      out = attention(h, block["attn"], cfg, dropout_key=k_probs)
    else:
      out, seen["attn_logit_max"] = attention(h, block["attn"], cfg, logit_max=True,
                                              dropout_key=k_probs)
    return kernels.dropout(out, cfg.dropout, k_attn)

  m = mup.branch_multiplier(cfg)
  site = layer_site(cfg, layer)
  mlp_branch = lambda h: kernels.dropout(mlp(h, block["mlp"], cfg), cfg.dropout, k_mlp)
  for i, (branch, ln) in enumerate(((attn_branch, "ln_1"), (mlp_branch, "ln_2"))):
    wrote = {}
    x_new = residual_sublayer(x_BTD, branch, block[ln], cfg.norm, cfg.ln_eps, m,
                              tap=None if on_sublayer is None else (lambda f: wrote.update(f=f)),
                              sublayer=sublayer, norm_type=cfg.norm_type,
                              out_params=block.get(ln + "_out"), site=site)
    if on_sublayer is not None:
      on_sublayer(i, x_BTD, wrote["f"], x_new)
    x_BTD = x_new
  return (x_BTD, seen) if stats else x_BTD


# ----------------------------------------------------------------------------- the scan over layers


def remat(fn: Callable, policy: str, checkpoint: Callable = jax.checkpoint) -> Callable:
  """``fn`` rematerialised under ``policy`` (``ModelConfig.remat_policy``, resolved): "none"
  keeps every activation, "full" recomputes the whole block in the backward pass, and any
  other name is a ``jax.checkpoint_policies`` entry (which saved values it keeps).

  ``checkpoint``: ``jax.checkpoint`` (the pure-function layer scan) or a transform with its
  keywords (Flax's ``nn.remat``, for the Flax twin's block). ``prevent_cse=False``: under
  ``lax.scan`` the barriers it adds against common-subexpression elimination are not needed
  (``jax.checkpoint``'s docs).
  """
  if policy == "none":
    return fn
  named = None if policy == "full" else getattr(jax.checkpoint_policies, policy)
  return checkpoint(fn, prevent_cse=False, policy=named)


def scan_layers(step: Callable, x_BTD: Any, blocks: Params, cfg: ModelConfig, xs: Any = None,
                remat_policy: str = "none"):
  """The scan over the stacked blocks: the one loop over layers that the model, the sampler,
  the lens and the diagnostics share.

  ``step(x, block, layer, xs_l) -> (x, y)`` runs block ``layer`` (its 0-based index, a traced
  int, walked beside the parameters: Mix-LN and LayerNorm scaling read it) on the carry ``x``
  (the residual stream, or anything with it); ``xs_l`` is layer ``layer``'s slice of ``xs``
  (a pytree with a leading ``n_layer`` axis, or None). Returns ``(x, ys)``, the ``y`` stacked
  on a leading ``n_layer`` axis. ``cfg.scan_unroll`` layers per iteration; ``remat_policy``
  as ``remat`` says.
  """
  body = lambda x, layer_xs: step(x, *layer_xs)
  return jax.lax.scan(remat(body, remat_policy), x_BTD, (blocks, jnp.arange(cfg.n_layer), xs),
                      unroll=cfg.scan_unroll)


# ----------------------------------------------------------------------------- the model


def check_tokens(tokens: Any, cfg: ModelConfig) -> None:
  """Reject bad inputs before XLA (which silently clamps an out-of-range gather index).

  The shape check is static and always runs; the id range check runs when the values
  are concrete (eager calls, the data pipeline) and is skipped under tracing.
  """
  shape = np.shape(tokens)
  if len(shape) != 2:
    raise errors.InputError(f"tokens have shape {shape}: expected (batch, time)")
  if shape[1] > cfg.block_size:
    raise errors.InputError(f"sequence length {shape[1]} exceeds the context block_size={cfg.block_size}: "
                     f"crop the input to its last {cfg.block_size} tokens or use a longer-context config")
  if isinstance(tokens, jax.core.Tracer):
    return
  ids = np.asarray(tokens)
  if not np.issubdtype(ids.dtype, np.integer):
    raise errors.InputError(f"tokens have dtype {ids.dtype}: expected integer token ids")
  if ids.size and (ids.min() < 0 or ids.max() >= cfg.vocab_size):
    bad = ids.min() if ids.min() < 0 else ids.max()
    raise errors.InputError(f"token id {int(bad)} is outside [0, {cfg.vocab_size}) for vocab_size="
                     f"{cfg.vocab_size}: encode with the tokenizer this model was trained with")


def embed(params: Params, tokens_BT: jax.Array, cfg: ModelConfig,
          pos: jax.Array | int = 0) -> jax.Array:
  """Token plus learned position embeddings, in the compute dtype: ``(B, T, D)``.

  The tokens sit at positions ``pos .. pos+T-1`` (``pos`` may be traced: the KV-cache
  sampler's). ``position="rope"``: the token embeddings alone (the positions rotate the
  queries and keys in ``qkv_project``). Times ``mup.embedding_multiplier`` (the base
  model's embedding multiplier; 1 by default) and, under DyT, its learned ``emb_scale``;
  then, with ``embedding_norm``, a norm of ``norm_type`` (``ln_emb``; OLMo-core's
  ``embedding_norm``, applied after its ``embed_scale``: olmo_core/nn/transformer/model.py,
  ``Transformer.forward``).
  """
  T = tokens_BT.shape[1]
  x_BTD = jnp.take(params["wte"], tokens_BT, axis=0)
  if cfg.position == "learned":
    x_BTD = x_BTD + jax.lax.dynamic_slice_in_dim(params["wpe"], pos, T, axis=0)
  m = mup.embedding_multiplier(cfg)
  x_BTD = x_BTD if m == 1.0 else x_BTD * jnp.asarray(m, x_BTD.dtype)
  if normaliser(cfg.norm_type).embedding_scale:  # DyT's learned scalar (embedding_scale_init)
    x_BTD = x_BTD * params["emb_scale"].astype(x_BTD.dtype)
  if cfg.embedding_norm:
    x_BTD = normalise(x_BTD, params["ln_emb"], cfg.norm_type, cfg.ln_eps)
  return x_BTD.astype(compute_dtype(cfg))


def unembed(params: Params, x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
  """Final LayerNorm (pre-norm model only), then the tied (or untied) head: float32 logits.

  ``(B, T, cfg.padded_vocab)``: ids from ``vocab_size`` on (padding) have logit -inf. The
  logits carry muP's readout multiplier (applied to the head's input, the cheaper side).
  """
  x_BTD = _head_input(params, x_BTD, cfg)
  dtype = compute_dtype(cfg)
  if cfg.tie_embeddings:
    logits = jnp.einsum("btd,vd->btv", x_BTD.astype(dtype), params["wte"].astype(dtype))
  else:
    logits = jnp.einsum("btd,dv->btv", x_BTD.astype(dtype), params["lm_head"].astype(dtype))
  logits = at_least_f32(logits)
  if cfg.padded_vocab != cfg.vocab_size:
    logits = jnp.where(jnp.arange(cfg.padded_vocab) < cfg.vocab_size, logits, -jnp.inf)
  return logits


def _head_input(params: Params, x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
  """What the head multiplies: the final norm's output (of type ``cfg.final_norm``, where the
  placement has one), times the readout multiplier."""
  if placement(cfg.norm).final_norm:
    x_BTD = normalise(x_BTD, params["ln_f"], cfg.final_norm, cfg.ln_eps)
  r = mup.readout_multiplier(cfg)
  return x_BTD if r == 1.0 else x_BTD * jnp.asarray(r, x_BTD.dtype)


def _blocks(params: Params, tokens_BT: jax.Array, cfg: ModelConfig, stats: bool = False,
            dropout_key: jax.Array | None = None):
  """The residual stream after the last block ``(B, T, D)``, and the scan's per-layer
  diagnostics ``{"attn_logit_max": (L,)}`` (None unless ``stats``).

  With a ``dropout_key`` (and ``cfg.dropout > 0``) the embeddings are dropped and each
  layer gets its own key, scanned beside its parameters.
  """
  check_tokens(tokens_BT, cfg)
  x_BTD = embed(params, tokens_BT, cfg)
  keys_L = None
  if dropout_key is not None and cfg.dropout:
    embed_key, layers_key = jax.random.split(dropout_key)
    x_BTD = kernels.dropout(x_BTD, cfg.dropout, embed_key)
    keys_L = jax.random.split(layers_key, cfg.n_layer)

  def step(x, block, layer, key):
    out = block_forward(block, x, cfg, stats, dropout_key=key, layer=layer)
    return out if stats else (out, None)

  policy = resolve_auto(cfg, verbose=False).remat_policy
  return scan_layers(step, x_BTD, params["blocks"], cfg, keys_L, remat_policy=policy)


def forward(params: Params, tokens_BT: jax.Array, cfg: ModelConfig) -> jax.Array:
  """Logits ``(B, T, V)`` for token ids ``(B, T)``; ``lax.scan`` walks the stacked blocks."""
  return unembed(params, _blocks(params, tokens_BT, cfg)[0], cfg)


def loss_fn(params: Params, tokens_BT: jax.Array, targets_BT: jax.Array, cfg: ModelConfig,
            mask_BT: jax.Array | None = None) -> jax.Array:
  """Mean next-token cross-entropy in nats (optionally over the positions where mask is 1)."""
  return loss_terms(params, tokens_BT, targets_BT, cfg, mask_BT)[0]


def loss_terms(params: Params, tokens_BT: jax.Array, targets_BT: jax.Array, cfg: ModelConfig,
               mask_BT: jax.Array | None = None, z_loss: float = 0.0, stats: bool = False,
               dropout_key: jax.Array | None = None):
  """The training objective and its parts: ``(nll + z_loss * mean log(Z)^2, terms)``.

  ``terms``: ``nll`` (the mean cross-entropy, nats), ``z_loss`` (the auxiliary term PaLM adds
  to keep the softmax normaliser ``Z`` near 1, ``z_loss * mean log(Z)^2``), ``log_z`` (the
  mean ``log Z``) and ``logit_rms`` (the root mean square of the logits over the positions
  and the real vocabulary): the output logits' size; with ``stats`` also the blocks'
  per-layer ``attn_logit_max`` ``(L,)``, gathered by the layer scan. Means run over the
  positions where ``mask`` is 1; the terms carry no gradient (under ``jit`` the unused ones
  cost nothing). With ``cfg.loss_chunk > 0`` the unembedding and the loss run fused over
  chunks of that many rows (``cross_entropy.py``): the same values and gradients, no
  ``(B, T, V)`` logits. ``dropout_key``: training's dropout (module docstring); without
  one the model is deterministic.
  """
  x_BTD, per_layer = _blocks(params, tokens_BT, cfg, stats, dropout_key)
  weight_N = (jnp.ones(targets_BT.shape, jnp.float32) if mask_BT is None else
              mask_BT.astype(jnp.float32)).reshape(-1)
  if cfg.loss_chunk:
    total, sums = _chunked_sums(params, x_BTD, targets_BT, weight_N, cfg, z_loss)
  else:  # on rows: see layer_norm
    logits_NV = unembed(params, x_BTD, cfg).reshape(-1, cfg.padded_vocab)
    lse_N, nll_N = cross_entropy.nll_and_lse(logits_NV, targets_BT.reshape(-1))
    objective_N = nll_N + z_loss * jnp.square(lse_N) if z_loss else nll_N
    total = jnp.sum(weight_N * objective_N)
    sums = {"nll": weight_N * nll_N, "lse_sq": weight_N * jnp.square(lse_N), "lse": weight_N * lse_N,
            "logit_sq": weight_N * cross_entropy.mean_square_logit(logits_NV, cfg.vocab_size)}
    sums = jax.lax.stop_gradient(jax.tree.map(jnp.sum, sums))
  count = jnp.maximum(jnp.sum(weight_N), 1.0)
  terms = {"nll": sums["nll"] / count, "z_loss": z_loss * sums["lse_sq"] / count,
           "log_z": sums["lse"] / count, "logit_rms": jnp.sqrt(sums["logit_sq"] / count),
           **(per_layer or {})}
  return total / count, terms


def _chunked_sums(params, x_BTD, targets_BT, weight_N, cfg: ModelConfig, z_loss: float):
  x_ND = _head_input(params, x_BTD, cfg).reshape(-1, x_BTD.shape[-1])
  w_VD = params["wte"] if cfg.tie_embeddings else params["lm_head"].T
  return cross_entropy.weighted_loss_sums(x_ND.astype(compute_dtype(cfg)), w_VD,
                                          targets_BT.reshape(-1), weight_N, cfg.vocab_size,
                                          cfg.loss_chunk, z_loss)


# ----------------------------------------------------------------------------- counting


def count_params(cfg: ModelConfig) -> int:
  """The exact number of parameters, from the config alone (equals the leaves of init_params)."""
  D, F, L = cfg.d_model, cfg.mlp_dim, cfg.n_layer
  f_in = 2 * F if cfg.activation == "swiglu" else F
  b = 1 if cfg.bias else 0  # the linear layers' biases (norm_size counts the norms')
  attn = D * 3 * D + b * 3 * D + D * D + b * D
  mlp_ = D * f_in + b * f_in + F * D + b * D
  norms = 4 if placement(cfg.norm).out_norm else 2
  block = attn + mlp_ + norms * norm_size(cfg) + ((2 + 2 * b) * cfg.head_dim if cfg.qk_norm else 0)
  total = L * block + cfg.padded_vocab * D + position_params(cfg)
  total += norm_size(cfg, cfg.final_norm) if placement(cfg.norm).final_norm else 0
  total += norm_size(cfg) if cfg.embedding_norm else 0
  total += 0 if cfg.tie_embeddings else D * cfg.padded_vocab
  return total + (1 if normaliser(cfg.norm_type).embedding_scale else 0)  # DyT's emb_scale


def position_params(cfg: ModelConfig) -> int:
  """The learned position table's size, ``block_size * d_model`` (0 under ``position="rope"``)."""
  return cfg.block_size * cfg.d_model if cfg.position == "learned" else 0


def count_layer_norms(cfg: ModelConfig) -> int:
  """Two per block (four under peri), plus the final one where the placement has it and the
  embedding's (``embedding_norm``)."""
  per_block = 4 if placement(cfg.norm).out_norm else 2
  return (per_block * cfg.n_layer + (1 if placement(cfg.norm).final_norm else 0)
          + (1 if cfg.embedding_norm else 0))


def flops_per_token(cfg: ModelConfig, seq_len: int | None = None, causal: bool = False) -> float:
  """Training FLOPs per token, ``6 N + 12 L H Q T`` (PaLM, appendix B); N excludes positions.

  PaLM's attention term counts the whole ``T x T`` square of scores. ``causal=True``
  counts only the pairs a causal kernel must compute (each query and the keys at or
  before it, ``(T + 1) / 2`` on average): ``6 N + 12 L H Q (T + 1) / 2``.
  """
  T = cfg.block_size if seq_len is None else seq_len
  n = count_params(cfg) - position_params(cfg)
  keys = (T + 1) / 2 if causal else T
  return 6.0 * n + 12.0 * cfg.n_layer * cfg.n_head * cfg.head_dim * keys
