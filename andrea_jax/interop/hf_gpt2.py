"""Hugging Face GPT-2 checkpoints in and out: ``export_gpt2`` and ``import_gpt2``.

The pre-norm ANDREA block is GPT-2's block, and GPT-2's ``Conv1D`` stores its weights
``[in, out]`` and computes ``x @ w + b``, exactly like ``branches.py``. So the mapping is a
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

Export writes ``model.safetensors`` with ``safetensors.numpy`` (no PyTorch needed);
a tied head is not written (transformers ties ``lm_head.weight`` to ``wte`` itself).
Import reads ``model.safetensors`` (or a sharded ``model.safetensors.index.json``) and
only then ``pytorch_model.bin``, through ``torch.load(weights_only=True)``: loading never
runs code from the checkpoint. The causal-mask buffers ``attn.bias``/``attn.masked_bias``
of older checkpoints are not weights and are skipped; every other tensor must be
expected and of the expected shape.

GPT-2 cannot express post-norm blocks, a SwiGLU MLP, query/key LayerNorms
(``qk_norm``), rotary positions, layers without biases or muP's attention scale and readout
multiplier, so those are refused on export.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import config as config_lib
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import mup
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax.model_config import ModelConfig

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"

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
                   "position", "rope_base", "bias")

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
# What to do about a JSON file of a Hugging Face directory that is not valid JSON.
_JSON_FIX = "save the directory again (save_pretrained or python -m experiments.export)"


class InteropError(errors.AndreaError):
  """A checkpoint or model that cannot be converted as asked; the message says why."""


class UnexportableError(InteropError, errors.ConfigError):
  """A model variant that GPT-2's weights and config cannot express."""


# ----------------------------------------------------------------------------- configs


def check_exportable(cfg: ModelConfig) -> None:
  """Refuse the ANDREA variants that a GPT-2 checkpoint cannot express."""
  if cfg.norm != "pre":
    raise UnexportableError(f"model.norm={cfg.norm!r}: GPT-2 blocks are pre-norm (x + F(LN(x)) "
                            f"with a final ln_f); only model.norm='pre' can be written as GPT-2 "
                            f"weights")
  if cfg.norm_depth_scaling:
    raise UnexportableError("model.norm_depth_scaling=True: GPT-2's blocks do not scale their "
                            "LayerNorm outputs by 1/sqrt(layer); only norm_depth_scaling=False "
                            "can be written as GPT-2 weights")
  if cfg.norm_type != "layernorm":
    raise UnexportableError(f"model.norm_type={cfg.norm_type!r}: GPT-2's norms are LayerNorms "
                            f"(scale and bias); only norm_type=layernorm can be written as GPT-2 "
                            f"weights")
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


# ----------------------------------------------------------------------------- files


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
  from safetensors import safe_open  # pylint: disable=import-outside-toplevel
  # The flax (JAX) view, because numpy has no bfloat16 and half-precision checkpoints exist.
  try:
    with safe_open(path, framework="flax") as f:
      return {k: np.asarray(f.get_tensor(k), np.float32) for k in f.keys()}
  except Exception as e:  # safetensors raises its own SafetensorError for a bad header
    raise InteropError(f"{path} is not a readable safetensors file ({type(e).__name__}: {e}); "
                       f"re-download or re-export it") from e


def _read_pytorch_bin(path: str) -> dict[str, np.ndarray]:
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise InteropError(f"{path} is a PyTorch checkpoint and torch is not installed: "
                       f"`pip install -r requirements-interop.txt`, or convert it to "
                       f"model.safetensors") from e
  try:
    # weights_only: the unpickler accepts tensors and plain containers, never code.
    state = torch.load(path, map_location="cpu", weights_only=True)
  except Exception as e:  # UnpicklingError for code, RuntimeError and others for junk
    raise InteropError(f"{path} was refused: it is not a weights-only PyTorch state dict "
                       f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}). "
                       f"andrea_jax never unpickles code; convert the checkpoint to "
                       f"model.safetensors with a trusted tool") from e
  if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
    raise InteropError(f"{path} does not hold a state dict of tensors (found {type(state).__name__}); "
                       f"save it with torch.save(model.state_dict(), path)")
  return {k: v.detach().to(torch.float32).numpy() for k, v in state.items()}


