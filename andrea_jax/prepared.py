"""The prepared data (``PreparedData``) and its cache directory: the key that names the
directory (``cache_key``), the directory made (``make_directory``), the ``manifest.json``
written last (``finish``) and read back with its shards checked (``load_prepared``); token
shards prepared elsewhere, read where they are (``existing_shards``); and a prompt from the
held-out text (``opening_words``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from typing import TYPE_CHECKING

import numpy as np

from andrea_jax import corpus
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import shards
from andrea_jax import split as split_lib
from andrea_jax import tokenizer as tokenizer_lib

if TYPE_CHECKING:  # for the annotations alone: preparing data needs no JAX
  from andrea_jax.config import DataConfig

# Bump when the shard contents or cache layout change, so old caches are not reused.
# 2: generated tables left out of the built-in corpus, split by bytes, split_seed.
# 3: streamed: the block hash split, sampled tokenizer, fixed-size shards, manifest.json.
# 4: tokens a function of the documents alone: the block size from the text's bytes, blocks cut
#    across a document's pieces, the tokenizer's sample the training runs of lowest hash.
CACHE_FORMAT = 4


@dataclasses.dataclass(frozen=True)
class PreparedData:
  """Prepared data: a tokenizer and token shards (train and validation) with their counts."""
  directory: str
  train_paths: tuple[str, ...]
  val_paths: tuple[str, ...]
  tokenizer_path: str
  fingerprint: str
  train_tokens: int
  val_tokens: int
  # Documents on each side (a document split by a held-out block counts on both); None
  # for shards prepared elsewhere (data.shards), whose documents are not counted.
  train_docs: int | None
  val_docs: int | None
  # Share held out, in UTF-8 bytes (None for data.shards) and in tokens.
  val_share_bytes: float | None
  val_share_tokens: float
  vocab_size: int
  eot_id: int
  # True when the cache was complete and nothing was trained or encoded.
  reused: bool

  def stream(self, side: str) -> shards.TokenStream:
    """The ``"train"`` or ``"val"`` shards as one token stream."""
    return shards.TokenStream(self.train_paths if side == "train" else self.val_paths)


def cache_key(fingerprint: str, data: DataConfig, vocab_size: int | None = None) -> str:
  """Hash of everything that determines the cached files (``vocab_size``: a fitted one)."""
  if data.tokenizer_path:
    tokenizer_lib.check_file(data.tokenizer_path, "data.tokenizer_path",
                             "point it at a tokenizer.json or leave it empty to train one")
  source = files.sha256(data.tokenizer_path) if data.tokenizer_path else "trained"
  # data.shuffle_seed is left out on purpose: the batch order does not touch these files.
  spec = dict(format=CACHE_FORMAT, corpus=fingerprint, vocab_size=vocab_size or data.vocab_size,
              val_fraction=data.val_fraction, split_seed=data.split_seed, tokenizer=source,
              val_max_bytes=data.val_max_bytes, shard_tokens=data.shard_tokens,
              sample_bytes=data.tokenizer_sample_bytes, text_field=data.text_field,
              read=[data.extensions, data.doc_separator, data.utf8_errors, data.max_docs])
  return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


def make_directory(directory: str) -> None:
  """``directory`` (``data.cache_dir`` or an entry of it) made, or one line naming it."""
  files.make_directory(directory, "data.cache_dir", "for the prepared data "
                       "(--config.data.cache_dir=...)", errors.DataError)


def is_whole(directory: str, entry: dict) -> bool:
  """Whether a shard that a manifest or ``progress.json`` lists is whole on disk: its
  header and size hold its token count."""
  try:
    return shards.shard_count(os.path.join(directory, entry["file"])) == entry["tokens"]
  except errors.DataError:
    return False


def finish(directory: str, data: DataConfig, fp: str, tok, sample: dict,
           splitter: split_lib.Splitter, writers: dict) -> PreparedData:
  """``manifest.json`` (written last: its presence marks a complete directory)."""
  manifest = dict(
      format=CACHE_FORMAT, fingerprint=fp, content_sha256=splitter.content.hexdigest(),
      vocab_size=tok.get_vocab_size(with_added_tokens=True), eot_id=tokenizer_lib.eot_id(tok),
      corpus=data.path or data.hf_dataset or "builtin", max_docs=data.max_docs,
      val_fraction=data.val_fraction, val_max_bytes=data.val_max_bytes,
      split_seed=data.split_seed, split_block_chars=splitter.block_chars,
      shard_tokens=data.shard_tokens, tokenizer_source=data.tokenizer_path or "trained",
      tokenizer_sample=sample)
  for side in split_lib.SIDES:
    manifest[side] = dict(shards=writers[side].shards, tokens=writers[side].tokens,
                          docs=splitter.docs[side], bytes=splitter.bytes[side])
  total_bytes = sum(splitter.bytes.values())
  total_tokens = writers["train"].tokens + writers["val"].tokens
  manifest.update(val_share_bytes=splitter.bytes["val"] / total_bytes,
                  val_share_tokens=writers["val"].tokens / total_tokens)
  files.write_json(os.path.join(directory, "manifest.json"), manifest)
  if os.path.exists(os.path.join(directory, "progress.json")):
    os.remove(os.path.join(directory, "progress.json"))
  return _prepared(directory, manifest, reused=False)


def _prepared(directory: str, manifest: dict, reused: bool) -> PreparedData:
  paths = {side: tuple(os.path.join(directory, s["file"]) for s in manifest[side]["shards"])
           for side in split_lib.SIDES}
  return PreparedData(
      directory=directory, train_paths=paths["train"], val_paths=paths["val"],
      tokenizer_path=os.path.join(directory, "tokenizer.json"),
      fingerprint=manifest["fingerprint"], train_tokens=manifest["train"]["tokens"],
      val_tokens=manifest["val"]["tokens"], train_docs=manifest["train"]["docs"],
      val_docs=manifest["val"]["docs"], val_share_bytes=manifest["val_share_bytes"],
      val_share_tokens=manifest["val_share_tokens"], vocab_size=manifest["vocab_size"],
      eot_id=manifest["eot_id"], reused=reused)


def load_prepared(directory: str) -> PreparedData | None:
  """The complete prepared data in ``directory``, or None if it is missing or partial.

  Each shard's header and size are checked against the manifest, not its contents: a
  start reads no token (the manifest's sha256 are there to verify a copy)."""
  path = os.path.join(directory, "manifest.json")
  if not os.path.isfile(path):
    return None
  try:
    manifest = files.read_json(path)
    prepared = _prepared(directory, manifest, reused=True)
    ok = (all(is_whole(directory, s) for side in split_lib.SIDES for s in manifest[side]["shards"])
          and os.path.isfile(prepared.tokenizer_path))
  except (errors.AndreaError, ValueError, KeyError, TypeError):  # unreadable: rebuild
    return None
  return prepared if ok else None


def existing_shards(data: DataConfig, vocab_size: int, check=None) -> PreparedData:
  """Token shards prepared elsewhere (llm.c, modded-nanogpt: ``data.shards``), with the
  tokenizer they were made with (``data.tokenizer_path``), read where they are."""
  found = shards.find_shards(data.shards)
  if not data.tokenizer_path:
    raise errors.DataError(
        f"data.shards={data.shards!r} needs data.tokenizer_path: the tokenizer.json the shards "
        f"were made with (for llm.c's GPT-2 shards, GPT-2's tokenizer.json, with "
        f"--config.model.vocab_size=50257)")
  tok = tokenizer_lib.load(data.tokenizer_path, vocab_size)
  paths = found["train"] + found["val"]
  fp = corpus.source_fingerprint(corpus.Source(f"data.shards={data.shards!r}", tuple(paths)), data)
  if check is not None:
    check(fp)
  counts = {side: sum(shards.shard_count(p) for p in found[side]) for side in split_lib.SIDES}
  return PreparedData(
      directory=os.path.dirname(os.path.abspath(paths[0])), train_paths=tuple(found["train"]),
      val_paths=tuple(found["val"]), tokenizer_path=data.tokenizer_path, fingerprint=fp,
      train_tokens=counts["train"], val_tokens=counts["val"], train_docs=None, val_docs=None,
      val_share_bytes=None, val_share_tokens=counts["val"] / sum(counts.values()),
      vocab_size=vocab_size, eot_id=tokenizer_lib.eot_id(tok), reused=True)


def opening_words(prepared: PreparedData, words: int = 5) -> str:
  """The first ``words`` words of the first validation document: a prompt from the data.

  The validation split is held out, so samples from it continue text the model never saw.
  """
  tok = tokenizer_lib.load(prepared.tokenizer_path, prepared.vocab_size)
  val = np.asarray(prepared.stream("val")[:256], dtype=np.int64)
  starts = np.flatnonzero(val != prepared.eot_id)
  ids = val[starts[0]:] if starts.size else val[:0]
  ends = np.flatnonzero(ids == prepared.eot_id)
  return first_words(tokenizer_lib.decode(tok, ids[:ends[0]] if ends.size else ids), words)


def first_words(text: str, words: int = 5) -> str:
  """The first ``words`` words of ``text`` on its first line (``opening_words``)."""
  match = re.match(rf"\s*(\S+(?:[ \t]+\S+){{0,{words - 1}}})", text)
  return match[1] if match else ""
