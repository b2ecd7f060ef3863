"""The unembedding and cross-entropy fused over row chunks, so ``(N, V)`` logits never exist.

``model.loss_fn`` uses it when ``ModelConfig.loss_chunk > 0``. For ``C`` rows at a time
it computes the logits, the log-sum-exp, the loss and, when differentiated, the gradient
of the logits ``softmax - onehot`` right away, folding it into the gradients of the rows
(``dlogits @ W``) and of the head (``dlogits^T @ x``). The backward pass only scales
those by the loss's cotangent: no logits are stored or recomputed, and the largest
temporary is ``(C, V)`` instead of ``(N, V)`` for the logits and again for their gradient.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from andrea_jax.precision import at_least_f32


def _chunk_logits(x_CD, w_VD, vocab_size: int):
  logits_CV = jnp.einsum("cd,vd->cv", x_CD, w_VD.astype(x_CD.dtype))
  logits_CV = at_least_f32(logits_CV)
  if w_VD.shape[0] != vocab_size:  # padded vocabulary: the padding is out of the softmax
    logits_CV = jnp.where(jnp.arange(w_VD.shape[0]) < vocab_size, logits_CV, -jnp.inf)
  return logits_CV


def _chunks(x_ND, y_N, weight_N, chunk: int):
  """Rows padded with zero-weight rows to a multiple of ``chunk``, as ``(n, chunk, ...)``."""
  N = x_ND.shape[0]
  pad = -N % chunk
  x_ND, y_N, weight_N = (jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1))
                         for a in (x_ND, y_N, weight_N))
  n = (N + pad) // chunk
  return x_ND.reshape(n, chunk, -1), y_N.reshape(n, chunk), weight_N.reshape(n, chunk)


def _nll(logits_CV, y_C):
  lse_C = jax.nn.logsumexp(logits_CV, axis=-1)
  return lse_C, lse_C - jnp.take_along_axis(logits_CV, y_C[:, None], axis=-1)[:, 0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def weighted_nll_sum(x_ND, w_VD, y_N, weight_N, vocab_size: int, chunk: int):
  """``sum_n weight_n * CE(x_n @ W^T, y_n)`` over rows ``x_ND``, head ``w_VD``, ``chunk`` rows at a time."""
  def body(total, xs):
    x_CD, y_C, weight_C = xs
    _, nll_C = _nll(_chunk_logits(x_CD, w_VD, vocab_size), y_C)
    return total + jnp.sum(nll_C * weight_C), None

  total, _ = jax.lax.scan(body, jnp.zeros((), _accumulator(x_ND)), _chunks(x_ND, y_N, weight_N, chunk))
  return total


def _accumulator(x_ND):
  """Sums run in at least float32 (float64 for the gradient checks)."""
  return jnp.promote_types(x_ND.dtype, jnp.float32)


def _fwd(x_ND, w_VD, y_N, weight_N, vocab_size, chunk):
  N, D = x_ND.shape
  acc = _accumulator(x_ND)

  def body(carry, xs):
    total, dw_VD = carry
    x_CD, y_C, weight_C = xs
    logits_CV = _chunk_logits(x_CD, w_VD, vocab_size)
    lse_C, nll_C = _nll(logits_CV, y_C)
    p_CV = jnp.exp(logits_CV - lse_C[:, None])
    onehot_CV = jax.nn.one_hot(y_C, logits_CV.shape[-1], dtype=p_CV.dtype)
    dlogits_CV = ((p_CV - onehot_CV) * weight_C[:, None]).astype(x_CD.dtype)
    dx_CD = jnp.einsum("cv,vd->cd", dlogits_CV, w_VD.astype(x_CD.dtype),
                       preferred_element_type=acc)
    dw_VD = dw_VD + jnp.einsum("cv,cd->vd", dlogits_CV, x_CD, preferred_element_type=acc)
    return (total + jnp.sum(nll_C * weight_C), dw_VD), dx_CD

  init = (jnp.zeros((), acc), jnp.zeros(w_VD.shape, acc))
  (total, dw_VD), dx_nCD = jax.lax.scan(body, init, _chunks(x_ND, y_N, weight_N, chunk))
  dx_ND = dx_nCD.reshape(-1, D)[:N].astype(x_ND.dtype)
  return total, (dx_ND, dw_VD.astype(w_VD.dtype), y_N, weight_N)


def _bwd(vocab_size, chunk, residuals, g):
  del vocab_size, chunk
  dx_ND, dw_VD, y_N, weight_N = residuals
  return ((g * dx_ND).astype(dx_ND.dtype), (g * dw_VD).astype(dw_VD.dtype), None,
          jnp.zeros_like(weight_N))


weighted_nll_sum.defvjp(_fwd, _bwd)
