"""The attention kernels (andrea_jax/attention.py) and the platform-resolved "auto" settings."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from andrea_jax import attention
from andrea_jax import configdict
from andrea_jax import model
from experiments.configs import andrea120m, andrea480m


def small(**kw):
  base = dict(vocab_size=37, block_size=16, d_model=16, n_layer=2, n_head=2, attention_block=4)
  return model.ModelConfig(**{**base, **kw})


@pytest.mark.parametrize("block", [3, 5, 13, 128])
def test_blocked_and_flash_kernels_equal_the_masked_full_softmax_values_and_grads(block):
  # T = 13: blocks that do not divide it (3, 5), one as long (13), one longer (128).
  B, T, H, K = 2, 13, 3, 4
  q, k, v = (jax.random.normal(jax.random.key(i), (B, T, H, K)) for i in range(3))
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, T, T))
  # Jitted: one compile each instead of one per operation of the blocks' loops.
  full = jax.jit(lambda q, k, v: attention.causal_attend(q, k, v, mask))
  blocked = jax.jit(lambda q, k, v: attention.blocked_causal_attention(q, k, v, block))
  flash = jax.jit(lambda q, k, v: attention.flash_causal_attention(q, k, v, block))
  np.testing.assert_allclose(blocked(q, k, v), full(q, k, v), atol=1e-6)
  np.testing.assert_allclose(flash(q, k, v), full(q, k, v), atol=1e-6)
  grad = lambda f: jax.jit(jax.grad(lambda *a: jnp.sum(jnp.sin(f(*a))), argnums=(0, 1, 2)))(q, k, v)
  for g_blocked, g_flash, g_full in zip(grad(blocked), grad(flash), grad(full)):
    np.testing.assert_allclose(g_blocked, g_full, atol=1e-5)
    np.testing.assert_allclose(g_flash, g_full, atol=1e-5)


def dot_flops(fn, *args) -> float:
  """FLOPs of every matmul (``dot_general``) in ``fn``'s lowered StableHLO."""
  total = 0.0
  for line in jax.jit(fn).lower(*args).as_text().splitlines():
    found = re.search(r"stablehlo\.dot_general .*contracting_dims = \[([\d, ]*)\] x .* : "
                      r"\(tensor<([\dx]+)x\w+>, .*-> tensor<([\dx]+)x\w+>", line)
    if found:
      contracting, lhs, out = found.groups()
      lhs = [int(d) for d in lhs.split("x")]
      k = np.prod([lhs[int(i)] for i in contracting.split(",")])
      total += 2.0 * np.prod([int(d) for d in out.split("x")]) * k
  return total


