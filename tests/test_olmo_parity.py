"""Parity with OLMo-core (``ai2-olmo-core``, github.com/allenai/OLMo-core), a reference no
one here wrote: its transformer blocks and its whole ``Transformer``, given OUR weights, give
our block outputs and our logits in float32.

OLMo-core's block types (``olmo_core/nn/transformer/config.py``, ``TransformerBlockType``;
the classes in ``olmo_core/nn/transformer/block.py``) against our placements:

    default         TransformerBlock                  x + F(N(x))            norm="pre"
    default_scaled  LayerNormScaledTransformerBlock   x + F(N(x) / sqrt(l))  norm="pre",
                                                                             norm_depth_scaling
    reordered_norm  ReorderedNormTransformerBlock     x + N(F(x))            norm="reordered"
    peri_norm       PeriNormTransformerBlock          x + N_out(F(N(x)))     norm="peri"

each with OLMo-core's LayerNorm (with and without bias) and RMSNorm. The configuration is the
one both sides can build: SwiGLU (OLMo-core's ``FeedForward``, ``w2(silu(w1 x) * w3 x)``: our
fused ``w_in`` is gate | up), per-head QK LayerNorm before the rotation
(``use_head_qk_norm``), RoPE base 10000 in OLMo-core's ``complex`` form (it rotates adjacent
pairs ``(x_2i, x_2i+1)``, as ``branches.rope`` does; its ``default`` form rotates the halves
``(x_i, x_i+K/2)``, a different convention), a tied head. The whole model adds the
embedding norm (OLMo-core's ``embedding_norm``; ours ``ModelConfig.embedding_norm``,
``params["ln_emb"]``) and the final norm (OLMo-core's ``lm_head.norm``; ours ``ln_f``).

Every leaf is random (the norms' scales and biases too, not their init's ones and zeros), and
OLMo-core's modules take our tree through ``load_state_dict(strict=True)``: a norm we lack,
or one it lacks, is an error rather than an unchecked unit scale.

OLMo-core is an optional dependency (``requirements-interop.txt``, which the README's test
command and CI install); without it this module fails to import, with the fix, rather than
skipping.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from andrea_jax import model
from andrea_jax.model import ModelConfig

try:
  import torch
  from olmo_core.nn.attention import AttentionConfig
  from olmo_core.nn.feed_forward import FeedForwardConfig
  from olmo_core.nn.layer_norm import LayerNormConfig
  from olmo_core.nn.lm_head import LMHeadConfig
  from olmo_core.nn.rope import RoPEConfig
  from olmo_core.nn.transformer import TransformerBlockConfig, TransformerConfig
except ImportError as e:
  raise ImportError(f"tests/test_olmo_parity.py needs OLMo-core and torch ({e}): "
                    f"pip install -r requirements-interop.txt") from e

# OLMo-core's block type -> our placement.
BLOCKS = {"default": {"norm": "pre"},
          "default_scaled": {"norm": "pre", "norm_depth_scaling": True},
          "reordered_norm": {"norm": "reordered"},
          "peri_norm": {"norm": "peri"}}
# Norm type and bias (bias=False: no bias in any linear layer or norm; RMSNorm has none).
NORM_TYPES = {"layernorm": {"norm_type": "layernorm", "bias": True},
              "layernorm_nobias": {"norm_type": "layernorm", "bias": False},
              "rmsnorm": {"norm_type": "rmsnorm", "bias": False}}
BASE = dict(vocab_size=37, block_size=8, d_model=32, n_layer=2, n_head=2, activation="swiglu",
            position="rope", rope_base=10000.0, qk_norm=True, ln_eps=1e-5)
B, T = 2, 8
ATOL, RTOL = 2e-5, 0.0  # the largest difference measured: 2.6e-6 (docs/model.md)


def our_cfg(block, norm_type, **changes):
  return ModelConfig(**{**BASE, **BLOCKS[block], **NORM_TYPES[norm_type], **changes})


def lively(params, seed=1):
  """Every leaf random: matrices N(0, 1/fan_in), and the norms' scales and biases (and the
  linear biases) their init plus N(0, 0.3^2), so a norm or bias left out changes the output."""
  rng = np.random.default_rng(seed)

  def leaf(path, x):
    x = np.asarray(x, np.float32)
    name = jax.tree_util.keystr(path[-1:])
    if name in ("['wte']", "['wpe']") or name.startswith("['w_"):
      return jnp.asarray(rng.standard_normal(x.shape) / np.sqrt(x.shape[-2]), jnp.float32)
    return jnp.asarray(x + 0.3 * rng.standard_normal(x.shape), jnp.float32)
  return jax.tree_util.tree_map_with_path(leaf, params)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
  """These shapes are tiny: torch's intra-op threads only wait on each other (and on JAX's)
  on a busy machine; one thread for this module, the previous count restored after it."""
  before = torch.get_num_threads()
  torch.set_num_threads(1)
  yield
  torch.set_num_threads(before)


# ----------------------------------------------------------------------------- our tree -> OLMo-core


def olmo_norm(cfg):
  name = {"layernorm": "default", "rmsnorm": "rms"}[cfg.norm_type]
  return LayerNormConfig(name=name, eps=cfg.ln_eps, bias=cfg.bias)


def olmo_block(cfg, block):
  attention = AttentionConfig(n_heads=cfg.n_head, bias=cfg.bias,
                              rope=RoPEConfig(name="complex", theta=int(cfg.rope_base)),
                              qk_norm=LayerNormConfig(eps=cfg.ln_eps, bias=cfg.bias),
                              use_head_qk_norm=True)
  return TransformerBlockConfig(name=block, sequence_mixer=attention, layer_norm=olmo_norm(cfg),
                                feed_forward=FeedForwardConfig(hidden_size=cfg.mlp_dim, bias=cfg.bias))


def _linear(prefix, w_in_out, b=None):
  """A torch ``nn.Linear``'s entries: its weight is (out, in)."""
  out = {f"{prefix}.weight": np.asarray(w_in_out).T}
  if b is not None:
    out[f"{prefix}.bias"] = np.asarray(b)
  return out