def read_tensors(hf_dir: str) -> tuple[dict[str, np.ndarray], str]:
  """The checkpoint's tensors (float32 numpy) and the file they came from; safetensors first."""
  single, index, pt = (os.path.join(hf_dir, n) for n in (SAFETENSORS, SAFETENSORS_INDEX, PYTORCH_BIN))
  if os.path.isfile(single):
    return _read_safetensors(single), single
  if os.path.isfile(index):
    shards = sorted(set(files.read_json(index, _JSON_FIX, InteropError)["weight_map"].values()))
    tensors = {}
    for shard in shards:
      tensors.update(_read_safetensors(os.path.join(hf_dir, shard)))
    return tensors, index
  if os.path.isfile(pt):
    return _read_pytorch_bin(pt), pt
  raise InteropError(f"{hf_dir} has no {SAFETENSORS}, {SAFETENSORS_INDEX} or {PYTORCH_BIN}: "
                     f"expected a directory written by save_pretrained or experiments.export")


def resolve_hf_dir(hf_dir: str) -> str:
  """A local directory for ``hf_dir``: the directory itself, else a published model's name
  (``gpt2``, ``openai-community/gpt2-medium``) fetched from the Hugging Face Hub into its
  cache (``huggingface_hub.snapshot_download``: needs the network the first time)."""
  if os.path.isdir(hf_dir):
    return hf_dir
  if os.path.exists(hf_dir):
    raise InteropError(f"--hf_dir={hf_dir!r} is a file: pass a Hugging Face GPT-2 directory "
                       f"(save_pretrained or python -m experiments.export) or a model name")
  try:
    from huggingface_hub import snapshot_download  # pylint: disable=import-outside-toplevel
    return snapshot_download(repo_id=hf_dir, allow_patterns=[
        "config.json", "*.safetensors", "*.safetensors.index.json", PYTORCH_BIN, "tokenizer.json",
        "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json"])
  except Exception as e:  # pylint: disable=broad-except
    # Offline, an unknown name and a malformed one all land here: say which in one line.
    reason = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
    raise InteropError(f"--hf_dir={hf_dir!r} is not a local directory, and the Hugging Face Hub "
                       f"did not give a model of that name ({type(e).__name__}: {reason}); a "
                       f"published model's name needs the network, or pass a local directory "
                       f"(save_pretrained or python -m experiments.export)") from None


def read_hf_config(hf_dir: str) -> dict:
  path = os.path.join(hf_dir, "config.json")
  if not os.path.isfile(path):
    what = ("is a file" if os.path.isfile(hf_dir) else "has no config.json" if os.path.isdir(hf_dir)
            else "does not exist")
    raise InteropError(f"{hf_dir} {what}: expected a Hugging Face GPT-2 directory "
                       f"(save_pretrained or python -m experiments.export)")
  return files.read_json(path, _JSON_FIX, InteropError)


def import_gpt2(hf_dir: str) -> tuple[dict, ModelConfig]:
  """A local HF GPT-2 directory as ``(params, ModelConfig)`` for ``model.forward`` and ``sample``."""
  cfg = model_config_from_hf(read_hf_config(hf_dir), where=os.path.join(hf_dir, "config.json"))
  tensors, source = read_tensors(hf_dir)
  return from_hf_tensors(tensors, cfg, where=source), cfg


def _tokenizer_files(cfg: ModelConfig) -> dict[str, dict]:
  eot = tokenizer_lib.EOT
  return {
      "tokenizer_config.json": {
          "tokenizer_class": "GPT2Tokenizer", "bos_token": eot, "eos_token": eot, "unk_token": eot,
          "add_prefix_space": False, "add_bos_token": False, "model_max_length": cfg.block_size,
          "clean_up_tokenization_spaces": False,
          # Like tokenizer.load: a literal "<|endoftext|>" in text is bytes, not the EOT id.
          "split_special_tokens": True},
      "special_tokens_map.json": {"bos_token": eot, "eos_token": eot, "unk_token": eot},
  }


