"""GPT-2's weights from and to andrea_jax params: ``to_hf_tensors``, ``from_hf_tensors``
(every tensor expected and of the expected shape: ``expected_shapes``), and ``bytes_first``,
a GPT-2 vocabulary renumbered to the andrea_jax layout.

The pre-norm ANDREA block is GPT-2's block, and GPT-2's ``Conv1D`` stores its weights
``[in, out]`` and computes ``x @ w + b``, exactly like ``model.py``. So the mapping is a
renaming plus the stacked ``n_layer`` axis split into ``h.{i}``; nothing is transposed
except an untied ``lm_head`` (``nn.Linear``, stored ``[out, in]``):

    wte [V, D]                     transformer.wte.weight
    wpe [T, D]                     transformer.wpe.weight
    blocks.ln_1.{scale,bias}[i]    transformer.h.{i}.ln_1.{weight,bias}
    blocks.attn.w_qkv [i] [D, 3D]  transformer.h.{i}.attn.c_attn.weight   (q, k, v; heads inside)
    blocks.attn.b_qkv [i]          transformer.h.{i}.attn.c_attn.bias
    blocks.attn.w_out / b_out [i]  transformer.h.{i}.attn.c_proj.{weight,bias}
    blocks.ln_2.{scale,bias}[i]    transformer.h.{i}.ln_2.{weight,bias}
    blocks.mlp.w_in / b_in [i]     transformer.h.{i}.mlp.c_fc.{weight,bias}
    blocks.mlp.w_out / b_out [i]   transformer.h.{i}.mlp.c_proj.{weight,bias}
    ln_f.{scale,bias}              transformer.ln_f.{weight,bias}
    lm_head [D, V] (untied only)   lm_head.weight [V, D]
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax.interop.gpt2_config import InteropError, check_exportable
from andrea_jax.model import ModelConfig

# HF name inside transformer.h.{i} -> (group, leaf) in params["blocks"].
BLOCK_KEYS = {
    "ln_1.weight": ("ln_1", "scale"), "ln_1.bias": ("ln_1", "bias"),
    "attn.c_attn.weight": ("attn", "w_qkv"), "attn.c_attn.bias": ("attn", "b_qkv"),
    "attn.c_proj.weight": ("attn", "w_out"), "attn.c_proj.bias": ("attn", "b_out"),
    "ln_2.weight": ("ln_2", "scale"), "ln_2.bias": ("ln_2", "bias"),
    "mlp.c_fc.weight": ("mlp", "w_in"), "mlp.c_fc.bias": ("mlp", "b_in"),
    "mlp.c_proj.weight": ("mlp", "w_out"), "mlp.c_proj.bias": ("mlp", "b_out"),
}
# Causal-mask buffers that older transformers saved with the weights; not parameters.
MASK_BUFFER = re.compile(r"^(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)$")


# ----------------------------------------------------------------------------- tensors


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
  """Every HF tensor name (with the ``transformer.`` prefix) and its shape."""
  D, F, V, T = cfg.d_model, cfg.mlp_dim, cfg.vocab_size, cfg.block_size
  block = {"ln_1.weight": (D,), "ln_1.bias": (D,), "attn.c_attn.weight": (D, 3 * D),
           "attn.c_attn.bias": (3 * D,), "attn.c_proj.weight": (D, D), "attn.c_proj.bias": (D,),
           "ln_2.weight": (D,), "ln_2.bias": (D,), "mlp.c_fc.weight": (D, F),
           "mlp.c_fc.bias": (F,), "mlp.c_proj.weight": (F, D), "mlp.c_proj.bias": (D,)}
  shapes = {"transformer.wte.weight": (V, D), "transformer.wpe.weight": (T, D),
            "transformer.ln_f.weight": (D,), "transformer.ln_f.bias": (D,)}
  for i in range(cfg.n_layer):
    shapes.update({f"transformer.h.{i}.{k}": s for k, s in block.items()})
  if not cfg.tie_embeddings:
    shapes["lm_head.weight"] = (V, D)
  return shapes


def to_hf_tensors(params: Mapping[str, Any], cfg: ModelConfig) -> dict[str, np.ndarray]:
  """The float32 HF state dict of an andrea_jax param pytree (vocabulary padding dropped)."""
  check_exportable(cfg)
  f32 = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  V = cfg.vocab_size  # rows past it are model.vocab_pad_multiple's padding, never used
  out = {"transformer.wte.weight": f32(np.asarray(params["wte"])[:V]),
         "transformer.wpe.weight": f32(params["wpe"]),
         "transformer.ln_f.weight": f32(params["ln_f"]["scale"]),
         "transformer.ln_f.bias": f32(params["ln_f"]["bias"])}
  blocks = jax.tree.map(f32, params["blocks"])
  for i in range(cfg.n_layer):
    for key, (group, leaf) in BLOCK_KEYS.items():
      out[f"transformer.h.{i}.{key}"] = np.ascontiguousarray(blocks[group][leaf][i])
  if not cfg.tie_embeddings:
    out["lm_head.weight"] = f32(np.asarray(params["lm_head"])[:, :V].T)  # nn.Linear is [out, in]
  _check_tensors(out, cfg, "exported params")
  return out


def _canonical_names(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Prefix bare ``GPT2Model`` names with ``transformer.``; drop the causal-mask buffers."""
  out = {}
  for name, value in tensors.items():
    if MASK_BUFFER.match(name):
      continue
    full = name if name.startswith(("transformer.", "lm_head.")) else f"transformer.{name}"
    out[full] = value
  return out