def _norm(prefix, p):
  return {f"{prefix}.{'weight' if k == 'scale' else k}": np.asarray(v) for k, v in p.items()}


def block_state(blocks, l, cfg, prefix=""):
  """Layer ``l`` of our stacked ``blocks`` as an OLMo-core block's state dict."""
  b = jax.tree.map(lambda a: np.asarray(a[l]), blocks)
  attn, mlp, D, F = b["attn"], b["mlp"], cfg.d_model, cfg.mlp_dim
  # Our fused biases split as their matrices (none under bias=False).
  split = lambda p, name, n: np.split(p[name], n) if cfg.bias else [None] * n
  (bq, bk, bv), (b_gate, b_up) = split(attn, "b_qkv", 3), split(mlp, "b_in", 2)
  (b_attn_out,), (b_mlp_out,) = split(attn, "b_out", 1), split(mlp, "b_out", 1)
  state = {
      **_linear("attention.w_q", attn["w_qkv"][:, :D], bq),
      **_linear("attention.w_k", attn["w_qkv"][:, D:2 * D], bk),
      **_linear("attention.w_v", attn["w_qkv"][:, 2 * D:], bv),
      **_linear("attention.w_out", attn["w_out"], b_attn_out),
      **_norm("attention.q_norm", attn["q_norm"]), **_norm("attention.k_norm", attn["k_norm"]),
      # SwiGLU: our fused w_in is gate | up (branches.mlp); OLMo-core's w1 is the gate, w3 the up.
      **_linear("feed_forward.w1", mlp["w_in"][:, :F], b_gate),
      **_linear("feed_forward.w3", mlp["w_in"][:, F:], b_up),
      **_linear("feed_forward.w2", mlp["w_out"], b_mlp_out),
      **_norm("attention_norm", b["ln_1"]), **_norm("feed_forward_norm", b["ln_2"]),
  }
  if "ln_1_out" in b:  # peri: the branch-output norms
    state.update(**_norm("post_attention_norm", b["ln_1_out"]),
                 **_norm("post_feed_forward_norm", b["ln_2_out"]))
  return {prefix + k: torch.from_numpy(np.array(v, np.float32)) for k, v in state.items()}


