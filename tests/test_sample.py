"""Tests of KV-cached generation against re-running the full model, sampling filters, and errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from andrea_jax import model, sample
from andrea_jax.model import ModelConfig

TINY = ModelConfig(vocab_size=61, block_size=32, d_model=32, n_layer=2, n_head=4)


def tiny(**changes):
  return ModelConfig(**{**TINY.__dict__, **changes})


def lively_params(cfg, seed=0):
  # GPT-2 init is so flat that greedy decoding just repeats a token, which a broken
  # cache would reproduce too; large random weights give varied, prefix-dependent output.
  params = model.init_params(cfg, jax.random.key(seed))
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
  return treedef.unflatten([x + 0.3 * jax.random.normal(k, x.shape, x.dtype)
                            for x, k in zip(leaves, keys)])


_forward = jax.jit(model.forward, static_argnums=2)


def prompt(cfg, B=2, P=4, seed=3):
  return np.asarray(jax.random.randint(jax.random.key(seed), (B, P), 0, cfg.vocab_size), np.int32)


def reference_logits(params, cfg, tokens_BT):
  """``model.forward`` over the whole sequence, right-padded to block_size.

  Padding to one length compiles forward once; causality means the padding cannot
  change the logits at the real positions.
  """
  B, T = tokens_BT.shape
  padded = np.zeros((B, cfg.block_size), np.int32)
  padded[:, :T] = tokens_BT
  return np.asarray(_forward(params, padded, cfg))[:, :T]


def greedy_by_full_forward(params, cfg, prompt_BP, n):
  tokens = np.asarray(prompt_BP)
  for _ in range(n):
    next_B = reference_logits(params, cfg, tokens)[:, -1].argmax(-1)
    tokens = np.concatenate([tokens, next_B[:, None].astype(np.int32)], axis=1)
  return tokens


# ----------------------------------------------------------------------------- the cache is exact


@pytest.mark.parametrize("norm,activation,P,rule", [("pre", "gelu_tanh", 1, {}), ("pre", "swiglu", 5, {}),
                                               ("post", "relu", 1, {}), ("post", "gelu", 5, {}),
                                               ("pre", "gelu_tanh", 3, dict(depth_rule="completep", base_depth=1))])
def test_greedy_with_cache_equals_greedy_by_full_forward(norm, activation, P, rule):
  cfg = tiny(norm=norm, activation=activation, **rule)
  params = lively_params(cfg)
  prompt_BP = prompt(cfg, B=2, P=P)
  got = sample.generate(params, cfg, prompt_BP, 10, jax.random.key(0), temperature=0)
  expected = greedy_by_full_forward(params, cfg, prompt_BP, 10)
  assert got.shape == (2, P + 10) and got.dtype == jnp.int32
  np.testing.assert_array_equal(got, expected)
  # Varied output, so the comparison above could catch a stale or misplaced cache entry.
  assert len(np.unique(np.asarray(got)[:, P:])) >= 3


def test_logits_of_prefill_and_steps_match_forward():
  # With the query/key norms and muP's scales: the cache path reads them from branches.py too.
  cfg = tiny(norm="post", activation="swiglu", tie_embeddings=False, qk_norm=True,
             parametrization="mup", base_width=8)
  params = lively_params(cfg)
  prompt_BP, N = prompt(cfg, B=2, P=6), 8
  new_BN, logits_BNV = sample._decode(params, prompt_BP, jax.random.key(0), return_logits=True,
                                      **sample._decode_settings(cfg, N, 0.0, 0, 1.0))
  tokens = np.concatenate([prompt_BP, np.asarray(new_BN)], axis=1)
  # The logits that chose new token j are forward's at position P - 1 + j.
  expected = reference_logits(params, cfg, tokens)[:, 5:5 + N]
  np.testing.assert_allclose(logits_BNV, expected, rtol=1e-4, atol=1e-4)


def test_forward_cached_in_chunks_equals_forward():
  # Chunks of several tokens at pos > 0 exercise the mask beyond the one-token step.
  cfg = tiny(norm="post")
  params = lively_params(cfg)
  tokens_BT = prompt(cfg, B=2, P=9)

  @jax.jit  # one compile for all three chunks
  def in_chunks(params, tokens_BT):
    cache, chunks = sample.init_cache(cfg, 2, 12), []
    for start, stop in [(0, 4), (4, 5), (5, 9)]:
      logits, cache = sample.forward_cached(params, tokens_BT[:, start:stop], cache, start, cfg)
      chunks.append(logits)
    return jnp.concatenate(chunks, axis=1), cache

  logits, cache = in_chunks(params, tokens_BT)
  np.testing.assert_allclose(logits, reference_logits(params, cfg, tokens_BT), rtol=1e-4, atol=1e-4)
  assert cache[0].shape == (cfg.n_layer, 2, 12, cfg.n_head, cfg.head_dim)
  assert not np.any(cache[0][:, :, 9:]) and np.all(np.any(cache[0][:, :, :9], axis=(-1, -2)))


def test_one_new_token_equals_argmax_of_forward():
  cfg = TINY
  params = lively_params(cfg)
  prompt_BP = prompt(cfg, B=3, P=7)
  got = sample.generate(params, cfg, prompt_BP, 1, jax.random.key(0), temperature=0)
  np.testing.assert_array_equal(got[:, -1], reference_logits(params, cfg, prompt_BP)[:, -1].argmax(-1))


# ----------------------------------------------------------------------------- sampling

N_SAMPLED = 12  # with prompt(TINY): one shape for the sampling tests, so they share compiles


def test_filter_logits_top_k_keeps_exactly_k_and_breaks_ties_towards_lower_ids():
  logits = jnp.array([[1.0, 3.0, 3.0, 3.0, 0.0], [5.0, 4.0, 3.0, 2.0, 1.0]])
  kept = np.isfinite(sample.filter_logits(logits, top_k=2))
  np.testing.assert_array_equal(kept, [[0, 1, 1, 0, 0], [1, 1, 0, 0, 0]])
  np.testing.assert_array_equal(np.isfinite(sample.filter_logits(logits, top_k=99)), True)


def test_filter_logits_top_p_keeps_the_smallest_prefix_reaching_p():
  logits = jnp.log(jnp.array([[0.15, 0.5, 0.05, 0.3]]))
  kept = lambda **kw: np.isfinite(sample.filter_logits(logits, **kw))[0].tolist()
  assert kept(top_p=0.4) == [False, True, False, False]
  assert kept(top_p=0.7) == [False, True, False, True]
  assert kept(top_p=0.9) == [True, True, False, True]
  assert kept(top_p=1e-9) == [False, True, False, False]  # the best token always survives
  # top-p after top-k renormalises over the k survivors: 0.5 / 0.8 > 0.6.
  assert kept(top_k=2, top_p=0.6) == [False, True, False, False]
  assert kept(top_k=2, top_p=0.7) == [False, True, False, True]
  # Equal logits give exact quarters: a prefix reaching exactly p ends there, ties by id.
  flat = jnp.zeros((1, 4))
  np.testing.assert_array_equal(np.isfinite(sample.filter_logits(flat, top_p=0.5)), [[1, 1, 0, 0]])


def test_sampling_is_a_function_of_the_key():
  cfg, params = TINY, lively_params(TINY)
  prompt_BP = prompt(cfg)
  draw = lambda seed: np.asarray(sample.generate(params, cfg, prompt_BP, N_SAMPLED, jax.random.key(seed)))
  np.testing.assert_array_equal(draw(1), draw(1))
  assert not np.array_equal(draw(1), draw(2))
  np.testing.assert_array_equal(draw(1)[:, :4], prompt_BP)


@pytest.mark.parametrize("settings", [dict(top_k=1), dict(top_p=1e-6), dict(temperature=0.5, top_k=1)])
def test_degenerate_filters_equal_greedy(settings):
  cfg, params = TINY, lively_params(TINY)
  prompt_BP = prompt(cfg)
  greedy = sample.generate(params, cfg, prompt_BP, N_SAMPLED, jax.random.key(0), temperature=0)
  got = sample.generate(params, cfg, prompt_BP, N_SAMPLED, jax.random.key(7), **settings)
  np.testing.assert_array_equal(got, greedy)


def top_k_ranks(params, cfg, tokens, P):
  """Rank (0 = most likely under forward) of each new token among its position's logits."""
  logits = reference_logits(params, cfg, tokens)[:, P - 1:-1]
  new = tokens[:, P:]
  return (logits > np.take_along_axis(logits, new[..., None], -1)).sum(-1)


