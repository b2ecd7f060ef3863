"""Hugging Face GPT-2 checkpoints in and out: ``export_gpt2`` and ``import_gpt2``, and
``init_from``, a fine-tuning run's initial params from a GPT-2 directory.

Export writes ``model.safetensors`` with ``safetensors.numpy`` (no PyTorch needed);
a tied head is not written (transformers ties ``lm_head.weight`` to ``wte`` itself).
Import reads ``model.safetensors`` (or a sharded ``model.safetensors.index.json``) and
only then ``pytorch_model.bin``, through ``torch.load(weights_only=True)``: loading never
runs code from the checkpoint. The causal-mask buffers ``attn.bias``/``attn.masked_bias``
of older checkpoints are not weights and are skipped; every other tensor must be
expected and of the expected shape.

The parts, one job each: the config (``config.json`` against ``ModelConfig``, what GPT-2
cannot express, and ``InteropError``) is ``gpt2_config.py``; the weights (the mapping of
the state dict's tensors to our params, and ``bytes_first``) are ``gpt2_weights.py``. The
names their users call through this module are re-exported here.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import config as config_lib
from andrea_jax import files
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax.interop.gpt2_config import (InteropError, check_exportable, config_differences,
                                            hf_config, model_config_from_hf)
from andrea_jax.interop.gpt2_weights import from_hf_tensors, to_hf_tensors
from andrea_jax.model import ModelConfig
# Re-exported: what callers of ``hf_gpt2.X`` used before these moved (module docstring).
from andrea_jax.interop.gpt2_config import UnexportableError as UnexportableError
from andrea_jax.interop.gpt2_weights import bytes_first as bytes_first

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"
# What to do about a JSON file of a Hugging Face directory that is not valid JSON.
_JSON_FIX = "save the directory again (save_pretrained or python -m experiments.export)"


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
  if os.path.isabs(hf_dir) or hf_dir.startswith((".", "~")):  # a path, never a Hub name
    raise InteropError(f"--hf_dir={hf_dir!r} does not exist: pass a Hugging Face GPT-2 directory "
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
