"""The maximal-update parametrisation (muP) for Adam: every width rule in one place.

Yang et al. 2022 (Tensor Programs V, table 3 and its multiplier form, table 9) for
Adam, as the ``mup`` package implements it (``MuAdam``, ``MuSharedReadout``). With
``r = model.base_width / model.d_model`` (1 at the base width, smaller when wider):

    parameter                           init std          Adam learning rate
    hidden matrices (w_qkv, attn w_out, x sqrt(r)          x r
      mlp w_in, mlp w_out)              (variance 1/fan_in)
    wte, wpe, lm_head (input, output)   unchanged         unchanged
    biases, LayerNorm scale and bias    unchanged         unchanged

    attention logits    q . k / d_head   (standard: q . k / sqrt(d_head))
    output logits       x r              (the readout multiplier, on the logits)

The tied embedding is one matrix read twice, as in ``mup.MuSharedReadout``: for its
learning rate and init it is the input embedding (a vector-like parameter: only one of
its dimensions grows with width), and the readout multiplier ``r`` scales the logits it
produces. An untied ``lm_head`` is treated the same way (``mup.MuReadout`` with Adam:
learning rate unchanged, output multiplied by ``r``). Under ``"sp"`` (the default) every
multiplier is 1 and the model is GPT-2's.

``model.py`` reads the multipliers from here (``hidden_init_scale``, ``attention_scale``,
``readout_multiplier``); ``step.make_optimizer`` adds ``scale_learning_rates``, an Optax
``multi_transform`` over the ``labels`` tree, after AdamW: scaling Adam's update of a leaf
by ``r`` is scaling that leaf's learning rate (its decoupled weight decay included, as in
``MuAdamW``). Only ``d_model`` counts as width: ``n_head`` is held fixed across widths, so
``d_head`` grows with it, and ``mlp_ratio`` too, so every hidden fan-in grows by ``1 / r``.
The widths are checked by ``python -m experiments.coord_check`` (``coord_check.py``).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import optax

PARAMETRIZATIONS = ("sp", "mup")
HIDDEN = "hidden"  # matrices with both dimensions growing with width: learning rate x r
OTHER = "other"  # embeddings, head, biases, norms: learning rate unchanged
# The per-layer weight matrices inside "blocks" (the rest there are biases and norms).
HIDDEN_NAMES = frozenset({"w_qkv", "w_out", "w_in"})


def width_ratio(cfg) -> float:
  """``base_width / d_model`` under ``"mup"``; 1 under ``"sp"`` (no width rule)."""
  return cfg.base_width / cfg.d_model if cfg.parametrization == "mup" else 1.0


def hidden_init_scale(cfg) -> float:
  """Factor on the init std of the hidden matrices: variance ``r / fan_in`` at any width."""
  return math.sqrt(width_ratio(cfg))


def hidden_lr_scale(cfg) -> float:
  """Factor on Adam's learning rate of the hidden matrices: ``r``."""
  return width_ratio(cfg)


def attention_scale(cfg) -> float:
  """What multiplies ``q . k`` before the softmax: ``1 / d_head`` (muP), ``1 / sqrt(d_head)`` (sp)."""
  return 1.0 / cfg.head_dim if cfg.parametrization == "mup" else 1.0 / math.sqrt(cfg.head_dim)


def readout_multiplier(cfg) -> float:
  """What multiplies the output logits: ``r``."""
  return width_ratio(cfg)


def labels(params) -> Any:
  """``HIDDEN`` or ``OTHER`` for each leaf of a parameter tree (``model.init_params``'s layout)."""
  def label(path, _):
    keys = [getattr(k, "key", None) for k in path]
    return HIDDEN if keys[0] == "blocks" and keys[-1] in HIDDEN_NAMES else OTHER
  return jax.tree_util.tree_map_with_path(label, params)


def scale_learning_rates(cfg) -> optax.GradientTransformation:
  """The per-parameter learning-rate factors, applied to the updates of an optimizer."""
  return optax.multi_transform({HIDDEN: optax.scale(hidden_lr_scale(cfg)), OTHER: optax.identity()},
                               labels)
