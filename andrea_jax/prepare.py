"""Preparing a corpus for training: the train/val split, the tokenizer, the token shards
and their cache (``prepare(config)``).

Pipeline: read the documents (``corpus.read_documents``) -> fingerprint them -> split them
into train/val with ``data.split_seed`` -> train a tokenizer on the train split (or load
``data.tokenizer_path``) -> encode -> write one train and one val token shard
(``shards.py``) into ``data.cache_dir/<key>/``, ``meta.json`` last. In the token stream
every document is preceded by the EOT id, so EOT separates documents (as in GPT-2 and
llm.c). The batch order is ``data.shuffle_seed``'s (``loader.py``), outside the cache key:
runs that differ only in it share one tokenizer and one validation set.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from typing import Sequence

import numpy as np
from tqdm import tqdm

from andrea_jax import corpus
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import shards
from andrea_jax import tokenizer as tokenizer_lib

# Bump when the shard contents or cache layout change, so old caches are not reused.
# 2: generated tables left out of the built-in corpus, split by bytes, split_seed.
CACHE_FORMAT = 2


def split_documents(docs: Sequence[str], val_fraction: float,
                    seed: int) -> tuple[list[str], list[str]]:
  """Hold out ``val_fraction`` of the corpus's UTF-8 bytes: ``(train, val)`` documents.

  Documents join the validation side in a seeded order until they reach the fraction;
  the one that crosses the mark is cut at its line break nearest to it (at a character
  if it has none), its head held out and its tail kept for training. So one large file
  cannot take 40 % of the corpus, and a single document can be split too.
  """
  if not 0.0 < val_fraction < 1.0:
    raise errors.DataError(f"data.val_fraction={val_fraction}; expected a fraction strictly "
                           f"between 0 and 1, e.g. 0.05")
  sizes = [len(d.encode("utf-8")) for d in docs]
  order = np.random.default_rng(seed).permutation(len(docs))
  need, held = val_fraction * sum(sizes), 0
  val_ids, cut = [], None
  for i in order:
    if held + sizes[i] > need:
      cut = i
      break
    val_ids.append(i)
    held += sizes[i]
  in_val = set(val_ids)
  val = [docs[i] for i in val_ids]
  train = [d for i, d in enumerate(docs) if i not in in_val and i != cut]
  if cut is not None:
    head, tail = _cut_near(docs[cut], round(need - held))
    val += [head] if head else []
    train += [tail] if tail else []
  if not train or not val:
    raise errors.DataError(f"the corpus ({len(docs)} document(s), {sum(sizes)} bytes) is too small "
                           f"to hold out data.val_fraction={val_fraction} and keep text to train "
                           f"on; add text or change data.val_fraction")
  return train, val


def _cut_near(doc: str, at: int) -> tuple[str, str]:
  """``doc`` cut in two at the line break nearest byte ``at`` (else the character there)."""
  raw = doc.encode("utf-8")
  if not 0 < at < len(raw):
    return (doc, "") if at > 0 else ("", doc)
  before, after = raw.rfind(b"\n", 0, at) + 1, raw.find(b"\n", at) + 1
  breaks = [b for b in (before, after) if 0 < b < len(raw)]
  if breaks:
    at = min(breaks, key=lambda b: abs(b - at))
  else:
    while 0 < at < len(raw) and raw[at] & 0xC0 == 0x80:  # not inside a UTF-8 sequence
      at += 1
  return raw[:at].decode("utf-8"), raw[at:].decode("utf-8")



def encode_documents(tok, docs: Sequence[str], desc: str = "encoding",
                     chunk: int = 256) -> np.ndarray:
  """One uint16 stream: ``EOT doc0 EOT doc1 ...``, encoded in parallel chunks."""
  eot = np.array([tokenizer_lib.eot_id(tok)], dtype=np.uint16)
  parts = []
  with tqdm(total=len(docs), desc=desc, unit="doc", disable=None, leave=False) as bar:
    for i in range(0, len(docs), chunk):
      for ids in tokenizer_lib.encode_batch(tok, docs[i:i + chunk]):
        parts += [eot, np.asarray(ids, dtype=np.uint16)]
      bar.update(len(docs[i:i + chunk]))
  return np.concatenate(parts) if parts else np.zeros(0, np.uint16)



@dataclasses.dataclass(frozen=True)
class PreparedData:
  """A prepared dataset in ``directory``: tokenizer, token shards and their metadata."""
  directory: str
  train_path: str
  val_path: str
  tokenizer_path: str
  fingerprint: str
  train_tokens: int
  val_tokens: int
  train_docs: int
  val_docs: int
  # Share of the corpus held out for validation, in UTF-8 bytes (what the split aims at,
  # data.val_fraction) and in tokens (what the validation loss is measured on).
  val_share_bytes: float
  val_share_tokens: float
  vocab_size: int
  eot_id: int
  # True when the cache was complete and nothing was trained or encoded.
  reused: bool


_file_sha256 = files.sha256


def cache_key(corpus_fingerprint: str, data, vocab_size: int | None = None) -> str:
  """Hash of everything that determines the cached files (``vocab_size``: a fitted one)."""
  if data.tokenizer_path and not os.path.isfile(data.tokenizer_path):
    raise tokenizer_lib.TokenizerNotFoundError(
        f"data.tokenizer_path={data.tokenizer_path!r} does not exist; point it at a "
        f"tokenizer.json or leave it empty to train one")
  source = _file_sha256(data.tokenizer_path) if data.tokenizer_path else "trained"
  # data.shuffle_seed is left out on purpose: the batch order does not touch these files.
  spec = dict(format=CACHE_FORMAT, corpus=corpus_fingerprint,
              vocab_size=vocab_size or data.vocab_size, val_fraction=data.val_fraction,
              split_seed=data.split_seed, tokenizer=source)
  return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


def _check_vocab(config) -> int:
  vocab_size = config.data.vocab_size
  model = config.get("model")
  if model is not None and model.get("vocab_size", vocab_size) != vocab_size:
    raise errors.DataError(f"data.vocab_size={vocab_size} but model.vocab_size="
                           f"{model.vocab_size}; set both to the same value")
  tokenizer_lib.check_vocab_size(vocab_size)
  return vocab_size


def say(message: str) -> None:
  """A progress line on stdout, flushed: a log that is not a terminal shows it at once."""
  print(message, flush=True)


def prepare(config, fit_vocab: bool = False, check=None) -> PreparedData:
  """Tokenizer and train/val shards for ``config``, from the cache when they are there.

  With ``fit_vocab``, a corpus too small to learn ``vocab_size`` tokens gets the
  vocabulary it fills instead of an error (``PreparedData.vocab_size`` says which); the
  cache is then keyed by that size. A failed preparation leaves no cache directory. ``check(fingerprint)``, when
  given, is called once the corpus is read, before any tokenizer is trained (a run refuses
  text other than what it trained on: ``resume.check_same_data``).
  """
  data = config.data
  vocab_size = _check_vocab(config)
  docs = corpus.read_documents(data)
  fp = corpus.fingerprint(docs)
  if check is not None:
    check(fp)
  directory = os.path.join(data.cache_dir, cache_key(fp, data))
  cached = load_prepared(directory)
  if cached is not None:
    return cached
  _make_directory(data.cache_dir, "data.cache_dir", data.cache_dir)  # fail before the work
  mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
  say(f"data: preparing {len(docs):,} documents ({mb:.1f} MB) at vocabulary {vocab_size}; "
      f"the result is cached in {data.cache_dir}")
  splits = dict(zip(("train", "val"), split_documents(docs, data.val_fraction, data.split_seed)))
  if not data.tokenizer_path:  # before the tokenizer is trained (a given one loads at once)
    _check_batch_bound(config, splits["train"])
  tok = _get_tokenizer(data, splits["train"], vocab_size, fit_vocab)
  fitted = tok.get_vocab_size(with_added_tokens=True)
  if fitted != vocab_size:
    say(f"data: this corpus fills a vocabulary of {fitted} tokens, not model.vocab_size="
        f"{vocab_size} ({fitted - 1 - tokenizer_lib.N_BYTES} merges); using {fitted}")
    directory = os.path.join(data.cache_dir, cache_key(fp, data, fitted))
    cached = load_prepared(directory)
    if cached is not None:
      return cached
  return _write_prepared(directory, data, fp, splits, tok)


def _check_batch_bound(config, train_docs: list[str]) -> None:
  """Refuse a batch that cannot fit the training split whatever the tokenizer: a token is
  at least one byte, plus one EOT per document (``loader.check_batch_fits`` checks the
  exact count once the split is encoded)."""
  t, m = config.get("train"), config.get("model")
  if t is None or m is None:
    return
  most = sum(len(d.encode("utf-8")) for d in train_docs) + len(train_docs)
  need = t.batch_size * (m.block_size + 1)
  if need > most:
    raise errors.DataError(
        f"one batch of train.batch_size={t.batch_size} windows of block_size + 1 = "
        f"{m.block_size + 1} tokens is {need:,} tokens, more than the training split can "
        f"hold (at most {most:,} tokens: {len(train_docs)} document(s), a token is at least "
        f"a byte); use a batch_size of at most {max(most // (m.block_size + 1), 1)} (or a "
        f"smaller model.block_size), or more data")


def _write_prepared(directory: str, data, fp: str, splits: dict, tok) -> PreparedData:
  """Write the tokenizer, the shards and meta.json (last) into a new ``directory``."""
  created = not os.path.isdir(directory)
  _make_directory(directory, "data.cache_dir", data.cache_dir)
  try:
    tok_path = os.path.join(directory, "tokenizer.json")
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    tokenizer_lib.save(tok, tok_path)
    tok = tokenizer_lib.load(tok_path, vocab_size)
    meta = dict(format=CACHE_FORMAT, fingerprint=fp, vocab_size=vocab_size,
                eot_id=tokenizer_lib.eot_id(tok), corpus=data.path or "builtin",
                max_docs=data.max_docs, val_fraction=data.val_fraction,
                split_seed=data.split_seed, tokenizer_source=data.tokenizer_path or "trained")
    say("data: encoding the train and validation splits into token shards")
    for name, split in splits.items():
      tokens = encode_documents(tok, split, desc=f"encoding {name}")
      shards.write_shard(os.path.join(directory, f"{name}.bin"), tokens)
      meta.update({f"{name}_docs": len(split), f"{name}_tokens": int(tokens.size),
                   f"{name}_bytes": sum(len(d.encode("utf-8")) for d in split)})
    total = {unit: meta[f"train_{unit}"] + meta[f"val_{unit}"] for unit in ("bytes", "tokens")}
    meta.update(val_share_bytes=meta["val_bytes"] / total["bytes"],
                val_share_tokens=meta["val_tokens"] / total["tokens"])
    # meta.json is written last: its presence marks a complete cache directory.
    files.write_json(os.path.join(directory, "meta.json"), meta)
  except BaseException:
    if created:  # a failed preparation leaves nothing behind
      shutil.rmtree(directory, ignore_errors=True)
    raise
  return _prepared(directory, meta, reused=False)


def _make_directory(directory: str, field: str, value: str) -> None:
  try:
    os.makedirs(directory, exist_ok=True)
  except OSError as e:
    raise errors.DataError(f"{field}={value!r}: cannot create {directory!r} ({e.strerror}); point "
                           f"{field} at a writable directory") from None


def _get_tokenizer(data, train_docs: list[str], vocab_size: int, fit: bool = False):
  if data.tokenizer_path:
    return tokenizer_lib.load(data.tokenizer_path, vocab_size)
  mb = sum(len(d.encode("utf-8")) for d in train_docs) / 1e6
  say(f"data: training a byte-level BPE tokenizer of {vocab_size} tokens on the training "
      f"split ({mb:.1f} MB)")
  texts = tqdm(train_docs, desc="training tokenizer", unit="doc", disable=None, leave=False)
  return tokenizer_lib.train_tokenizer(texts, vocab_size, show_progress=False, fit=fit)


def _prepared(directory: str, meta: dict, reused: bool) -> PreparedData:
  return PreparedData(
      directory=directory, train_path=os.path.join(directory, "train.bin"),
      val_path=os.path.join(directory, "val.bin"),
      tokenizer_path=os.path.join(directory, "tokenizer.json"),
      fingerprint=meta["fingerprint"], train_tokens=meta["train_tokens"],
      val_tokens=meta["val_tokens"], train_docs=meta["train_docs"],
      val_docs=meta["val_docs"], val_share_bytes=meta["val_share_bytes"],
      val_share_tokens=meta["val_share_tokens"], vocab_size=meta["vocab_size"],
      eot_id=meta["eot_id"], reused=reused)


def load_prepared(directory: str) -> PreparedData | None:
  """The complete prepared data in ``directory``, or None if it is missing or partial."""
  meta_path = os.path.join(directory, "meta.json")
  if not os.path.isfile(meta_path):
    return None
  try:
    prepared = _prepared(directory, files.read_json(meta_path), reused=True)
    ok = (len(shards.read_shard(prepared.train_path)) == prepared.train_tokens
          and len(shards.read_shard(prepared.val_path)) == prepared.val_tokens
          and os.path.isfile(prepared.tokenizer_path))
  except (ValueError, KeyError):  # unreadable meta.json or shards: rebuild
    return None
  return prepared if ok else None


def opening_words(prepared: PreparedData, words: int = 5) -> str:
  """The first ``words`` words of the first validation document: a prompt from the data.

  The validation split is held out, so samples from it continue text the model never saw.
  """
  tok = tokenizer_lib.load(prepared.tokenizer_path, prepared.vocab_size)
  val = np.asarray(shards.read_shard(prepared.val_path)[:256], dtype=np.int64)
  starts = np.flatnonzero(val != prepared.eot_id)
  ids = val[starts[0]:] if starts.size else val[:0]
  ends = np.flatnonzero(ids == prepared.eot_id)
  text = tokenizer_lib.decode(tok, ids[:ends[0]] if ends.size else ids)
  match = re.match(rf"\s*(\S+(?:[ \t]+\S+){{0,{words - 1}}})", text)
  return match[1] if match else ""

