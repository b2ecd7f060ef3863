"""Causal attention kernels: the reference, the blocked XLA path and its FlashAttention backward.

Each takes queries, keys and values ``(B, T, H, K)`` and returns ``(B, T, H, K)``; the
softmax runs in at least float32 whatever the compute dtype. ``branches.attention`` picks
one by ``ModelConfig.attention_impl``:

    "xla"        blocked_causal_attention: query blocks, each rematerialised; autodiff
                 backward (so forward mode, ``jax.jvp``, works too)
    "xla_flash"  flash_causal_attention: the same blocks with FlashAttention's
                 hand-written backward (recompute P from the saved log-sum-exp);
                 the fastest on CPUs
    "cudnn"      jax.nn.dot_product_attention's cuDNN flash kernel (NVIDIA GPUs,
                 bfloat16/float16 only)

``causal_attend`` is the plain masked softmax, kept as the reference the tests compare
against and as the decode path of ``sample.py`` (its KV cache needs an explicit mask).

Attention dropout (``ModelConfig.dropout``, in training only: a ``key`` is given): the two
blocked kernels drop entries of each query block's probabilities, with a mask drawn from
``fold_in(key, the block's first query)``, so ``"xla"`` and ``"xla_flash"`` drop the same
entries; the flash backward draws the same mask again (as FlashAttention does) instead of
storing it. cuDNN's kernel takes no dropout (``ModelConfig`` refuses the combination).
``dropout`` is the one inverted dropout of the project (``model.py``'s embedding and
residual dropout too).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from andrea_jax.precision import at_least_f32


def dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
  """Inverted dropout: each entry zeroed with probability ``rate``, the others scaled by
  ``1 / (1 - rate)``; ``x`` itself without a key or at rate 0 (no random numbers drawn)."""
  if key is None or rate == 0.0:
    return x
  return x * _keep_scale(key, rate, x.shape, x.dtype)


def _keep_scale(key: jax.Array, rate: float, shape, dtype) -> jax.Array:
  """``1 / (1 - rate)`` where an entry is kept (probability ``1 - rate``), else 0."""
  keep = jax.random.bernoulli(key, 1.0 - rate, shape)
  return jnp.where(keep, jnp.asarray(1.0 / (1.0 - rate), dtype), jnp.zeros((), dtype))


def causal_attend(q_BTHK: jax.Array, k_BSHK: jax.Array, v_BSHK: jax.Array,
                  mask_BTS: jax.Array) -> jax.Array:
  """Softmax attention of queries over keys where ``mask`` is True; softmax in float32."""
  scale = 1.0 / math.sqrt(q_BTHK.shape[-1])
  s_BHTS = at_least_f32(jnp.einsum("bthk,bshk->bhts", q_BTHK, k_BSHK)) * scale
  s_BHTS = jnp.where(mask_BTS[:, None], s_BHTS, jnp.finfo(s_BHTS.dtype).min)
  p_BHTS = jax.nn.softmax(s_BHTS, axis=-1).astype(v_BSHK.dtype)
  return jnp.einsum("bhts,bshk->bthk", p_BHTS, v_BSHK)


# ----------------------------------------------------------------------------- blocked (autodiff)


def _heads_major(q_BTHK, k_BTHK, v_BTHK):
  """Scaled queries, keys and values as ``(B*H, T, K)``: XLA's batched dots want the heads
  next to the batch, and one merged batch axis keeps a batch of one from leaving a unit
  axis in every reduction (XLA:CPU's YNNPACK fusions of such reductions ran several times
  slower: docs/performance.md)."""
  B, T, H, K = q_BTHK.shape
  scale = 1.0 / math.sqrt(K)
  return tuple(jnp.swapaxes(a, 1, 2).reshape(B * H, a.shape[1], K)
               for a in (q_BTHK * scale, k_BTHK, v_BTHK))


def _tokens_major(o_NTK, B: int) -> jax.Array:
  """``(B*H, T, K)`` back to ``(B, T, H, K)``."""
  N, T, K = o_NTK.shape
  return jnp.swapaxes(o_NTK.reshape(B, N // B, T, K), 1, 2)


def _block_scores(q_NCK, k_NSK, start: int, fill: float | None = None):
  """Scores of queries ``start .. start+C`` against keys ``0 .. S``, causal entries kept."""
  C, S = q_NCK.shape[-2], k_NSK.shape[-2]
  s_NCS = at_least_f32(jnp.einsum("nck,nsk->ncs", q_NCK, k_NSK))
  visible_CS = start + jnp.arange(C)[:, None] >= jnp.arange(S)[None, :]
  return jnp.where(visible_CS, s_NCS, jnp.finfo(s_NCS.dtype).min if fill is None else fill)


def _attend_block(q_NCK, k_NSK, v_NSK, start: int, rate: float = 0.0, key=None):
  p_NCS = jax.nn.softmax(_block_scores(q_NCK, k_NSK, start), axis=-1)
  p_NCS = dropout(p_NCS, rate, _block_key(key, start)).astype(v_NSK.dtype)
  return jnp.einsum("ncs,nsk->nck", p_NCS, v_NSK)


def _block_key(key, start: int):
  """The dropout key of the query block starting at ``start`` (None: no dropout)."""
  return None if key is None else jax.random.fold_in(key, start)


def blocked_causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array,
                             block: int, dropout_rate: float = 0.0,
                             key: jax.Array | None = None) -> jax.Array:
  """Exact causal attention computed ``block`` queries at a time (the XLA path).

  Query block i only multiplies keys 0 .. (i+1) * block, so the masked upper triangle is
  (mostly) never computed, and each block's scores stay small enough for the CPU's
  caches; each block is rematerialised in the backward pass rather than storing its
  probabilities (its dropout mask is drawn again from its key).
  """
  B, T = q_BTHK.shape[:2]
  q, k, v = _heads_major(q_BTHK, k_BTHK, v_BTHK)
  attend = jax.checkpoint(_attend_block, static_argnums=(3, 4))
  outs = [attend(q[:, a:a + block], k[:, :a + block], v[:, :a + block], a, dropout_rate, key)
          for a in range(0, T, block)]
  return _tokens_major(jnp.concatenate(outs, axis=1), B)


def causal_logit_max(q_BTHK: jax.Array, k_BTHK: jax.Array, block: int = 128) -> jax.Array:
  """The largest attention logit (a score the softmax sees, ``q . k / sqrt(K)``) over the
  causal entries of every head and row: a float32 scalar, ``block`` queries at a time."""
  T = q_BTHK.shape[1]
  q, k, _ = _heads_major(q_BTHK, k_BTHK, k_BTHK)
  maxima = [jnp.max(_block_scores(q[:, a:a + block], k[:, :a + block], a, fill=-jnp.inf))
            for a in range(0, T, block)]
  return jnp.max(jnp.stack(maxima)).astype(jnp.float32)


# ----------------------------------------------------------------------------- blocked, flash backward


def _flash_block_fwd(q, k, v, start, rate, key):
  s = _block_scores(q, k, start, fill=-jnp.inf)  # every query sees key 0: rows stay finite
  m = jnp.max(s, axis=-1, keepdims=True)
  e = jnp.exp(s - m)
  denom = jnp.sum(e, axis=-1, keepdims=True)
  e = dropout(e, rate, _block_key(key, start))  # dropping e / denom's entries: the same
  o = (jnp.einsum("ncs,nsk->nck", e.astype(v.dtype), v) / denom).astype(v.dtype)
  return o, (q, k, v, o, m + jnp.log(denom), key)


def _flash_block_bwd(start, rate, residuals, do):
  # FlashAttention's backward: recompute P (and its dropout mask M, from the key) from the
  # saved log-sum-exp, no softmax autodiff. With o = (P * M) v: dv = (P * M)^T do and
  # dS = P * (M * (do v^T) - rowsum(do * o)).
  q, k, v, o, lse, key = residuals
  p = jnp.exp(_block_scores(q, k, start, fill=-jnp.inf) - lse)
  dv = jnp.einsum("ncs,nck->nsk", dropout(p, rate, _block_key(key, start)).astype(do.dtype), do)
  dp = dropout(at_least_f32(jnp.einsum("nck,nsk->ncs", do, v)), rate, _block_key(key, start))
  ds = (p * (dp - jnp.sum(at_least_f32(do * o), axis=-1, keepdims=True))).astype(q.dtype)
  return (jnp.einsum("ncs,nsk->nck", ds, k), jnp.einsum("ncs,nck->nsk", ds, q), dv, None)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _flash_block(q, k, v, start, rate, key):
  return _flash_block_fwd(q, k, v, start, rate, key)[0]


_flash_block.defvjp(_flash_block_fwd, _flash_block_bwd)


def flash_causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array,
                           block: int, dropout_rate: float = 0.0,
                           key: jax.Array | None = None) -> jax.Array:
  """``blocked_causal_attention`` with FlashAttention's hand-written backward pass.

  Stores only each row's log-sum-exp and recomputes the probabilities in the backward
  pass (about 25 % faster than autodiff of the rematerialised softmax on a CPU), and
  their dropout mask from the key. A ``custom_vjp``: reverse mode (``grad``) only, so
  ``jax.jvp`` needs ``attention_impl="xla"``.
  """
  B, T = q_BTHK.shape[:2]
  q, k, v = _heads_major(q_BTHK, k_BTHK, v_BTHK)
  outs = [_flash_block(q[:, a:a + block], k[:, :a + block], v[:, :a + block], a,
                       dropout_rate, key)
          for a in range(0, T, block)]
  return _tokens_major(jnp.concatenate(outs, axis=1), B)


# ----------------------------------------------------------------------------- cuDNN


def cudnn_causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array) -> jax.Array:
  """cuDNN's fused flash attention (NVIDIA GPUs; bfloat16 or float16 inputs)."""
  return jax.nn.dot_product_attention(q_BTHK, k_BTHK, v_BTHK, is_causal=True,
                                      implementation="cudnn")


def causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array, impl: str,
                     block: int = 128, dropout_rate: float = 0.0,
                     key: jax.Array | None = None) -> jax.Array:
  """The kernel named ``impl`` ("xla", "xla_flash" or "cudnn"; resolve "auto" first):
  the one place that maps an ``attention_impl`` to its kernel. With a ``key`` and
  ``dropout_rate > 0`` the probabilities are dropped (training; module docstring)."""
  if key is None or dropout_rate == 0.0:
    key, dropout_rate = None, 0.0
  if impl == "xla":
    return blocked_causal_attention(q_BTHK, k_BTHK, v_BTHK, block, dropout_rate, key)
  if impl == "xla_flash":
    return flash_causal_attention(q_BTHK, k_BTHK, v_BTHK, block, dropout_rate, key)
  if impl == "cudnn":
    if key is not None:
      raise ValueError(f"attention_impl='cudnn' with dropout_rate={dropout_rate}: cuDNN's "
                       f"kernel here takes no dropout; use 'xla_flash'")
    return cudnn_causal_attention(q_BTHK, k_BTHK, v_BTHK)
  raise ValueError(f"attention_impl={impl!r}: expected 'xla', 'xla_flash' or 'cudnn' "
                   f"(resolve 'auto' with model.resolve_auto first)")
