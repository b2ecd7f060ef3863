"""The maximal-update parametrisation (muP) for Adam: every width rule in one place.

Yang et al. 2022 (Tensor Programs V, table 3 and its multiplier form, table 9) for
Adam, as the ``mup`` package implements it (``MuAdamW``, ``MuSharedReadout``). With
``r = model.base_width / model.d_model`` (1 at the base width, smaller when wider):

    parameter                           init std          Adam learning rate
    hidden matrices (w_qkv, attn w_out, x sqrt(r)          x r (decay: see below)
      mlp w_in, mlp w_out)              (variance 1/fan_in)
    wte, wpe, lm_head (input, output)   unchanged         unchanged
    biases, LayerNorm scale and bias    unchanged         unchanged

    attention logits    q . k x sqrt(d_head_base) / d_head   (sp: q . k / sqrt(d_head))
    output logits       x r                                  (the readout multiplier)

``d_head_base = base_width / n_head`` is the head size at the base width (``n_head`` is
held fixed across widths; with ``model.base_n_head`` set, the heads grow with the width
instead and ``d_head_base = base_width / base_n_head``: at a fixed ``d_head``, as in the
ANDREA family's 64, muP's attention scale is sp's at every width), so the attention scale is the ``mup`` README's "8 / d" with 8
= sqrt(d_head_base), and equals sp's ``1 / sqrt(d_head)`` at the base width:
``model.mup_attention="base"``. ``"inverse"`` is the bare ``1 / d_head`` of the paper's
table, what this project used before the field existed (it makes the base model's
attention ``1 / sqrt(d_head_base)`` colder than sp's).

**The base multipliers.** μTransfer tunes a few constants of the base model at the base
width and carries them unchanged to every width (Yang et al. 2022, section 3 and
appendix F.4): ``model.readout_multiplier`` (on the output logits),
``model.attention_multiplier`` (on the attention logits) and
``model.embedding_multiplier`` (on the token plus position embeddings). They multiply the
same places under sp and muP, and default to 1, so that **muP at ``base_width`` is the sp
model with the same multipliers**, exactly: the same init, the same function, the same
updates (tests/test_model.py, tests/test_step.py).

**Weight decay.** AdamW's decoupled decay shrinks a weight by ``lr x weight_decay`` per
step. ``mup.MuAdamW`` (its default ``decoupled_wd=False``) divides a hidden matrix's
rate by the width multiplier and multiplies its decay by it, so ``lr x weight_decay`` is
the same at every width: ``model.mup_decay="constant"`` (the default). ``"with_rate"``
scales the decay with the rate (``lr x r x weight_decay``, ``MuAdamW(decoupled_wd=True)``),
what this project did before the field existed.

The tied embedding is one matrix read twice, as in ``mup.MuSharedReadout``: for its
learning rate and init it is the input embedding (a vector-like parameter: only one of
its dimensions grows with width), and the readout multiplier ``r`` scales the logits it
produces. An untied ``lm_head`` is treated the same way (``mup.MuReadout`` with Adam:
learning rate unchanged, output multiplied by ``r``). Under ``"sp"`` (the default) every
width factor is 1 and, with the multipliers at 1, the model is GPT-2's.

The model reads the multipliers from here (``init.py``: ``hidden_init_scale``; ``branches.py``:
``attention_scale``; ``model.py``: ``readout_multiplier``, ``embedding_multiplier``);
``step.make_optimizer`` builds AdamW with ``scale_learning_rates``, an Optax
``multi_transform`` over the ``labels`` tree, in the place ``mup_decay`` asks for.
``model.zero_query_init`` starts the query projection at zero (the ``mup`` README's
recommendation: every query, and so every attention pattern, starts uniform at any
width). Only ``d_model`` counts as width: ``n_head`` is held fixed, so ``d_head`` grows
with it, and ``mlp_ratio`` too, so every hidden fan-in grows by ``1 / r``.

**Depth.** ``model.depth_rule="completep"`` with ``model.base_depth`` is CompleteP's
rule for pre-LN transformers under Adam at its alpha = 1 (Dey et al. 2025, table 1; the
1/L branch scaling of depth-muP, Bordelon et al. 2024 and Yang et al. 2024): each
residual branch is multiplied by ``base_depth / n_layer`` and the residual-writing
projections keep the init of the base depth, so at ``base_depth`` the model is the plain
one exactly; with alpha = 1 the Adam rates of the hidden matrices, biases and norms do
not change with depth. (CompleteP also scales Adam's epsilon by depth; at this project's
epsilon it is far below the updates' scale and is not applied.) ``"none"``: the plain
model, whose rate moves with depth. CompleteP is refused with ``norm="deepnorm"``, ``"mix"``
and ``norm_depth_scaling`` (each carries a depth rule of its own that no paper combines with
it); muP's width rules apply to every placement unchanged (their constants depend on depth
alone). The widths are checked by ``python -m experiments.coord_check``
(``coord_check.py``).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import optax

PARAMETRIZATIONS = ("sp", "mup")
DEPTH_RULES = ("none", "completep")  # plain; residual branches x base_depth / n_layer
MUP_ATTENTION = ("base", "inverse")  # sqrt(d_head_base) / d_head; 1 / d_head (before the field)
MUP_DECAY = ("constant", "with_rate")  # lr x decay the same at every width; scaled with the rate
HIDDEN = "hidden"  # matrices with both dimensions growing with width: learning rate x r
OTHER = "other"  # embeddings, head, biases, norms: learning rate unchanged
# The per-layer weight matrices inside "blocks" (the rest there are biases and norms).
HIDDEN_NAMES = frozenset({"w_qkv", "w_out", "w_in"})


def refusal(cfg) -> str | None:
  """Why ``parametrization="mup"`` has no rule for this model (one line), or None.

  The choices around the blocks: the embedding's and the head's init std are width-free
  constants like the table's (input and output layers, "unchanged"), and a final norm of
  another type is a norm like the table's; an embedding norm is not in the table: it cancels
  the tuned ``embedding_multiplier`` (a norm is scale-free), and Yang et al. give no rule for it.
  """
  if cfg.parametrization == "mup" and cfg.embedding_norm:
    return ("model.embedding_norm=True with parametrization='mup': muP (Yang et al. 2022, table 3) "
            "has no rule for a norm on the embedding, which cancels the tuned "
            "embedding_multiplier; set embedding_norm=False or parametrization='sp'")
  return None


def width_ratio(cfg) -> float:
  """``base_width / d_model`` under ``"mup"``; 1 under ``"sp"`` (no width rule)."""
  return cfg.base_width / cfg.d_model if cfg.parametrization == "mup" else 1.0


def hidden_init_scale(cfg) -> float:
  """Factor on the init std of the hidden matrices: variance ``r / fan_in`` at any width."""
  return math.sqrt(width_ratio(cfg))


def hidden_lr_scale(cfg) -> float:
  """Factor on Adam's learning rate of the hidden matrices: ``r``."""
  return width_ratio(cfg)


