"""Autoregressive generation with a fixed-size KV cache; the whole decode loop is one jit.

    cache K, V: (L, B, C, H, K) with C = P + N, zeros to begin with
    prefill:  run the whole prompt (B, P) through the blocks at positions 0..P-1,
              writing K and V there; sample new token 0 from the last position's logits
    step i:   run new token i (B, 1) at position P + i, write K and V there with
              lax.dynamic_update_slice, attend over cache positions <= P + i,
              sample new token i + 1                       (lax.scan over i)

The blocks are model.py's ``embed`` at the tokens' positions, ``block_forward`` with a cached
attention hook (branches.py's ``qkv_project`` at the absolute positions ``pos..pos+T-1``, so
rotary queries and keys are rotated where they stand, its ``out_project``, attention.py's
``causal_attend``) and ``unembed``, so pre-/post-norm, every activation, ``qk_norm``, RoPE
and muP's scales behave exactly as in ``model.forward``; the layer loop is a ``lax.scan``
over the stacked block params (``model.scan_layers``) with the per-layer caches as xs and the
updated caches as ys.
Attention always uses the XLA ``causal_attend`` path (``cfg.attention_impl`` is
ignored here: the cache needs an explicit position mask).

There is no sliding window: prompt plus new tokens must fit in ``cfg.block_size``
(the learned position table has no rows beyond it; a rotary model was never trained
beyond it, so the same limit holds), and ``generate`` says so before
compiling anything rather than silently dropping the start of the context.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import attention
from andrea_jax import branches
from andrea_jax import errors
from andrea_jax import model
from andrea_jax.model_config import ModelConfig, Params, compute_dtype

Cache = tuple[jax.Array, jax.Array]  # (k_LBCHK, v_LBCHK)


# ----------------------------------------------------------------------------- the cached model


def init_cache(cfg: ModelConfig, batch: int, length: int) -> Cache:
  """Zeroed K and V caches ``(L, B, C, H, K)`` in the compute dtype."""
  shape = (cfg.n_layer, batch, length, cfg.n_head, cfg.head_dim)
  zeros = jnp.zeros(shape, compute_dtype(cfg))
  return zeros, zeros


def _blocks_cached(params: Params, x_BTD: jax.Array, cache: Cache, pos: jax.Array | int,
                   cfg: ModelConfig) -> tuple[jax.Array, Cache]:
  """All blocks for ``T`` tokens at positions ``pos..pos+T-1``, reading and writing the cache."""
  B, T, _ = x_BTD.shape
  C = cache[0].shape[2]
  # Query at absolute position pos + t sees cache slots 0..pos + t: its own prefix and
  # itself; the slots after it are still zeros (or stale) and are masked out.
  mask_BTC = jnp.broadcast_to(
      jnp.arange(C)[None, :] <= (pos + jnp.arange(T))[:, None], (B, T, C))

  def layer(x_BTD, block, index, cache_l):
    k_BCHK, v_BCHK = cache_l
    written = {}

    def cached_attention(h_BTD, attn):
      q, k, v = branches.qkv_project(h_BTD, attn, cfg, pos + jnp.arange(T))  # rope: absolute positions
      start = (0, pos, 0, 0)
      written["k"] = jax.lax.dynamic_update_slice(k_BCHK, k.astype(k_BCHK.dtype), start)
      written["v"] = jax.lax.dynamic_update_slice(v_BCHK, v.astype(v_BCHK.dtype), start)
      o_BTHK = attention.causal_attend(q, written["k"], written["v"], mask_BTC)
      return branches.out_project(o_BTHK, attn, cfg)

    # The model's own block; its attention branch runs exactly once, so `written` is set.
    x_BTD = model.block_forward(block, x_BTD, cfg, attn_fn=cached_attention, layer=index)
    return x_BTD, (written["k"], written["v"])

  return model.scan_layers(layer, x_BTD, params["blocks"], cfg, cache)  # the new cache as ys


def forward_cached(params: Params, tokens_BT: jax.Array, cache: Cache, pos: jax.Array | int,
                   cfg: ModelConfig) -> tuple[jax.Array, Cache]:
  """Logits ``(B, T, V)`` of tokens at positions ``pos..pos+T-1`` given the cache, and the new cache.

  With an empty cache and ``pos=0`` this equals ``model.forward``; feeding a sequence in
  chunks at increasing ``pos`` gives the same logits as feeding it whole.
  """
  x_BTD = model.embed(params, tokens_BT, cfg, pos)
  x_BTD, cache = _blocks_cached(params, x_BTD, cache, pos, cfg)
  return model.unembed(params, x_BTD, cfg), cache


# ----------------------------------------------------------------------------- sampling


def filter_logits(logits_BV: jax.Array, top_k: int | jax.Array = 0,
                  top_p: float | jax.Array = 1.0) -> jax.Array:
  """Set logits outside the top-k, then outside the top-p nucleus, to -inf.

  Tokens are ranked by logit with ties broken towards the lower id (a stable sort), so
  exactly ``min(top_k, V)`` tokens survive top-k. Top-p keeps the shortest ranked prefix
  whose probability (renormalised after top-k) reaches ``top_p``; the most likely token
  always survives. ``top_k=0`` and ``top_p=1.0`` disable the filters. The settings may
  be traced values; Python numbers that disable a filter skip its work (and the sort).
  """
  V = logits_BV.shape[-1]
  k_off = isinstance(top_k, (int, np.integer)) and (top_k == 0 or top_k >= V)
  p_off = isinstance(top_p, (int, float, np.number)) and top_p >= 1.0
  if k_off and p_off:
    return logits_BV
  order_BV = jnp.argsort(-logits_BV, axis=-1, stable=True)
  sorted_BV = jnp.take_along_axis(logits_BV, order_BV, axis=-1)
  rank_V = jnp.arange(V)
  keep_BV = jnp.ones(sorted_BV.shape, bool)
  if not k_off:
    keep_BV = keep_BV & ((rank_V < top_k) | (top_k == 0))
    sorted_BV = jnp.where(keep_BV, sorted_BV, -jnp.inf)
  if not p_off:
    probs_BV = jax.nn.softmax(sorted_BV.astype(jnp.float32), axis=-1)
    mass_before_BV = jnp.cumsum(probs_BV, axis=-1) - probs_BV
    keep_BV = keep_BV & ((mass_before_BV < top_p) | (rank_V == 0))  # the best token stays
  keep_BV = jnp.take_along_axis(keep_BV, jnp.argsort(order_BV, axis=-1), axis=-1)
  return jnp.where(keep_BV, logits_BV, -jnp.inf)


def sample_logits(logits_BV: jax.Array, key: jax.Array, temperature: float | jax.Array = 1.0,
                  top_k: int | jax.Array = 0, top_p: float | jax.Array = 1.0,
                  greedy: bool = False) -> jax.Array:
  """One token id per row: argmax when ``greedy``, else a temperature-scaled, filtered sample."""
  if greedy:
    return jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
  logits_BV = filter_logits(logits_BV.astype(jnp.float32) / temperature, top_k, top_p)
  return jax.random.categorical(key, logits_BV, axis=-1).astype(jnp.int32)


# ----------------------------------------------------------------------------- the decode loop


@functools.partial(jax.jit, static_argnames=("cfg", "max_new_tokens", "greedy", "use_top_k",
                                             "use_top_p", "return_logits"))
def _decode(params: Params, prompt_BP: jax.Array, key: jax.Array, temperature: jax.Array,
            top_k: jax.Array, top_p: jax.Array, *, cfg: ModelConfig, max_new_tokens: int,
            greedy: bool, use_top_k: bool, use_top_p: bool, return_logits: bool = False):
  """New tokens ``(B, N)`` (and, for tests, the logits each was drawn from, ``(B, N, V)``).

  Only the kind of sampling is static; the values of temperature, top_k and top_p are
  traced, so sweeping them reuses one executable.
  """
  B, P = prompt_BP.shape
  N = max_new_tokens
  keys = jax.random.split(key, N)
  sample = functools.partial(sample_logits, temperature=temperature, greedy=greedy,
                             top_k=top_k if use_top_k else 0, top_p=top_p if use_top_p else 1.0)

  x_BPD = model.embed(params, prompt_BP, cfg)
  x_BPD, cache = _blocks_cached(params, x_BPD, init_cache(cfg, B, P + N), 0, cfg)
  # Only the last prompt position predicts a new token; skip the (P, V) unembedding.
  logits_BV = model.unembed(params, x_BPD[:, -1:], cfg)[:, 0]
  first_B = sample(logits_BV, keys[0])

  def step(carry, xs):
    cache, token_B = carry
    i, key_i = xs  # token_B is new token i, at position P + i; predict token i + 1
    x_B1D = model.embed(params, token_B[:, None], cfg, P + i)
    x_B1D, cache = _blocks_cached(params, x_B1D, cache, P + i, cfg)
    logits_BV = model.unembed(params, x_B1D, cfg)[:, 0]
    next_B = sample(logits_BV, key_i)
    return (cache, next_B), (next_B, logits_BV if return_logits else None)

  _, (rest_SB, rest_logits) = jax.lax.scan(step, (cache, first_B), (jnp.arange(N - 1), keys[1:]))
  new_BN = jnp.concatenate([first_B[:, None], rest_SB.T], axis=1)
  if not return_logits:
    return new_BN
  logits_BNV = jnp.concatenate([logits_BV[:, None], jnp.swapaxes(rest_logits, 0, 1)], axis=1)
  return new_BN, logits_BNV


def _is_int(x: Any) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _check_request(prompt: Any, cfg: ModelConfig, max_new_tokens: Any, temperature: Any,
                   top_k: Any, top_p: Any) -> np.ndarray:
  """Validate everything in Python, before any tracing; return the prompt as int32 numpy."""
  if not _is_int(max_new_tokens) or max_new_tokens < 1:
    raise errors.InputError(f"max_new_tokens={max_new_tokens!r}: expected an integer >= 1")
  if not isinstance(temperature, (int, float, np.number)) or isinstance(temperature, bool) \
      or not math.isfinite(temperature) or temperature < 0:
    raise errors.InputError(f"temperature={temperature!r}: expected a finite number >= 0 (0 means greedy)")
  if not _is_int(top_k) or top_k < 0:
    raise errors.InputError(f"top_k={top_k!r}: expected an integer >= 0 (0 disables top-k)")
  if not isinstance(top_p, (int, float, np.number)) or isinstance(top_p, bool) \
      or not 0 < top_p <= 1:
    raise errors.InputError(f"top_p={top_p!r}: expected a number in (0, 1] (1 disables nucleus sampling)")
  shape = np.shape(prompt)
  if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
    raise errors.InputError(f"prompt has shape {shape}: expected (batch, prompt_length) with both >= 1; "
                     f"for an empty prompt start from the end-of-text token")
  P, N, T = shape[1], int(max_new_tokens), cfg.block_size
  if P + N > T:
    fixes = []
    if N < T:
      fixes.append(f"shorten the prompt to at most {T - N} tokens")
    if P < T:
      fixes.append(f"ask for at most {T - P} new tokens")
    fix = " or ".join(fixes) or f"make prompt length + max_new_tokens at most {T}"
    raise errors.InputError(f"prompt length {P} + max_new_tokens {N} = {P + N} exceeds the context "
                     f"block_size={T} (generation has no sliding window): {fix}")
  model.check_tokens(prompt, cfg)
  return np.asarray(prompt, np.int32)


def generate(params: Params, cfg: ModelConfig, prompt_BP: Any, max_new_tokens: int,
             key: jax.Array, *, temperature: float = 1.0, top_k: int = 0,
             top_p: float = 1.0) -> jax.Array:
  """Continue each prompt by ``max_new_tokens`` tokens; returns ``(B, P + N)`` int32 ids.

  ``prompt_BP`` holds ``B`` prompts of equal length ``P >= 1``. ``temperature=0`` is
  greedy decoding (argmax; ``key`` is unused); otherwise logits are divided by the
  temperature, filtered by ``top_k`` (0: off) then ``top_p`` (1.0: off), and sampled.
  Sampling is a pure function of ``key``.

  Prefill and the whole token loop run in one jitted function, compiled once per
  (cfg, B, P, N, kind of sampling: greedy or not, top-k on or off, top-p on or off) and
  reused; the values of temperature, top_k and top_p are traced, so changing them does
  not recompile. There is no sliding window:
  ``P + max_new_tokens`` must be at most ``cfg.block_size``, else ``errors.InputError``.
  """
  prompt_BP = _check_request(prompt_BP, cfg, max_new_tokens, temperature, top_k, top_p)
  new_BN = _decode(params, jnp.asarray(prompt_BP), key,
                   **_decode_settings(cfg, max_new_tokens, temperature, top_k, top_p))
  return jnp.concatenate([jnp.asarray(prompt_BP), new_BN], axis=1)


def _decode_settings(cfg, max_new_tokens, temperature, top_k, top_p) -> dict:
  """``_decode``'s arguments after the key: traced values, then the static kind of sampling."""
  greedy = temperature == 0
  use_top_k = not greedy and 0 < top_k < cfg.vocab_size
  use_top_p = not greedy and top_p < 1.0
  return dict(temperature=np.float32(1.0 if greedy else temperature),
              top_k=np.int32(top_k if use_top_k else 0), top_p=np.float32(top_p),
              cfg=cfg, max_new_tokens=int(max_new_tokens), greedy=bool(greedy),
              use_top_k=bool(use_top_k), use_top_p=bool(use_top_p))


