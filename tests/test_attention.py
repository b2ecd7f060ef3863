"""The attention kernels (andrea_jax/attention.py) and the platform-resolved "auto" settings."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from andrea_jax import attention
from andrea_jax import model
from experiments.configs import andrea120m, andrea480m, common


def small(**kw):
  base = dict(vocab_size=37, block_size=16, d_model=16, n_layer=2, n_head=2, attention_block=4)
  return model.ModelConfig(**{**base, **kw})


@pytest.mark.parametrize("kernel", ["blocked", "flash"])
def test_kernels_equal_the_masked_full_softmax_values_and_grads(kernel):
  B, T, H, K = 2, 11, 2, 4
  q, k, v = (jax.random.normal(jax.random.key(i), (B, T, H, K)) for i in range(3))
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, T, T))
  full = lambda q, k, v: attention.causal_attend(q, k, v, mask)
  fn = {"blocked": lambda q, k, v: attention.blocked_causal_attention(q, k, v, 4),
        "flash": lambda q, k, v: attention.flash_causal_attention(q, k, v, 4)}[kernel]
  np.testing.assert_allclose(fn(q, k, v), full(q, k, v), atol=1e-6)
  grad = lambda f: jax.grad(lambda *a: jnp.sum(jnp.sin(f(*a))), argnums=(0, 1, 2))(q, k, v)
  for g, g_full in zip(grad(fn), grad(full)):
    np.testing.assert_allclose(g, g_full, atol=1e-5)


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


def test_auto_resolves_to_float32_and_the_cpu_kernel_on_cpu(capsys):
  cfg = model.resolve_auto(small(compute_dtype="auto", attention_impl="auto"), platform="cpu")
  assert (cfg.compute_dtype, cfg.attention_impl) == ("float32", "xla_flash")
  out = capsys.readouterr().out
  assert "compute_dtype=float32" in out and "attention_impl=xla_flash" in out
  # This machine has no GPU: the default platform is the CPU.
  assert jax.default_backend() == "cpu"
  cfg = model.resolve_auto(small(compute_dtype="auto", attention_impl="auto"), verbose=False)
  assert (cfg.compute_dtype, cfg.attention_impl) == ("float32", "xla_flash")


def test_auto_resolves_to_bfloat16_and_cudnn_on_gpu():
  cfg = model.resolve_auto(small(compute_dtype="auto", attention_impl="auto"), platform="gpu")
  assert (cfg.compute_dtype, cfg.attention_impl) == ("bfloat16", "cudnn")
  # cuDNN's kernel takes 16-bit inputs only: explicit float32 on a GPU gets the XLA path.
  cfg = model.resolve_auto(small(compute_dtype="float32", attention_impl="auto"), platform="gpu")
  assert (cfg.compute_dtype, cfg.attention_impl) == ("float32", "xla_flash")


@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_explicit_values_win_over_auto(platform, capsys):
  cfg = small(compute_dtype="float16", attention_impl="xla")
  assert model.resolve_auto(cfg, platform=platform) is cfg
  assert capsys.readouterr().out == ""  # nothing resolved, nothing printed
  cfg = model.resolve_auto(small(compute_dtype="bfloat16", attention_impl="auto"), platform=platform)
  assert cfg.compute_dtype == "bfloat16"
  cfg = model.resolve_auto(small(compute_dtype="auto", attention_impl="xla"), platform=platform)
  assert cfg.attention_impl == "xla"


def test_one_attention_default_and_auto_in_the_gpu_configs():
  fields = {f.name: f.default for f in dataclasses.fields(model.ModelConfig)}
  group = common.model_group(vocab_size=37, block_size=16, d_model=16, n_layer=1, n_head=2)
  assert group.attention_impl == fields["attention_impl"] == "auto"
  assert group.compute_dtype == fields["compute_dtype"]
  for module in (andrea120m, andrea480m):
    m = module.get_config().model
    assert (m.compute_dtype, m.attention_impl) == ("auto", "auto")


def test_unresolved_auto_runs_the_platform_path():
  # A config that reaches the model with "auto" left computes as resolve_auto would choose.
  auto = small(compute_dtype="auto", attention_impl="auto")
  resolved = model.resolve_auto(auto, verbose=False)
  params = model.init_params(resolved, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (2, 16), 0, 37)
  np.testing.assert_array_equal(model.forward(params, tokens, auto),
                                model.forward(params, tokens, resolved))
