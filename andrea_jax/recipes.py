"""Named recipes: what a paper's or a codebase's model sets around its norm placement, as
``model`` fields, each field with the line it comes from.

``--config=tiny:recipe=periln`` applies a recipe's fields first, then the other variants
override them (``configdict.apply_variants``). A recipe sets only
fields this repo has; what a source does that the model cannot (Gemma 2's GeGLU and logit
soft-capping, OLMo 2's full-width QK-norm, truncated-normal inits, ...) is listed in
docs/model.md beside the table, which ``tests/test_recipes.py`` checks against ``RECIPES``.

A value is a constant, or ``Derived``: a formula of the model group read after the other
variants (Gemma's ``sqrt(d_model)`` embedding multiplier follows a ``d_model=`` variant).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

from andrea_jax import errors

OLMO = "github.com/allenai/OLMo-core @fa6c501"
DYT = "github.com/jiachenzhu/DyT @aab5dde, other_tasks/LLaMA"
HF_GEMMA2 = "huggingface/transformers, models/gemma2/modeling_gemma2.py"


@dataclasses.dataclass(frozen=True)
class Derived:
  """A value computed from the model group: ``formula`` is what the docs table shows."""
  formula: str
  fn: Callable[[Any], Any]

  def __call__(self, model_group) -> Any:
    return self.fn(model_group)


class Field(NamedTuple):
  value: Any
  source: str


SQRT_D = Derived("sqrt(d_model)", lambda m: math.sqrt(m.d_model))

RECIPES: dict[str, dict[str, Field]] = {
    # Kim et al. 2025 (Peri-LN): what the paper states is the placement; its text names no norm
    # on the embedding that we could find (docs/model.md).
    "periln": {
        "norm": Field("peri", "Kim et al. 2025, section 3, eq. 3: x + Norm(F(Norm(x)))"),
    },
    # OLMo-core's Peri-LN ladder ("olmo3-peri-ln"): Peri-LN + QK-norm + the embedding norm.
    "periln_olmo": {
        "norm": Field("peri", f"{OLMO}, src/scripts/train/ladder/2026Q1/more_norms_ladder.py:41-42 (peri_norm block)"),
        "qk_norm": Field(True, f"{OLMO}, more_norms_ladder.py:41 (\"Peri-LN ... plus QK-norm\")"),
        "embedding_norm": Field(True, f"{OLMO}, more_norms_ladder.py:46-47 (--embedding-norm); model.py:591-592"),
        "norm_type": Field("rmsnorm", f"{OLMO}, more_norms_ladder.py:47 (LayerNormType.rms)"),
        "ln_eps": Field(1e-6, f"{OLMO}, more_norms_ladder.py:47 (eps=1e-6)"),
        "bias": Field(False, f"{OLMO}, more_norms_ladder.py:47 and nn/transformer/config.py:1689,1703,1713 (bias=False)"),
        "position": Field("rope", f"{OLMO}, nn/transformer/config.py:1714 (llama_like: RoPEConfig)"),
        "activation": Field("swiglu", f"{OLMO}, nn/transformer/config.py:1703 (llama_like: FeedForward, SwiGLU)"),
        "mlp_ratio": Field(8 / 3, f"{OLMO}, nn/transformer/config.py:1678 (hidden_size = int(8 * d_model / 3))"),
        "tie_embeddings": Field(False, f"{OLMO}, nn/transformer/model.py:120 (tie_word_embeddings=False)"),
    },
    # OLMo 2 (OLMo et al. 2024, section 3.2.1), as OLMo-core builds it.
    "olmo2": {
        "norm": Field("reordered", f"{OLMO}, nn/transformer/config.py:532 (TransformerBlockType.reordered_norm)"),
        "norm_type": Field("rmsnorm", f"{OLMO}, nn/transformer/config.py:1685 (llama_like: LayerNormType.rms)"),
        "ln_eps": Field(1e-6, f"{OLMO}, nn/transformer/config.py:535 (layer_norm_eps=1e-6)"),
        "qk_norm": Field(True, f"{OLMO}, nn/transformer/config.py:533 (qk_norm=True)"),
        "position": Field("rope", f"{OLMO}, nn/transformer/config.py:1714 (RoPEConfig)"),
        "rope_base": Field(500000.0, f"{OLMO}, nn/transformer/config.py:534 (rope_theta=500_000)"),
        "activation": Field("swiglu", f"{OLMO}, nn/transformer/config.py:1703 (FeedForward, SwiGLU)"),
        "mlp_ratio": Field(8 / 3, f"{OLMO}, nn/transformer/config.py:1678 (int(8 * d_model / 3))"),
        "bias": Field(False, f"{OLMO}, nn/transformer/config.py:1689,1703,1713 (bias=False)"),
        "tie_embeddings": Field(False, f"{OLMO}, nn/transformer/model.py:120 (tie_word_embeddings=False)"),
    },
    # Gemma 2 (Gemma Team 2024, section 2): pre and post norms around each sublayer, RMSNorm.
    "gemma2": {
        "norm": Field("peri", f"{HF_GEMMA2}: Gemma2DecoderLayer's pre/post_attention_layernorm, "
                              f"pre/post_feedforward_layernorm (Gemma 2 report, section 2)"),
        "norm_type": Field("rmsnorm", f"{HF_GEMMA2}: Gemma2RMSNorm"),
        "ln_eps": Field(1e-6, f"{HF_GEMMA2}: Gemma2Config rms_norm_eps=1e-6"),
        "embedding_multiplier": Field(SQRT_D, f"{HF_GEMMA2}: Gemma2Model.forward, normalizer = hidden_size**0.5"),
        "tie_embeddings": Field(True, f"{HF_GEMMA2}: Gemma2Config tie_word_embeddings=True"),
        "position": Field("rope", f"{HF_GEMMA2}: Gemma2RotaryEmbedding (rope_theta=10000)"),
        "bias": Field(False, f"{HF_GEMMA2}: attention_bias=False, Gemma2MLP Linear(bias=False)"),
    },
    # Zhu et al. 2025 (DyT), their LLaMA 7B run.
    "dyt": {
        "norm_type": Field("dyt", f"{DYT}/fms_fsdp/models/llama.py:32-46 (LayerNormParameterized: weight * tanh(alpha x))"),
        "bias": Field(False, f"{DYT}/fms_fsdp/models/llama.py:46 (no DyT bias), :67-68 (attn_bias, mlp_bias False)"),
        "dyt_alpha_attn_init": Field(0.8, f"{DYT}/README.md:61 (--attn_alpha_init_value=0.8, LLaMA2 7B)"),
        "dyt_alpha_init": Field(0.2, f"{DYT}/README.md:62 (--ffn_alpha_init_value=0.2)"),
        "dyt_alpha_final_init": Field(0.2, f"{DYT}/README.md:63 (--dec_alpha_init_value=0.2)"),
        "tie_embeddings": Field(False, f"{DYT}/fms_fsdp/models/llama.py:69 (tie_heads=False)"),
        "position": Field("rope", f"{DYT}/fms_fsdp/models/llama.py:70 (rope_theta), RotaryEmbedding"),
        "activation": Field("swiglu", f"{DYT}/fms_fsdp/models/llama.py:63 (activation_fn='swish', GatedLinearUnit)"),
        "mlp_ratio": Field(8 / 3, f"{DYT}/fms_fsdp/models/llama.py:61 (hidden_grow_factor=8/3)"),
    },
    # DeepNet (Wang et al. 2022): DeepNorm with its Xavier-times-beta init.
    "deepnet": {
        "norm": Field("deepnorm", "Wang et al. 2022, section 3 and Figure 2 (decoder-only: alpha = (2L)^(1/4))"),
        "init": Field("xavier", "Wang et al. 2022, Figure 2 (xavier_normal_(w, gain=beta), beta = (8L)^(-1/4))"),
    },
}
NAMES = tuple(RECIPES)


def recipe(name: str) -> dict[str, Field]:
  """The fields of recipe ``name``; an unknown name is one line listing the names."""
  try:
    return RECIPES[name]
  except KeyError:
    raise errors.ConfigError(f"recipe={name!r}: expected one of {NAMES} "
                             f"(andrea_jax/recipes.py, docs/model.md)") from None


def shown(value: Any) -> str:
  """A value as the docs table writes it (a ``Derived`` as its formula)."""
  return value.formula if isinstance(value, Derived) else repr(value)


def overrides(name: str, d_model: int) -> dict[str, Any]:
  """Recipe ``name`` as ``{"model.<field>": value}`` overrides at width ``d_model`` (a ``Derived``
  value computed there): what a study arm that stands for the recipe's source sets."""
  at = type("ModelGroup", (), {"d_model": d_model})
  return {f"model.{k}": f.value(at) if isinstance(f.value, Derived) else f.value
          for k, f in recipe(name).items()}