def test_top_k_samples_lie_in_the_k_most_likely_tokens():
  cfg, params = TINY, lively_params(TINY)
  prompt_BP, k = prompt(cfg), 3
  # A hot temperature spreads the mass, so without the filter tokens fall outside the top 3.
  draw = lambda **kw: np.asarray(sample.generate(params, cfg, prompt_BP, N_SAMPLED, jax.random.key(5),
                                                 temperature=3.0, **kw))
  assert np.all(top_k_ranks(params, cfg, draw(top_k=k), 4) < k)
  assert np.any(top_k_ranks(params, cfg, draw(), 4) >= k)


# ----------------------------------------------------------------------------- compilation


def test_second_call_with_the_same_shapes_does_not_retrace(monkeypatch):
  traces = []
  real = sample._blocks_cached
  # Runs only while jit traces _decode; a cached executable never calls Python.
  monkeypatch.setattr(sample, "_blocks_cached", lambda *a: traces.append(1) or real(*a))
  cfg, params = TINY, lively_params(TINY)
  B, P, N = 3, 11, 6  # shapes no other test uses, so the first call must trace
  sample.generate(params, cfg, prompt(cfg, B, P, seed=1), N, jax.random.key(0), top_k=4)
  assert traces, "the first call should have traced _decode"
  first = len(traces)
  sample.generate(params, cfg, prompt(cfg, B, P, seed=2), N, jax.random.key(1), top_k=4)
  # New weights and new values of the sampling settings are traced arguments too.
  sample.generate(lively_params(cfg, seed=9), cfg, prompt(cfg, B, P, seed=2), N,
                  jax.random.key(2), top_k=9, temperature=0.3)
  assert len(traces) == first


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("P,N,match", [
    (30, 5, r"prompt length 30 \+ max_new_tokens 5 = 35 exceeds the context block_size=32.*"
            r"shorten the prompt to at most 27 tokens or ask for at most 2 new tokens"),
    (40, 1, r"= 41 exceeds .*block_size=32.*shorten the prompt to at most 31 tokens$"),
    (32, 1, r"shorten the prompt to at most 31 tokens$"),
    (2, 31, r"ask for at most 30 new tokens$"),
])
def test_too_long_for_the_context_names_the_numbers_and_the_fix(P, N, match):
  with pytest.raises(ValueError, match=match):
    sample.generate(None, TINY, np.zeros((1, P), np.int32), N, jax.random.key(0))