@pytest.mark.parametrize("impl", ["xla", "xla_flash"])
def test_the_kernels_skip_the_key_blocks_above_the_diagonal(impl):
  """Forward and backward: query block i multiplies key blocks 0..i only, so with n blocks
  the matmuls do n(n+1)/2 of the n^2 blocks of one block as wide as the sequence."""
  B, T, H, K, n = 1, 256, 2, 8, 4
  q, k, v = (jax.random.normal(jax.random.key(i), (B, T, H, K)) for i in range(3))
  flops = lambda block: dot_flops(jax.grad(lambda *a: jnp.sum(
      attention.causal_attention(*a, impl, block)), argnums=(0, 1, 2)), q, k, v)
  assert flops(T) > 0
  assert flops(T // n) / flops(T) == pytest.approx((n + 1) / (2 * n))


# What "auto" is on each platform: (compute_dtype, attention_impl).
AUTO_CHOICE = {"cpu": ("float32", "xla_flash"), "gpu": ("bfloat16", "cudnn"),
               "tpu": ("bfloat16", "xla_flash")}


def test_auto_resolves_to_float32_and_the_cpu_kernel_on_cpu(capsys):
  cfg = model.resolve_auto(small(compute_dtype="auto", attention_impl="auto"), platform="cpu")
  assert (cfg.compute_dtype, cfg.attention_impl) == AUTO_CHOICE["cpu"] == ("float32", "xla_flash")
  out = capsys.readouterr().out
  assert "compute_dtype=float32" in out and "attention_impl=xla_flash" in out


def test_auto_without_a_platform_is_the_choice_for_the_default_backend():
  cfg = model.resolve_auto(small(compute_dtype="auto", attention_impl="auto"), verbose=False)
  assert (cfg.compute_dtype, cfg.attention_impl) == AUTO_CHOICE[jax.default_backend()]


def test_auto_resolves_to_bfloat16_and_cudnn_on_gpu():
  cfg = model.resolve_auto(small(compute_dtype="auto", attention_impl="auto"), platform="gpu")
  assert (cfg.compute_dtype, cfg.attention_impl) == AUTO_CHOICE["gpu"] == ("bfloat16", "cudnn")
  # cuDNN's kernel takes 16-bit inputs only: explicit float32 on a GPU gets the XLA path.
  cfg = model.resolve_auto(small(compute_dtype="float32", attention_impl="auto"), platform="gpu")
  assert (cfg.compute_dtype, cfg.attention_impl) == ("float32", "xla_flash")


@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_explicit_values_win_over_auto(platform, capsys):
  cfg = small(compute_dtype="float16", attention_impl="xla", remat_policy="full")
  assert model.resolve_auto(cfg, platform=platform) is cfg
  assert capsys.readouterr().out == ""  # nothing resolved, nothing printed
  cfg = model.resolve_auto(small(compute_dtype="bfloat16", attention_impl="auto"), platform=platform)
  assert cfg.compute_dtype == "bfloat16"
  cfg = model.resolve_auto(small(compute_dtype="auto", attention_impl="xla"), platform=platform)
  assert cfg.attention_impl == "xla"


def test_auto_remat_keeps_the_weight_matmuls_on_cpu_and_recomputes_nothing_on_gpu(capsys):
  # On a CPU the backward recomputes each block's elementwise work and attention from the
  # saved weight-matmul outputs (docs/performance.md: as fast, a quarter of the memory).
  cpu = model.resolve_auto(small(), platform="cpu")
  assert cpu.remat_policy == "dots_with_no_batch_dims_saveable"
  assert "remat_policy=dots_with_no_batch_dims_saveable" in capsys.readouterr().out
  assert model.resolve_auto(small(), platform="gpu").remat_policy == "none"
  assert model.resolve_auto(small(remat_policy="none"), platform="cpu").remat_policy == "none"
  assert configdict.group(model.ModelConfig, vocab_size=37, block_size=16, d_model=16,
                          n_layer=1, n_head=2).remat_policy == "auto"
  # It reaches the traced model: the layer scan's body is a checkpoint with that policy.
  cfg = small(attention_impl="xla_flash")
  params = model.init_params(cfg, jax.random.key(0))
  tokens = jnp.zeros((1, 8), jnp.int32)
  jaxpr = str(jax.make_jaxpr(jax.grad(lambda p: model.loss_fn(p, tokens, tokens, cfg)))(params))
  if jax.default_backend() == "cpu":
    assert "remat" in jaxpr and "DotsSaveable(only_if_no_batch_dims=True)" in jaxpr


def test_one_attention_default_and_auto_in_the_gpu_configs():
  fields = {f.name: f.default for f in dataclasses.fields(model.ModelConfig)}
  group = configdict.group(model.ModelConfig, vocab_size=37, block_size=16, d_model=16, n_layer=1,
                           n_head=2)
  assert group.attention_impl == fields["attention_impl"] == "auto"
  assert group.compute_dtype == fields["compute_dtype"]
  for module in (andrea120m, andrea480m):
    m = module.get_config().model
    assert (m.compute_dtype, m.attention_impl) == ("auto", "auto")


def test_a_model_left_at_auto_runs_the_platform_kernel_at_its_dtype(monkeypatch):
  # A config that reaches the model with "auto" left: the kernel that runs, and the dtype of
  # its queries, are the default backend's choice (not, say, the "xla" fallback).
  ran = []
  kernel = attention.causal_attention
  monkeypatch.setattr(attention, "causal_attention",
                      lambda q, k, v, impl, *rest: ran.append((str(q.dtype), impl)) or
                      kernel(q, k, v, impl, *rest))
  auto = small(compute_dtype="auto", attention_impl="auto")
  params = model.init_params(model.resolve_auto(auto, verbose=False), jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 16), 0, 37)
  logits = model.forward(params, tokens, auto)
  assert ran and set(ran) == {AUTO_CHOICE[jax.default_backend()]}, ran
  assert logits.shape == (2, 16, 37) and np.all(np.isfinite(np.asarray(logits, np.float32)))