def _check_tensors(tensors: Mapping[str, np.ndarray], cfg: ModelConfig, where: str) -> None:
  expected = expected_shapes(cfg)
  missing = sorted(set(expected) - set(tensors))
  extra = sorted(set(tensors) - set(expected))
  if missing:
    raise InteropError(f"{where} lacks tensor {missing[0]!r} ({len(missing)} missing in all) that "
                       f"a GPT-2 of this config.json needs; the checkpoint is incomplete or its "
                       f"config.json describes another model")
  if extra:
    raise InteropError(f"{where} has unexpected tensor {extra[0]!r} ({len(extra)} in all): it is "
                       f"not part of a GPT2LMHeadModel of this config.json, and andrea_jax does "
                       f"not drop weights silently")
  for name, shape in expected.items():
    if tuple(tensors[name].shape) != shape:
      raise InteropError(f"{where}: tensor {name!r} has shape {tuple(tensors[name].shape)}, "
                         f"expected {shape} from config.json")


def from_hf_tensors(tensors: Mapping[str, np.ndarray], cfg: ModelConfig,
                    where: str = "checkpoint") -> dict:
  """An andrea_jax param pytree (float32) from a GPT-2 state dict of the model ``cfg``."""
  tensors = _canonical_names(tensors)
  if cfg.tie_embeddings and "lm_head.weight" in tensors:
    # transformers ties lm_head to wte and ignores a saved copy; refuse one that differs.
    if not np.array_equal(tensors["lm_head.weight"], tensors.get("transformer.wte.weight")):
      raise InteropError(f"{where}: tensor 'lm_head.weight' differs from 'transformer.wte.weight' "
                         f"but config.json says tie_word_embeddings=true; set it to false to "
                         f"keep the separate head")
    tensors = {k: v for k, v in tensors.items() if k != "lm_head.weight"}
  _check_tensors(tensors, cfg, where)
  f32 = lambda x: np.asarray(x, np.float32)
  stack = lambda key: f32(np.stack([tensors[f"transformer.h.{i}.{key}"] for i in range(cfg.n_layer)]))
  blocks: dict = {}
  for key, (group, leaf) in BLOCK_KEYS.items():
    blocks.setdefault(group, {})[leaf] = stack(key)
  params = {"wte": f32(tensors["transformer.wte.weight"]),
            "wpe": f32(tensors["transformer.wpe.weight"]), "blocks": blocks,
            "ln_f": {"scale": f32(tensors["transformer.ln_f.weight"]),
                     "bias": f32(tensors["transformer.ln_f.bias"])}}
  if not cfg.tie_embeddings:
    params["lm_head"] = f32(tensors["lm_head.weight"]).T.copy()
  return jax.tree.map(jnp.asarray, params)


# ----------------------------------------------------------------------------- bytes-first layout


def bytes_first(params: Mapping[str, Any], cfg: ModelConfig, tok) -> tuple[dict, Any]:
  """Renumber a GPT-2 vocabulary to the andrea_jax layout (byte b at id b, EOT last).

  OpenAI's GPT-2 tokenizer holds the 256 byte tokens at ids 0..255 but in another order,
  which ``tokenizer.check_layout`` (and so the data pipeline) refuses. Permuting the ids
  of the tokenizer and the rows of ``wte`` (columns of ``lm_head``) the same way gives
  the same model on text: every string gets the same logits, re-indexed.
  """
  spec = json.loads(tok.to_str())
  vocab = {**spec["model"]["vocab"], **{t["content"]: t["id"] for t in spec["added_tokens"]}}
  if len(set(vocab.values())) != cfg.vocab_size or max(vocab.values()) != cfg.vocab_size - 1:
    raise InteropError(f"the tokenizer has {len(set(vocab.values()))} ids, the model "
                       f"vocab_size={cfg.vocab_size}: they must match one to one")
  table = tokenizer_lib.byte_to_unicode()
  missing = [b for b in range(tokenizer_lib.N_BYTES) if table[b] not in vocab]
  if missing or tokenizer_lib.EOT not in vocab:
    what = f"byte {missing[0]}" if missing else tokenizer_lib.EOT
    raise InteropError(f"the tokenizer has no token for {what}: it is not a byte-level BPE like "
                       f"GPT-2's, so it cannot be laid out bytes-first")
  specials = [t["content"] for t in spec["added_tokens"] if t["content"] != tokenizer_lib.EOT]
  if specials:
    raise InteropError(f"the tokenizer has added token {specials[0]!r} besides {tokenizer_lib.EOT}; "
                       f"the andrea_jax layout has exactly one special token")
  eot_old = vocab[tokenizer_lib.EOT]
  bytes_old = [vocab[table[b]] for b in range(tokenizer_lib.N_BYTES)]
  rest = sorted(set(range(cfg.vocab_size)) - set(bytes_old) - {eot_old})
  perm = np.asarray(bytes_old + rest + [eot_old])  # perm[new id] = old id
  new_id = {old: new for new, old in enumerate(perm.tolist())}
  spec["model"]["vocab"] = {s: new_id[i] for s, i in spec["model"]["vocab"].items()}
  for t in spec["added_tokens"]:
    t["id"] = new_id[t["id"]]
  from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
  new_tok = Tokenizer.from_str(json.dumps(spec))
  tokenizer_lib.check_layout(new_tok, cfg.vocab_size, where="the renumbered tokenizer")
  out = dict(params)
  out["wte"] = jnp.asarray(params["wte"])[perm]
  if not cfg.tie_embeddings:
    out["lm_head"] = jnp.asarray(params["lm_head"])[:, perm]
  return out, new_tok