@pytest.mark.parametrize("kwargs,match", [
    (dict(max_new_tokens=0), r"max_new_tokens=0"),
    (dict(max_new_tokens=2.0), r"max_new_tokens=2.0"),
    (dict(temperature=-0.5), r"temperature=-0.5"),
    (dict(temperature=float("nan")), r"temperature=nan"),
    (dict(top_k=-1), r"top_k=-1"),
    (dict(top_k=2.5), r"top_k=2.5"),
    (dict(top_p=0.0), r"top_p=0.0"),
    (dict(top_p=1.5), r"top_p=1.5"),
])
def test_bad_sampling_settings_name_the_value(kwargs, match):
  kwargs = {"max_new_tokens": 3, **kwargs}
  n = kwargs.pop("max_new_tokens")
  with pytest.raises(ValueError, match=match):
    sample.generate(None, TINY, np.zeros((1, 2), np.int32), n, jax.random.key(0), **kwargs)


@pytest.mark.parametrize("bad,match", [
    (np.array([[1, 61]]), r"token id 61 is outside \[0, 61\)"),
    (np.array([[-1, 3]]), r"token id -1"),
    (np.array([[1.0, 2.0]]), r"dtype float64"),
    (np.array([1, 2]), r"shape \(2,\)"),
    (np.zeros((1, 0), np.int32), r"shape \(1, 0\)"),
])
def test_bad_prompts_are_rejected_before_compiling(bad, match):
  # params=None: any attempt to trace the model would fail with a different error.
  with pytest.raises(ValueError, match=match):
    sample.generate(None, TINY, bad, 2, jax.random.key(0))


# ----------------------------------------------------------------------------- text


def test_generate_text_returns_the_decoded_continuation_only():
  from andrea_jax import tokenizer as tokenizer_lib
  tok = tokenizer_lib.train_tokenizer(["hello world"], 257)  # bytes + EOT
  cfg = tiny(vocab_size=257)
  params = lively_params(cfg)
  # Byte-level with no merges: "h" is one token, like EOT, so both calls share one compile.
  ids = tokenizer_lib.encode(tok, "h")
  assert len(ids) == 1
  for text, start in [("h", ids), ("", [tokenizer_lib.eot_id(tok)])]:  # "" starts from EOT
    tokens = sample.generate(params, cfg, np.array([start]), 5, jax.random.key(3), top_k=10)
    expected = tokenizer_lib.decode(tok, np.asarray(tokens[0, 1:]).tolist())
    got = sample.generate_text(params, cfg, tok, text, 5, jax.random.key(3), top_k=10)
    assert isinstance(got, str) and got == expected