def load(module, state):
  """``module`` with ``state``'s parameters: every one on both sides, or an error. Its buffers
  stay its own (LayerNorm scaling's ``ln_scale``, OLMo-core's 1/sqrt(block_idx + 1))."""
  params = dict(module.named_parameters(remove_duplicate=False))
  assert set(state) == set(params), (sorted(set(state) ^ set(params)))
  module.load_state_dict({**module.state_dict(), **state}, strict=True)
  return module.eval()


def to_torch(x):
  return torch.from_numpy(np.array(x, np.float32))  # a writable copy


# ----------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("norm_type", NORM_TYPES)
@pytest.mark.parametrize("block", BLOCKS)
def test_each_olmo_core_block_gives_our_block_output(block, norm_type):
  cfg = our_cfg(block, norm_type)
  params = lively(model.init_params(cfg, jax.random.key(0)))
  x = 0.5 + np.random.default_rng(2).standard_normal((B, T, cfg.d_model)).astype(np.float32)
  for l in range(cfg.n_layer):  # the layer index: LayerNorm scaling's 1/sqrt(l + 1)
    ours = model.block_forward(jax.tree.map(lambda a, l=l: a[l], params["blocks"]), jnp.asarray(x),
                               cfg, layer=l)
    theirs = olmo_block(cfg, block).build(d_model=cfg.d_model, block_idx=l, n_layers=cfg.n_layer)
    with torch.no_grad():
      want = load(theirs, block_state(params["blocks"], l, cfg))(to_torch(x)).numpy()
    np.testing.assert_allclose(np.asarray(ours), want, atol=ATOL, rtol=RTOL,
                               err_msg=f"OLMo-core {block} block {l}, {norm_type}")


def olmo_transformer(cfg, block, params):
  olmo = TransformerConfig(
      d_model=cfg.d_model, vocab_size=cfg.vocab_size, n_layers=cfg.n_layer,
      block=olmo_block(cfg, block), lm_head=LMHeadConfig(layer_norm=olmo_norm(cfg), bias=False),
      embedding_norm=olmo_norm(cfg) if cfg.embedding_norm else None,
      tie_word_embeddings=True).build(init_device="cpu")
  state = {"embeddings.weight": to_torch(params["wte"]),
           "lm_head.w_out.weight": to_torch(params["wte"]),  # tied: the same tensor
           **{k: to_torch(v) for k, v in _norm("lm_head.norm", params["ln_f"]).items()}}
  if cfg.embedding_norm:
    state.update({k: to_torch(v) for k, v in _norm("embedding_norm", params["ln_emb"]).items()})
  for l in range(cfg.n_layer):
    state.update(block_state(params["blocks"], l, cfg, prefix=f"blocks.{l}."))
  return load(olmo, state)


# One norm type per block type (each full model compiles its own layer scan; the blocks above
# take every pair): OLMo 2's reordered RMSNorm, and each of the three norms once more.
@pytest.mark.parametrize("block, norm_type", [
    ("default", "layernorm"), ("default_scaled", "rmsnorm"), ("reordered_norm", "rmsnorm"),
    ("peri_norm", "layernorm_nobias")])
def test_olmo_core_transformer_with_embedding_norm_gives_our_logits(block, norm_type):
  cfg = our_cfg(block, norm_type, embedding_norm=True)
  params = lively(model.init_params(cfg, jax.random.key(0)))
  assert "ln_emb" in params
  tokens = np.random.default_rng(3).integers(0, cfg.vocab_size, (B, T))
  with torch.no_grad():
    want = olmo_transformer(cfg, block, params)(torch.from_numpy(tokens)).numpy()
  np.testing.assert_allclose(np.asarray(model.forward(params, jnp.asarray(tokens, jnp.int32), cfg)),
                             want, atol=ATOL, rtol=RTOL, err_msg=f"OLMo-core {block}, {norm_type}")