def base_head_dim(cfg) -> float:
  """The head size at the base width: ``base_width / base_n_head`` (``base_n_head`` 0:
  ``n_head``, the heads held fixed across widths)."""
  return cfg.base_width / (getattr(cfg, "base_n_head", 0) or cfg.n_head)


def attention_scale(cfg) -> float:
  """What multiplies ``q . k`` before the softmax: ``attention_multiplier`` times
  ``1 / sqrt(d_head)`` (sp), ``sqrt(d_head_base) / d_head`` (muP, ``"base"``) or
  ``1 / d_head`` (muP, ``"inverse"``)."""
  if cfg.parametrization != "mup":
    width = 1.0 / math.sqrt(cfg.head_dim)
  elif cfg.mup_attention == "base":  # written so that it is sp's, to the bit, at the base width
    width = math.sqrt(base_head_dim(cfg) / cfg.head_dim) / math.sqrt(cfg.head_dim)
  else:
    width = 1.0 / cfg.head_dim
  return cfg.attention_multiplier * width


def branch_multiplier(cfg) -> float:
  """What multiplies each residual branch's output: ``base_depth / n_layer`` under
  ``depth_rule="completep"`` (CompleteP, Dey et al. 2025, its alpha = 1; depth-muP's
  1/L branch scaling), 1 otherwise and at the base depth."""
  if getattr(cfg, "depth_rule", "none") == "completep":
    return cfg.base_depth / cfg.n_layer
  return 1.0


def init_depth(cfg) -> int:
  """The depth the residual-writing projections' GPT-2 init is scaled for
  (``1 / sqrt(2 x it)``): ``n_layer``, or ``base_depth`` under a depth rule, whose branch
  multiplier carries the rest of the depth."""
  return cfg.base_depth if getattr(cfg, "depth_rule", "none") != "none" else cfg.n_layer


def readout_multiplier(cfg) -> float:
  """What multiplies the output logits: ``readout_multiplier x r``."""
  return cfg.readout_multiplier * width_ratio(cfg)


def embedding_multiplier(cfg) -> float:
  """What multiplies the token plus position embeddings: ``embedding_multiplier`` (no width
  factor: the input layer's coordinates are of order one at any width under Adam)."""
  return cfg.embedding_multiplier


def decay_scales_with_rate(cfg) -> bool:
  """Whether a hidden matrix's decoupled decay is scaled by its rate factor ``r`` too."""
  return cfg.parametrization == "mup" and cfg.mup_decay == "with_rate"


def labels(params) -> Any:
  """``HIDDEN`` or ``OTHER`` for each leaf of a parameter tree (``init.init_params``'s layout)."""
  def label(path, _):
    keys = [getattr(k, "key", None) for k in path]
    return HIDDEN if keys[0] == "blocks" and keys[-1] in HIDDEN_NAMES else OTHER
  return jax.tree_util.tree_map_with_path(label, params)


def scale_learning_rates(cfg) -> optax.GradientTransformation:
  """The per-parameter learning-rate factors, applied to the updates of an optimizer."""
  return optax.multi_transform({HIDDEN: optax.scale(hidden_lr_scale(cfg)), OTHER: optax.identity()},
                               labels)
