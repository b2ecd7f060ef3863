"""Import a local Hugging Face GPT-2 directory: check it, evaluate it, sample it, convert it.

  python -m experiments.import_hf --hf_dir=path/to/gpt2
  python -m experiments.import_hf --hf_dir=path/to/gpt2 --prompt="The meaning of" --temperature=0
  python -m experiments.import_hf --hf_dir=path/to/gpt2 --eval_text=notes.txt
  python -m experiments.import_hf --hf_dir=path/to/gpt2 --out=imported/gpt2

Always prints the model's andrea_jax config and parameter count. ``--eval_text`` prints
the mean next-token loss (nats) over the file's tokens in block_size windows;
``--prompt`` samples a continuation with andrea_jax's own decoder. ``--out`` writes a
copy renumbered to the andrea_jax tokenizer layout (byte b at id b, EOT last; the same
model on text), which ``--config.train.init_from`` and ``data.tokenizer_path`` accept.
"""

import os

import jax
import numpy as np
from absl import flags, logging

from andrea_jax import errors
from andrea_jax import files
from andrea_jax import model
from andrea_jax import sample
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax.interop import gpt2_weights
from andrea_jax.interop import hf_gpt2
from experiments import cli

_HF_DIR = flags.DEFINE_string("hf_dir", None, "a Hugging Face GPT-2 directory, or a published "
                              "model's name (gpt2: fetched from the Hub, online)")
_OUT = flags.DEFINE_string("out", None, "write a bytes-first copy here for fine-tuning")
_EVAL_TEXT = flags.DEFINE_string("eval_text", None, "text file to evaluate the loss on")
_EVAL_WINDOWS = flags.DEFINE_integer("eval_windows", 32, "at most this many windows of --eval_text",
                                     lower_bound=1)
_PROMPT = flags.DEFINE_string("prompt", None, "text to continue (unset = no sample)")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 32, "tokens to generate")
_TEMPERATURE = flags.DEFINE_float("temperature", 0.8, "softmax temperature (0 = greedy)")
_TOP_K = flags.DEFINE_integer("top_k", 50, "keep the k most likely tokens (0 = all)")
_SEED = flags.DEFINE_integer("seed", 0, "sampling seed")


def load_tokenizer(hf_dir: str):
  path = os.path.join(hf_dir, "tokenizer.json")
  try:
    from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
    return Tokenizer.from_file(path)
  except Exception as e:  # a missing file or one tokenizers cannot parse
    raise hf_gpt2.InteropError(f"cannot load {path} ({e}); --prompt, --eval_text and --out need "
                               f"the directory's tokenizer.json") from e


def read_text(path: str) -> str:
  """The text of ``--eval_text``, or one line saying why it cannot be read."""
  if not os.path.isfile(path):
    what = "is a directory" if os.path.isdir(path) else "does not exist"
    raise errors.ConfigError(f"--eval_text={path!r} {what}: pass a UTF-8 text file")
  with open(path, "rb") as f:
    raw = f.read()
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise errors.DataError(f"--eval_text={path!r}: not valid UTF-8 at byte offset {e.start} "
                           f"({e.reason}); pass a UTF-8 text file") from None


def text_loss(params, cfg, tok, path: str, text: str, max_windows: int) -> tuple[float, int]:
  """Mean next-token loss over non-overlapping ``block_size + 1`` windows of ``text`` (the
  file ``path``'s, read before the model is)."""
  ids = np.asarray(tokenizer_lib.encode(tok, text), np.int32)
  T = cfg.block_size
  n = min(max_windows, (len(ids) - 1) // T)
  if n < 1:
    raise errors.DataError(f"{path} has {len(ids)} tokens, fewer than block_size + 1 = {T + 1}: "
                           f"use a longer text")
  windows = np.stack([ids[i * T:i * T + T + 1] for i in range(n)])
  loss = jax.jit(model.loss_fn, static_argnums=3)
  return float(np.mean([loss(params, w[None, :-1], w[None, 1:], cfg) for w in windows])), n * T


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  out_purpose = "for the bytes-first copy (a new one, or one to overwrite)"
  if _OUT.value:  # before the model is read
    files.check_directory(_OUT.value, "--out", out_purpose)
  text = read_text(_EVAL_TEXT.value) if _EVAL_TEXT.value else None  # likewise
  hf_dir = hf_gpt2.resolve_hf_dir(_HF_DIR.value)  # a directory, or a model name fetched once
  params, cfg = hf_gpt2.import_gpt2(hf_dir)
  print(f"imported {_HF_DIR.value}: {model.count_params(cfg):,} parameters\n{cfg}")
  needs_tok = _EVAL_TEXT.value or _PROMPT.value is not None or _OUT.value
  tok = load_tokenizer(hf_dir) if needs_tok else None
  if _EVAL_TEXT.value:
    loss, n = text_loss(params, cfg, tok, _EVAL_TEXT.value, text, _EVAL_WINDOWS.value)
    print(f"loss on {_EVAL_TEXT.value}: {loss:.4f} nats/token over {n} predicted tokens")
  if _PROMPT.value is not None:
    text = sample.generate_text(params, cfg, tok, _PROMPT.value, _MAX_NEW.value,
                                jax.random.key(_SEED.value), temperature=_TEMPERATURE.value,
                                top_k=_TOP_K.value)
    print(f"--- sample ---\n{_PROMPT.value}{text}")
  if _OUT.value:
    new_params, new_tok = gpt2_weights.bytes_first(params, cfg, tok)
    files.make_directory(_OUT.value, "--out", out_purpose)
    hf_gpt2.export_gpt2(new_params, cfg, _OUT.value, tokenizer=new_tok)
    print(f"wrote {_OUT.value}: fine-tune with --config.train.init_from={_OUT.value} "
          f"--config.data.tokenizer_path={_OUT.value}/tokenizer.json")


if __name__ == "__main__":
  flags.mark_flag_as_required("hf_dir")
  cli.run(main)
