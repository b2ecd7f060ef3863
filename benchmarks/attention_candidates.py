"""A candidate causal attention kernel for CPUs, timed by ``benchmarks.attention_ab``; not
used by the model (issue 31: measured on a shared machine only, not yet switched in:
docs/performance.md).

FlashAttention tiled by query block and key tile, over groups of heads (``lax.map``): an
online-softmax forward, the hand-written backward (P recomputed from the saved
log-sum-exp), and the causal mask only on the tiles that cross the diagonal. Same
layout and exactness as ``attention.flash_causal_attention``; ``TilePlan`` picks the cuts.
"""
# pylint: disable=protected-access

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from andrea_jax import attention
from andrea_jax import precision


def _key_tiles(end: int, start: int, C: int, key_block: int):
  """The key tiles ``(begin, length, masked)`` that queries ``start .. start+C`` can see,
  cut at key ``end``."""
  return [(b, min(key_block, end - b), b + min(key_block, end - b) - 1 > start)
          for b in range(0, start + C, key_block)]


def _tile_scores(q_NCK, k_NDK, start: int, begin: int, masked: bool):
  s_NCD = precision.at_least_f32(jnp.einsum("nck,ndk->ncd", q_NCK, k_NDK))
  if not masked:
    return s_NCD
  C, D = s_NCD.shape[-2:]
  visible_CD = start + jnp.arange(C)[:, None] >= begin + jnp.arange(D)[None, :]
  return jnp.where(visible_CD, s_NCD, -jnp.inf)


def _tiled_forward(q, k, v, query_block: int, key_block: int):
  """Output and per-row log-sum-exp of queries ``(N, T, K)``: an online softmax over the
  key tiles of each query block."""
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
  delta = jnp.sum(precision.at_least_f32(do * o), axis=-1, keepdims=True)
  dqs, dk, dv = [], {}, {}
  for a in range(0, T, query_block):
    C = min(query_block, T - a)
    qa, doa, dqa = q[:, a:a + C], do[:, a:a + C], None
    for b, D, masked in _key_tiles(a + C, a, C, key_block):
      p = jnp.exp(_tile_scores(qa, k[:, b:b + D], a, b, masked) - lse[:, a:a + C])
      dp = precision.at_least_f32(jnp.einsum("nck,ndk->ncd", doa, v[:, b:b + D]))
      ds = (p * (dp - delta[:, a:a + C])).astype(q.dtype)
      terms = {"dv": jnp.einsum("ncd,nck->ndk", p.astype(do.dtype), doa),
               "dk": jnp.einsum("ncd,nck->ndk", ds, qa)}
      for name, parts in (("dk", dk), ("dv", dv)):
        parts.setdefault(b, []).append(terms[name])
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
    pad = lambda t: jnp.pad(t, ((0, 0), (0, D - t.shape[1]), (0, 0)))
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
  forward: one as long as the sequence is ``xla_flash``'s cut) and the number of the
  ``B*H`` heads per ``lax.map`` group (forward, backward; 0: no groups)."""
  query_block: int = 128
  key_block: int = 128
  fwd_key_block: int = 1024
  fwd_group: int = 4
  bwd_group: int = 4


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
  diagonal only."""
  B = q_BTHK.shape[0]
  q, k, v = attention._heads_major(q_BTHK, k_BTHK, v_BTHK)
  return attention._tokens_major(_key_tiled(q, k, v, plan), B)
