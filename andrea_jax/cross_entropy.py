"""The unembedding and cross-entropy fused over row chunks, so ``(N, V)`` logits never exist.

``model.loss_terms`` uses it when ``ModelConfig.loss_chunk > 0``. For ``C`` rows at a time
it computes the logits, the log-sum-exp, the loss (with PaLM's z-loss ``z log(Z)^2``
when asked) and, when differentiated, the gradient of the logits
``softmax (1 + 2 z log Z) - onehot`` right away, folding it into the gradients of the rows
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


def nll_and_lse(logits_NV, y_N):
  """Per row: the log-normaliser ``log Z = logsumexp(logits)`` and the cross-entropy ``log Z - logit[y]``."""
  lse_N = jax.nn.logsumexp(logits_NV, axis=-1)
  return lse_N, lse_N - jnp.take_along_axis(logits_NV, y_N[:, None], axis=-1)[:, 0]


def mean_square_logit(logits_NV, vocab_size: int):
  """Per row: the mean square of the logits over the real vocabulary (the padding is -inf)."""
  return jnp.mean(jnp.square(logits_NV[:, :vocab_size]), axis=-1)


def _sums(logits_CV, lse_C, y_C, weight_C, vocab_size: int, z_loss: float):
  """The chunk's weighted total ``sum w (nll + z_loss lse^2)`` and its parts (``SUMS``)."""
  nll_C = lse_C - jnp.take_along_axis(logits_CV, y_C[:, None], axis=-1)[:, 0]
  total = jnp.sum(weight_C * (nll_C + z_loss * jnp.square(lse_C) if z_loss else nll_C))
  return total, {"nll": jnp.sum(weight_C * nll_C), "lse_sq": jnp.sum(weight_C * jnp.square(lse_C)),
                 "lse": jnp.sum(weight_C * lse_C),
                 "logit_sq": jnp.sum(weight_C * mean_square_logit(logits_CV, vocab_size))}


SUMS = ("nll", "lse_sq", "lse", "logit_sq")


def _accumulator(x_ND):
  """Sums run in at least float32 (float64 for the gradient checks)."""
  return jnp.promote_types(x_ND.dtype, jnp.float32)


def _zeros(dtype):
  return jnp.zeros((), dtype), {k: jnp.zeros((), dtype) for k in SUMS}


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def weighted_loss_sums(x_ND, w_VD, y_N, weight_N, vocab_size: int, chunk: int, z_loss: float):
  """``sum_n weight_n (CE_n + z_loss log(Z_n)^2)`` over the logits ``x_n @ W^T``, ``chunk`` rows at a time.

  Returns ``(total, sums)``: the total is what is differentiated; ``sums`` holds its parts
  ``nll``, ``lse_sq``, ``lse`` and ``logit_sq`` (weighted sums of the cross-entropy, of
  ``log(Z)^2``, of ``log Z`` and of the mean square logit) for reporting. They carry no
  gradient (as under ``lax.stop_gradient``).
  """
  def body(carry, xs):
    x_CD, y_C, weight_C = xs
    logits_CV = _chunk_logits(x_CD, w_VD, vocab_size)
    sums = _sums(logits_CV, jax.nn.logsumexp(logits_CV, axis=-1), y_C, weight_C, vocab_size, z_loss)
    return jax.tree.map(jnp.add, carry, sums), None

  out, _ = jax.lax.scan(body, _zeros(_accumulator(x_ND)), _chunks(x_ND, y_N, weight_N, chunk))
  return out


def _fwd(x_ND, w_VD, y_N, weight_N, vocab_size, chunk, z_loss):
  N, D = x_ND.shape
  acc = _accumulator(x_ND)

  def body(carry, xs):
    sums, dw_VD = carry
    x_CD, y_C, weight_C = xs
    logits_CV = _chunk_logits(x_CD, w_VD, vocab_size)
    lse_C = jax.nn.logsumexp(logits_CV, axis=-1)
    p_CV = jnp.exp(logits_CV - lse_C[:, None])
    onehot_CV = jax.nn.one_hot(y_C, logits_CV.shape[-1], dtype=p_CV.dtype)
    # d(nll + z lse^2)/dlogits = softmax - onehot + 2 z lse softmax
    if z_loss:
      p_CV = p_CV * (1 + 2 * z_loss * lse_C[:, None])
    dlogits_CV = ((p_CV - onehot_CV) * weight_C[:, None]).astype(x_CD.dtype)
    dx_CD = jnp.einsum("cv,vd->cd", dlogits_CV, w_VD.astype(x_CD.dtype), preferred_element_type=acc)
    dw_VD = dw_VD + jnp.einsum("cv,cd->vd", dlogits_CV, x_CD, preferred_element_type=acc)
    sums = jax.tree.map(jnp.add, sums, _sums(logits_CV, lse_C, y_C, weight_C, vocab_size,
                                                 z_loss))
    return (sums, dw_VD), dx_CD

  init = (_zeros(acc), jnp.zeros(w_VD.shape, acc))
  (out, dw_VD), dx_nCD = jax.lax.scan(body, init, _chunks(x_ND, y_N, weight_N, chunk))
  dx_ND = dx_nCD.reshape(-1, D)[:N].astype(x_ND.dtype)
  return out, (dx_ND, dw_VD.astype(w_VD.dtype), y_N, weight_N)


def _bwd(vocab_size, chunk, z_loss, residuals, g):
  del vocab_size, chunk, z_loss
  dx_ND, dw_VD, y_N, weight_N = residuals
  g_total = g[0]  # the sums' cotangents are dropped: they carry no gradient
  return ((g_total * dx_ND).astype(dx_ND.dtype), (g_total * dw_VD).astype(dw_VD.dtype), None,
          jnp.zeros_like(weight_N))


weighted_loss_sums.defvjp(_fwd, _bwd)