def export_gpt2(params: Mapping[str, Any], cfg: ModelConfig, out_dir: str, tokenizer=None) -> None:
  """Write ``params`` as a HF GPT-2 directory: config.json, model.safetensors, tokenizer files."""
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  check_exportable(cfg)
  eot_id = cfg.vocab_size - 1  # the andrea_jax layout puts EOT last
  if tokenizer is not None:
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size != cfg.vocab_size:
      raise InteropError(f"the tokenizer has {size} tokens but the model's vocab_size is "
                         f"{cfg.vocab_size}: export with the tokenizer the model was trained with")
    eot_id = tokenizer_lib.eot_id(tokenizer)
  tensors = to_hf_tensors(params, cfg)
  os.makedirs(out_dir, exist_ok=True)
  files.write_json(os.path.join(out_dir, "config.json"), hf_config(cfg, eot_id))
  # transformers refuses safetensors files without a format tag it knows.
  save_file(tensors, os.path.join(out_dir, SAFETENSORS), metadata={"format": "pt"})
  # safetensors writes through a private temporary file (mode 0600): give the weights the
  # mode of the files written with open(), i.e. what the user's umask allows.
  shutil.copymode(os.path.join(out_dir, "config.json"), os.path.join(out_dir, SAFETENSORS))
  files.write_json(os.path.join(out_dir, "generation_config.json"),
              {"bos_token_id": eot_id, "eos_token_id": eot_id})
  if tokenizer is not None:
    tokenizer_lib.save(tokenizer, os.path.join(out_dir, "tokenizer.json"))
    for name, obj in _tokenizer_files(cfg).items():
      files.write_json(os.path.join(out_dir, name), obj)


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


# ----------------------------------------------------------------------------- fine-tuning


def _vocab(path: str) -> dict:
  from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
  return Tokenizer.from_file(path).get_vocab(with_added_tokens=True)


def init_from(config: config_lib.RunConfig) -> dict:
  """Initial params for ``train_and_evaluate`` from ``config.train.init_from`` (a HF GPT-2 dir).

  The checkpoint must be the model of ``config.model`` (every differing field is named)
  and the run must tokenize with the directory's tokenizer (``data.tokenizer_path``).
  """
  hf_dir = config.train.init_from
  params, hf_cfg = import_gpt2(hf_dir)
  cfg = config.model
  diffs = config_differences(hf_cfg, cfg)
  if diffs:
    fixes = " ".join(f"--config.model.{d.split(':')[0]}={getattr(hf_cfg, d.split(':')[0])!r}"
                     for d in diffs)
    raise InteropError(f"train.init_from={hf_dir!r} is not the model of this config "
                       f"(checkpoint vs config):\n  " + "\n  ".join(diffs)
                       + f"\nset the config to match: {fixes}")
  hf_tok = os.path.join(hf_dir, "tokenizer.json")
  if not config.data.tokenizer_path:
    raise InteropError(f"train.init_from={hf_dir!r} needs the checkpoint's own tokenizer: set "
                       f"--config.data.tokenizer_path={hf_tok}")
  if not os.path.isfile(hf_tok):
    raise InteropError(f"{hf_dir} has no tokenizer.json to check data.tokenizer_path against; "
                       f"write one (AutoTokenizer.from_pretrained(dir).save_pretrained(dir))")
  ours, theirs = _vocab(config.data.tokenizer_path), _vocab(hf_tok)
  if ours != theirs:
    raise InteropError(f"data.tokenizer_path={config.data.tokenizer_path!r} ({len(ours)} tokens) "
                       f"is not the tokenizer of train.init_from ({hf_tok}, {len(theirs)} tokens): "
                       f"set --config.data.tokenizer_path={hf_tok}")
  return jax.tree.map(lambda x: x.astype(jnp.dtype(cfg.param_dtype)), params)
