"""Causal attention kernels: the reference, the blocked XLA path and its FlashAttention backward.

Each takes queries, keys and values ``(B, T, H, K)`` and returns ``(B, T, H, K)``; the
softmax runs in at least float32 whatever the compute dtype. ``model.attention`` picks
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
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from andrea_jax.precision import at_least_f32


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


def _attend_block(q_NCK, k_NSK, v_NSK, start: int):
  p_NCS = jax.nn.softmax(_block_scores(q_NCK, k_NSK, start), axis=-1).astype(v_NSK.dtype)
  return jnp.einsum("ncs,nsk->nck", p_NCS, v_NSK)


def blocked_causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array,
                             block: int) -> jax.Array:
  """Exact causal attention computed ``block`` queries at a time (the XLA path).

  Query block i only multiplies keys 0 .. (i+1) * block, so the masked upper triangle is
  (mostly) never computed, and each block's scores stay small enough for the CPU's
  caches; each block is rematerialised in the backward pass rather than storing its
  probabilities.
  """
  B, T = q_BTHK.shape[:2]
  q, k, v = _heads_major(q_BTHK, k_BTHK, v_BTHK)
  attend = jax.checkpoint(_attend_block, static_argnums=(3,))
  outs = [attend(q[:, a:a + block], k[:, :a + block], v[:, :a + block], a)
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


def _flash_block_fwd(q, k, v, start):
  s = _block_scores(q, k, start, fill=-jnp.inf)  # every query sees key 0: rows stay finite
  m = jnp.max(s, axis=-1, keepdims=True)
  e = jnp.exp(s - m)
  denom = jnp.sum(e, axis=-1, keepdims=True)
  o = (jnp.einsum("ncs,nsk->nck", e.astype(v.dtype), v) / denom).astype(v.dtype)
  return o, (q, k, v, o, m + jnp.log(denom))


def _flash_block_bwd(start, residuals, do):
  # FlashAttention's backward: recompute P from the saved log-sum-exp, no softmax autodiff.
  q, k, v, o, lse = residuals
  p = jnp.exp(_block_scores(q, k, start, fill=-jnp.inf) - lse)
  dv = jnp.einsum("ncs,nck->nsk", p.astype(do.dtype), do)
  dp = at_least_f32(jnp.einsum("nck,nsk->ncs", do, v))
  ds = (p * (dp - jnp.sum(at_least_f32(do * o), axis=-1, keepdims=True))).astype(q.dtype)
  return (jnp.einsum("ncs,nsk->nck", ds, k), jnp.einsum("ncs,nck->nsk", ds, q), dv)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _flash_block(q, k, v, start):
  return _flash_block_fwd(q, k, v, start)[0]


_flash_block.defvjp(_flash_block_fwd, _flash_block_bwd)


def flash_causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array,
                           block: int) -> jax.Array:
  """``blocked_causal_attention`` with FlashAttention's hand-written backward pass.

  Stores only each row's log-sum-exp and recomputes the probabilities in the backward
  pass (about 25 % faster than autodiff of the rematerialised softmax on a CPU). A
  ``custom_vjp``: reverse mode (``grad``) only, so ``jax.jvp`` needs ``attention_impl="xla"``.
  """
  B, T = q_BTHK.shape[:2]
  q, k, v = _heads_major(q_BTHK, k_BTHK, v_BTHK)
  outs = [_flash_block(q[:, a:a + block], k[:, :a + block], v[:, :a + block], a)
          for a in range(0, T, block)]
  return _tokens_major(jnp.concatenate(outs, axis=1), B)


# ----------------------------------------------------------------------------- cuDNN


def cudnn_causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array) -> jax.Array:
  """cuDNN's fused flash attention (NVIDIA GPUs; bfloat16 or float16 inputs)."""
  return jax.nn.dot_product_attention(q_BTHK, k_BTHK, v_BTHK, is_causal=True,
                                      implementation="cudnn")


def causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array, impl: str,
                     block: int = 128) -> jax.Array:
  """The kernel named ``impl`` ("xla", "xla_flash" or "cudnn"; resolve "auto" first):
  the one place that maps an ``attention_impl`` to its kernel."""
  if impl == "xla":
    return blocked_causal_attention(q_BTHK, k_BTHK, v_BTHK, block)
  if impl == "xla_flash":
    return flash_causal_attention(q_BTHK, k_BTHK, v_BTHK, block)
  if impl == "cudnn":
    return cudnn_causal_attention(q_BTHK, k_BTHK, v_BTHK)
  raise ValueError(f"attention_impl={impl!r}: expected 'xla', 'xla_flash' or 'cudnn' "
                   f"(resolve 'auto' with model.resolve_auto first)")
