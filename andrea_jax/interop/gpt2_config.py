"""GPT-2's ``config.json`` against ``ModelConfig``: ``check_exportable`` refuses what GPT-2
cannot express, ``hf_config`` and ``model_config_from_hf`` translate one into the other,
``config_differences`` names the fields that change the model's function; and the interop
errors, ``InteropError`` and ``UnexportableError``.

GPT-2 cannot express post-norm blocks, a norm on the embedding or a final norm that is not a
LayerNorm, a SwiGLU MLP, query/key LayerNorms
(``qk_norm``), rotary positions, layers without biases or muP's attention scale and readout
multiplier, so those are refused on export.
"""

from __future__ import annotations

from typing import Any, Mapping

from andrea_jax import errors
from andrea_jax import mup
from andrea_jax.model import ModelConfig
from andrea_jax.norms import normaliser, placement

# transformers' activation names <-> ours; gelu_pytorch_tanh is the same tanh GELU, fused;
# relu2 is transformers' ReLUSquaredActivation, max(x, 0)^2.
ACT_FROM_HF = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
               "relu": "relu", "relu2": "relu2"}
ACT_TO_HF = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "relu2": "relu2"}

# ModelConfig fields that decide what the model computes; the rest (dtypes, remat,
# scan unroll, attention kernel) are how it runs and may differ freely.
FUNCTION_FIELDS = ("vocab_size", "block_size", "d_model", "n_layer", "n_head", "mlp_ratio",
                   "norm", "activation", "tie_embeddings", "ln_eps", "qk_norm", "parametrization",
                   "readout_multiplier", "attention_multiplier", "embedding_multiplier",
                   "position", "rope_base", "bias", "embedding_norm")


class InteropError(errors.AndreaError):
  """A checkpoint or model that cannot be converted as asked; the message says why."""


class UnexportableError(InteropError, errors.ConfigError):
  """A model variant that GPT-2's weights and config cannot express."""


def check_exportable(cfg: ModelConfig) -> None:
  """Refuse the ANDREA variants that a GPT-2 checkpoint cannot express."""
  if not placement(cfg.norm).gpt2:
    raise UnexportableError(f"model.norm={cfg.norm!r}: GPT-2 blocks are pre-norm (x + F(LN(x)) "
                            f"with a final ln_f); only model.norm='pre' can be written as GPT-2 "
                            f"weights")
  if cfg.norm_depth_scaling:
    raise UnexportableError("model.norm_depth_scaling=True: GPT-2's blocks do not scale their "
                            "LayerNorm outputs by 1/sqrt(layer); only norm_depth_scaling=False "
                            "can be written as GPT-2 weights")
  if not normaliser(cfg.norm_type).gpt2:
    raise UnexportableError(f"model.norm_type={cfg.norm_type!r}: GPT-2's norms are LayerNorms "
                            f"(scale and bias); only norm_type=layernorm can be written as GPT-2 "
                            f"weights")
  if cfg.embedding_norm:
    raise UnexportableError("model.embedding_norm=True: GPT-2 adds wte and wpe with no norm "
                            "after them (no such weights in a GPT-2 checkpoint); export a model "
                            "trained with embedding_norm=False")
  if not normaliser(cfg.final_norm).gpt2:
    raise UnexportableError(f"model.final_norm_type={cfg.final_norm_type!r}: GPT-2's ln_f is a "
                            f"LayerNorm; export a model whose final norm is one "
                            f"(final_norm_type='' or 'layernorm')")
  if cfg.activation not in ACT_TO_HF:
    raise UnexportableError(f"model.activation={cfg.activation!r}: GPT-2's MLP is c_fc -> "
                            f"activation -> c_proj with no gate; it can express "
                            f"{sorted(ACT_TO_HF)}, not a gated SwiGLU MLP")
  if cfg.position != "learned":
    raise UnexportableError(f"model.position={cfg.position!r}: GPT-2 adds a learned position "
                            f"table (wpe) and has no rotary positions; only "
                            f"model.position='learned' can be written as GPT-2 weights")
  if not cfg.bias:
    raise UnexportableError("model.bias=False: every GPT-2 linear layer and LayerNorm has a bias; "
                            "export a model trained with model.bias=True")
  if cfg.qk_norm:
    raise UnexportableError("model.qk_norm=True: GPT-2's attention has no LayerNorm on queries "
                            "and keys (no such weights in a GPT-2 checkpoint); export a model "
                            "trained with qk_norm=False")
  if mup.branch_multiplier(cfg) != 1.0:
    raise UnexportableError(f"model.depth_rule={cfg.depth_rule!r} at n_layer={cfg.n_layer} "
                            f"(base_depth={cfg.base_depth}): GPT-2's blocks add their branches "
                            f"unscaled; export a model trained with depth_rule='none'")
  if cfg.parametrization != "sp":
    raise UnexportableError(f"model.parametrization={cfg.parametrization!r}: GPT-2 computes the "
                            f"standard parametrisation ('sp'), with attention scaled by "
                            f"1/sqrt(d_head) and no output multiplier; muP's 1/d_head and "
                            f"readout multiplier have no place in its config: export a model "
                            f"trained with parametrization='sp'")
  for name in ("readout_multiplier", "attention_multiplier", "embedding_multiplier"):
    if getattr(cfg, name) != 1.0:
      raise UnexportableError(f"model.{name}={getattr(cfg, name)!r}: GPT-2's config has no "
                              f"multiplier on the logits, the attention scores or the "
                              f"embeddings; export a model trained with {name}=1.0")


