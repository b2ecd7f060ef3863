"""Causal attention kernels: the reference, the blocked XLA path, its FlashAttention backward
and a key-tiled variant of it.

Each takes queries, keys and values ``(B, T, H, K)`` and returns ``(B, T, H, K)``; the
softmax runs in at least float32 whatever the compute dtype. ``model.attention`` picks
one by ``ModelConfig.attention_impl``:

    "xla"        blocked_causal_attention: query blocks, each rematerialised; autodiff
                 backward (so forward mode, ``jax.jvp``, works too)
    "xla_flash"  flash_causal_attention: the same blocks with FlashAttention's
                 hand-written backward (recompute P from the saved log-sum-exp);
                 the CPU default ("auto")
    "xla_tiled"  key_tiled_causal_attention: FlashAttention over (query block, key tile)
                 pairs, an online-softmax forward, the mask only on the tiles that cross
                 the diagonal, heads in ``lax.map`` groups of 4 (issue 31's ``kt_f128``;
                 opt-in until a whole-step A/B decides: docs/performance.md)
    "cudnn"      jax.nn.dot_product_attention's cuDNN flash kernel (NVIDIA GPUs,
                 bfloat16/float16 only)

``causal_attend`` is the plain masked softmax, kept as the reference the tests compare
against and as the decode path of ``sample.py`` (its KV cache needs an explicit mask).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

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


# ----------------------------------------------------------------------------- key-tiled, flash backward


def _key_tiles(end: int, start: int, C: int, key_block: int):
  """The key tiles ``(begin, length, masked)`` that queries ``start .. start+C`` can see,
  cut at key ``end``; ``masked``: the tile crosses the diagonal (its last key is later
  than the block's first query), so it needs the causal mask."""
  return [(b, min(key_block, end - b), b + min(key_block, end - b) - 1 > start)
          for b in range(0, start + C, key_block)]


def _tile_scores(q_NCK, k_NDK, start: int, begin: int, masked: bool):
  s_NCD = at_least_f32(jnp.einsum("nck,ndk->ncd", q_NCK, k_NDK))
  if not masked:
    return s_NCD
  C, D = s_NCD.shape[-2:]
  visible_CD = start + jnp.arange(C)[:, None] >= begin + jnp.arange(D)[None, :]
  return jnp.where(visible_CD, s_NCD, -jnp.inf)


def _tiled_forward(q, k, v, query_block: int, key_block: int):
  """Output and per-row log-sum-exp of queries ``(N, T, K)``: an online softmax over the
  key tiles of each query block (a tile as long as the sequence: one plain softmax)."""
  T = q.shape[1]
  outs, lses = [], []
  for a in range(0, T, query_block):
    C = min(query_block, T - a)
    qa = q[:, a:a + C]
    m = l = acc = None
    for b, D, masked in _key_tiles(a + C, a, C, key_block):
      s = _tile_scores(qa, k[:, b:b + D], a, b, masked)
      if m is None:  # the first tile holds key 0, which every query sees: m stays finite
        m = jnp.max(s, axis=-1, keepdims=True)
        e = jnp.exp(s - m)
        l = jnp.sum(e, axis=-1, keepdims=True)
        acc = jnp.einsum("ncd,ndk->nck", e.astype(v.dtype), v[:, b:b + D])
        continue
      m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
      e, corr = jnp.exp(s - m_new), jnp.exp(m - m_new)
      l = l * corr + jnp.sum(e, axis=-1, keepdims=True)
      acc = acc * corr + jnp.einsum("ncd,ndk->nck", e.astype(v.dtype), v[:, b:b + D])
      m = m_new
    outs.append((acc / l).astype(v.dtype))
    lses.append(m + jnp.log(l))
  return jnp.concatenate(outs, axis=1), jnp.concatenate(lses, axis=1)


def _tiled_backward(q, k, v, o, lse, do, query_block: int, key_block: int):
  """FlashAttention's backward over (query block, key tile) pairs: P recomputed from the
  log-sum-exp, a mask only on the tiles that cross the diagonal."""
  T = q.shape[1]
  delta = jnp.sum(at_least_f32(do * o), axis=-1, keepdims=True)
  dqs, dk, dv = [], {}, {}
  for a in range(0, T, query_block):
    C = min(query_block, T - a)
    qa, doa, dqa = q[:, a:a + C], do[:, a:a + C], None
    for b, D, masked in _key_tiles(a + C, a, C, key_block):
      p = jnp.exp(_tile_scores(qa, k[:, b:b + D], a, b, masked) - lse[:, a:a + C])
      dp = at_least_f32(jnp.einsum("nck,ndk->ncd", doa, v[:, b:b + D]))
      ds = (p * (dp - delta[:, a:a + C])).astype(q.dtype)
      dv.setdefault(b, []).append(jnp.einsum("ncd,nck->ndk", p.astype(do.dtype), doa))
      dk.setdefault(b, []).append(jnp.einsum("ncd,nck->ndk", ds, qa))
      dq_tile = jnp.einsum("ncd,ndk->nck", ds, k[:, b:b + D])
      dqa = dq_tile if dqa is None else dqa + dq_tile
    dqs.append(dqa)
  return jnp.concatenate(dqs, axis=1), _gather_tiles(dk, T), _gather_tiles(dv, T)


def _gather_tiles(parts: dict, T: int) -> jax.Array:
  """Key tile begin -> its gradients from each query block (each cut where that block's
  keys end) summed, the tiles joined along the keys: ``(N, T, K)``."""
  tiles = []
  for b in sorted(parts):
    D = max(t.shape[1] for t in parts[b])
    pad = lambda t, D=D: jnp.pad(t, ((0, 0), (0, D - t.shape[1]), (0, 0)))
    tiles.append(functools.reduce(jnp.add, [pad(t) for t in parts[b]]))
  assert sum(t.shape[1] for t in tiles) == T, [t.shape for t in tiles]
  return jnp.concatenate(tiles, axis=1)


def _by_head_groups(fn, group: int, query_block: int, *arrays):
  """``fn`` over ``arrays`` ``(N, T, ...)`` in groups of ``group`` of the N heads, one group
  at a time (``lax.map``), so that a group's score tiles stay in the CPU's caches; all at
  once when ``group`` is 0 or does not divide N, or when T is one query block (there the
  loop only added time: tiny, docs/performance.md)."""
  N, T = arrays[0].shape[:2]
  if not group or group >= N or N % group or T <= query_block:
    return fn(*arrays)
  split = lambda a: a.reshape(N // group, group, *a.shape[1:])
  out = jax.lax.map(lambda xs: fn(*xs), tuple(split(a) for a in arrays))
  return jax.tree.map(lambda a: a.reshape(N, *a.shape[2:]), out)


class TilePlan(NamedTuple):
  """How ``key_tiled_causal_attention`` cuts the work: query blocks, key tiles (backward,
  forward) and the number of the ``B*H`` heads per ``lax.map`` group (forward, backward;
  0: no groups). A key tile at least as long as the sequence is ``xla_flash``'s cut (one
  softmax per query block); a shorter one is an online softmax over several tiles, exact at
  any length. The defaults are issue 31's ``kt`` (``benchmarks/attention_ab.py``); the
  model's ``"xla_tiled"`` is ``kt_f128``: every tile ``attention_block`` long."""
  query_block: int = 128
  key_block: int = 128
  fwd_key_block: int = 1024
  fwd_group: int = 4
  bwd_group: int = 4

  @classmethod
  def square(cls, block: int) -> "TilePlan":
    """Query blocks and key tiles (forward and backward) of ``block``, groups of 4 heads:
    the plan of ``attention_impl="xla_tiled"``."""
    return cls(query_block=block, key_block=block, fwd_key_block=block)


def _key_tiled_fwd(q, k, v, plan: TilePlan):
  fwd = functools.partial(_tiled_forward, query_block=plan.query_block,
                          key_block=plan.fwd_key_block)
  o, lse = _by_head_groups(fwd, plan.fwd_group, plan.query_block, q, k, v)
  return o, (q, k, v, o, lse)


def _key_tiled_bwd(plan: TilePlan, residuals, do):
  bwd = functools.partial(_tiled_backward, query_block=plan.query_block, key_block=plan.key_block)
  return _by_head_groups(bwd, plan.bwd_group, plan.query_block, *residuals, do)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _key_tiled(q, k, v, plan):
  return _key_tiled_fwd(q, k, v, plan)[0]


_key_tiled.defvjp(_key_tiled_fwd, _key_tiled_bwd)


def key_tiled_causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array,
                               plan: TilePlan = TilePlan()) -> jax.Array:
  """FlashAttention tiled by query block and key tile over groups of heads: an online
  softmax forward, the hand-written backward, and a mask on the tiles that cross the
  diagonal only (the others skip the ``where``). Exact, as ``flash_causal_attention``; a
  ``custom_vjp`` (reverse mode only). As ``kt_f128``, the attention core alone ran
  1.12-1.30x ``xla_flash``'s speed at andrea12m and 1.02-1.11x at andrea120m on a shared
  2-core CPU (docs/performance.md, issue 31)."""
  B = q_BTHK.shape[0]
  q, k, v = _heads_major(q_BTHK, k_BTHK, v_BTHK)
  return _tokens_major(_key_tiled(q, k, v, plan), B)


# ----------------------------------------------------------------------------- cuDNN


def cudnn_causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array) -> jax.Array:
  """cuDNN's fused flash attention (NVIDIA GPUs; bfloat16 or float16 inputs)."""
  return jax.nn.dot_product_attention(q_BTHK, k_BTHK, v_BTHK, is_causal=True,
                                      implementation="cudnn")


def causal_attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array, impl: str,
                     block: int = 128) -> jax.Array:
  """The kernel named ``impl`` ("xla", "xla_flash", "xla_tiled" or "cudnn"; resolve "auto"
  first): the one place that maps an ``attention_impl`` to its kernel. ``block`` is the
  query block of the XLA kernels (and the key tile of "xla_tiled")."""
  if impl == "xla":
    return blocked_causal_attention(q_BTHK, k_BTHK, v_BTHK, block)
  if impl == "xla_flash":
    return flash_causal_attention(q_BTHK, k_BTHK, v_BTHK, block)
  if impl == "xla_tiled":
    return key_tiled_causal_attention(q_BTHK, k_BTHK, v_BTHK, TilePlan.square(block))
  if impl == "cudnn":
    return cudnn_causal_attention(q_BTHK, k_BTHK, v_BTHK)
  raise ValueError(f"attention_impl={impl!r}: expected 'xla', 'xla_flash', 'xla_tiled' or "
                   f"'cudnn' (resolve 'auto' with model.resolve_auto first)")