def _prompt_ids(tok: Any, prompt: str) -> list[int]:
  """``prompt``'s token ids; an empty prompt is the end-of-text token."""
  from andrea_jax import tokenizer as tokenizer_lib  # lazy: `tokenizers` only when needed
  return tokenizer_lib.encode(tok, prompt) or [tokenizer_lib.eot_id(tok)]


def check_text_request(cfg: ModelConfig, tok: Any, prompt: str, max_new_tokens: int, *,
                       temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> None:
  """Refuse what ``generate_text`` would refuse, without a model (``errors.InputError``)."""
  _check_request(np.asarray([_prompt_ids(tok, prompt)], np.int32), cfg, max_new_tokens,
                 temperature, top_k, top_p)


def generate_text(params: Params, cfg: ModelConfig, tok: Any, prompt: str, max_new_tokens: int,
                  key: jax.Array, **sampling) -> str:
  """The text continuing ``prompt`` (the continuation only); ``sampling`` as in ``generate``.

  An empty prompt starts from the end-of-text token, as in training where documents
  follow one.
  """
  from andrea_jax import tokenizer as tokenizer_lib  # lazy: `tokenizers` only when needed
  ids = _prompt_ids(tok, prompt)
  tokens_BT = generate(params, cfg, np.asarray([ids], np.int32), max_new_tokens, key, **sampling)
  return tokenizer_lib.decode(tok, np.asarray(tokens_BT[0, len(ids):]).tolist())