def hf_config(cfg: ModelConfig, eot_id: int) -> dict:
  """The ``config.json`` of a ``GPT2LMHeadModel`` computing the same function as ``cfg``."""
  check_exportable(cfg)
  return {
      "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
      "vocab_size": cfg.vocab_size, "n_positions": cfg.block_size, "n_ctx": cfg.block_size,
      "n_embd": cfg.d_model, "n_layer": cfg.n_layer, "n_head": cfg.n_head,
      # null means 4 * n_embd to transformers; anything else is written out.
      "n_inner": None if cfg.mlp_dim == 4 * cfg.d_model else cfg.mlp_dim,
      "activation_function": ACT_TO_HF[cfg.activation],
      "layer_norm_epsilon": cfg.ln_eps,
      "tie_word_embeddings": cfg.tie_embeddings,
      # GPT-2's three dropouts are the model's one (training only; model.py).
      "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout, "attn_pdrop": cfg.dropout,
      "summary_first_dropout": 0.0,
      "initializer_range": 0.02, "scale_attn_weights": True,
      "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
      "add_cross_attention": False, "use_cache": True,
      "bos_token_id": eot_id, "eos_token_id": eot_id, "dtype": "float32",
  }


def model_config_from_hf(hf: Mapping[str, Any], where: str = "config.json") -> ModelConfig:
  """The ``ModelConfig`` of a GPT-2 ``config.json``; refuses what ``model.py`` cannot compute."""
  if hf.get("model_type") != "gpt2":
    raise InteropError(f"{where}: model_type={hf.get('model_type')!r}, expected 'gpt2'; only GPT-2 "
                       f"checkpoints can be imported")
  act = hf.get("activation_function", "gelu_new")
  if act not in ACT_FROM_HF:
    raise InteropError(f"{where}: activation_function={act!r} has no andrea_jax equivalent; "
                       f"supported: {sorted(ACT_FROM_HF)}")
  unsupported = {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
                 "add_cross_attention": False}
  for name, expected in unsupported.items():
    if hf.get(name, expected) != expected:
      raise InteropError(f"{where}: {name}={hf[name]!r} changes the attention in a way andrea_jax "
                         f"does not implement (it computes {name}={expected})")
  try:
    d_model, n_inner = int(hf["n_embd"]), hf.get("n_inner")
    return ModelConfig(
        vocab_size=int(hf["vocab_size"]), block_size=int(hf["n_positions"]), d_model=d_model,
        n_layer=int(hf["n_layer"]), n_head=int(hf["n_head"]),
        mlp_ratio=4.0 if n_inner is None else int(n_inner) / d_model,
        norm="pre", activation=ACT_FROM_HF[act],
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        ln_eps=float(hf.get("layer_norm_epsilon", 1e-5)))
  except KeyError as e:
    raise InteropError(f"{where} has no {e.args[0]!r}: is it a GPT-2 config.json?") from e


def config_differences(a: ModelConfig, b: ModelConfig) -> list[str]:
  """``field: a -> b`` for each field that changes the model's function (mlp width compared)."""
  diffs = []
  for name in FUNCTION_FIELDS:
    x, y = getattr(a, name), getattr(b, name)
    if name == "mlp_ratio":
      x, y = a.mlp_dim, b.mlp_dim  # ratios like 3072/768 vs 4.0 only matter through the width
    if x != y:
      diffs.append(f"{name}: {getattr(a, name)!r} vs {getattr(b, name)!r}")
  return diffs
