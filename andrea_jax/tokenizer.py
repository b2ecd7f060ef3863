"""Byte-level BPE tokenizer, trained and run by Hugging Face ``tokenizers``.

Layout of a vocabulary of size V (e.g. 2305 = 256 + 2048 + 1):

* ids 0..255 are the 256 single bytes, id b being byte b, so every string encodes;
* ids 256..V-2 are the learned merges, in the order the trainer learned them;
* id V-1 is ``<|endoftext|>`` (EOT), the document separator of the token stream.

Round trips are exact: no normalizer, ``add_prefix_space=False`` (no space is invented
in front of the text) and ``trim_offsets=False``, so ``decode(tok, encode(tok, s)) == s``
for every Unicode string ``s``.

EOT in document text: ``encode`` never produces the EOT id, even when the text contains
the literal string ``"<|endoftext|>"`` (it is encoded as ordinary bytes), so a document
cannot forge a document boundary; the data pipeline inserts EOT ids itself. This is the
``encode_special_tokens = True`` setting of ``tokenizers``, which is not stored in
``tokenizer.json``: ``load`` sets it, while a plain ``Tokenizer.from_file`` (or
``transformers``) maps the literal string to the EOT id unless it is set there too.

If the corpus is too small to learn all V-257 merges the trainer stops short and
``train_tokenizer`` raises ``TokenizerError`` naming both sizes (no silent padding), or
with ``fit=True`` returns the smaller vocabulary the corpus fills.
``TokenizerError`` is an ``errors.DataError``: the entry points print it as one line.

Bytes per token: every id but EOT stands for a fixed byte string (``token_byte_lengths``),
so a token stream's UTF-8 size is the sum of its ids' lengths; bits per byte follow from
the loss in nats per token.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Iterable, Sequence

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from andrea_jax import errors
from andrea_jax import files

EOT = "<|endoftext|>"
N_BYTES = 256


class TokenizerError(errors.DataError):
  """A tokenizer that cannot be trained or loaded as asked."""


class TokenizerNotFoundError(TokenizerError, FileNotFoundError):
  """A tokenizer file that does not exist."""


def byte_to_unicode() -> dict[int, str]:
  """GPT-2's byte -> printable character table, the one ``ByteLevel`` uses for tokens."""
  # Printable Latin-1 bytes stand for themselves; the rest are shifted past 255 so
  # that no token string contains whitespace or control characters.
  keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
      + list(range(ord("®"), ord("ÿ") + 1))
  table, shift = {}, 0
  for b in range(N_BYTES):
    if b in keep:
      table[b] = chr(b)
    else:
      table[b] = chr(N_BYTES + shift)
      shift += 1
  return table


def _empty_tokenizer() -> Tokenizer:
  tok = Tokenizer(models.BPE())
  # add_prefix_space=False and trim_offsets=False keep encode/decode exact inverses.
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                               use_regex=True)
  tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False)
  return tok


def _bytes_first(tok: Tokenizer) -> Tokenizer:
  """Renumber a trained BPE so id b is byte b; merge order (its rank) is unchanged."""
  spec = json.loads(tok.to_str())
  vocab = spec["model"]["vocab"]
  table = byte_to_unicode()
  learned = sorted((i, s) for s, i in vocab.items() if s not in set(table.values()))
  new_vocab = {table[b]: b for b in range(N_BYTES)}
  new_vocab.update({s: N_BYTES + k for k, (_, s) in enumerate(learned)})
  spec["model"]["vocab"] = new_vocab
  return Tokenizer.from_str(json.dumps(spec))


def _configure(tok: Tokenizer) -> Tokenizer:
  # Text containing "<|endoftext|>" is encoded as bytes, never as the EOT id.
  tok.encode_special_tokens = True
  return tok


def train_tokenizer(texts: Iterable[str], vocab_size: int, *,
                    show_progress: bool | None = None, fit: bool = False) -> Tokenizer:
  """Train a byte-level BPE of exactly ``vocab_size`` ids (256 bytes + merges + EOT).

  A corpus with fewer merges to learn is an error, or with ``fit`` gets the smaller
  vocabulary it fills (every merge it has).
  """
  check_vocab_size(vocab_size)
  if show_progress is None:
    show_progress = sys.stderr.isatty()
  tok = _empty_tokenizer()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size - 1, min_frequency=0,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                special_tokens=[], show_progress=show_progress)
  tok.train_from_iterator(texts, trainer)
  if fit:
    vocab_size = min(vocab_size, tok.get_vocab_size() + 1)
  if tok.get_vocab_size() != vocab_size - 1:
    learned = tok.get_vocab_size() - N_BYTES
    raise TokenizerError(
        f"the training corpus is too small for vocab_size={vocab_size}: the trainer found "
        f"only {learned} merges, {vocab_size - 1 - N_BYTES} are needed "
        f"({N_BYTES} bytes + merges + 1 EOT); use more text or a vocab_size of at most "
        f"{tok.get_vocab_size() + 1}")
  tok = _bytes_first(tok)
  tok.add_special_tokens([EOT])
  check_layout(tok, vocab_size)
  return _configure(tok)


def check_vocab_size(vocab_size: int) -> None:
  """Room for the 256 bytes and EOT; uint16 token shards need vocab_size <= 65536."""
  if not N_BYTES + 1 <= vocab_size <= 65536:
    raise TokenizerError(f"vocab_size={vocab_size} is out of range: expected "
                         f"{N_BYTES + 1}..65536 (256 bytes + merges + 1 EOT; token shards "
                         f"store ids as uint16); pick a vocab_size in that range")


def check_layout(tok: Tokenizer, vocab_size: int, where: str = "tokenizer",
                 bytes_first: bool = True) -> None:
  """Fail unless ``tok`` has ``vocab_size`` ids, EOT last and (``bytes_first``) bytes at
  0..255. Without ``bytes_first``: every byte has some id (a byte-level BPE such as GPT-2's,
  whose llm.c token shards train here through ``data.shards``)."""
  found = tok.get_vocab_size(with_added_tokens=True)
  if found != vocab_size:
    raise TokenizerError(f"{where} has {found} tokens, expected vocab_size={vocab_size}; "
                         f"train a new one or set data.vocab_size/model.vocab_size to {found}")
  table = byte_to_unicode()
  wrong = [b for b in range(N_BYTES) if (tok.token_to_id(table[b]) != b if bytes_first
                                        else tok.token_to_id(table[b]) is None)]
  if wrong and not bytes_first:
    raise TokenizerError(f"{where} has no token for byte {wrong[0]}: it is not a byte-level "
                         f"BPE (GPT-2's or one trained by andrea_jax.tokenizer)")
  if wrong:
    raise TokenizerError(f"{where} does not map byte b to id b (first wrong byte: {wrong[0]}); "
                         f"expected a byte-level BPE trained by andrea_jax.tokenizer")
  if tok.token_to_id(EOT) != vocab_size - 1:
    raise TokenizerError(f"{where} has {EOT} at id {tok.token_to_id(EOT)}, expected the last "
                         f"id {vocab_size - 1}; train it with andrea_jax.tokenizer")


def save(tok: Tokenizer, path: str | os.PathLike) -> None:
  """Write a standard ``tokenizer.json`` atomically (temp file, then rename)."""
  files.atomic_write(path, tok.to_str(pretty=False).encode("utf-8"))


# What the error for a missing (or a directory) or an unreadable tokenizer file says to do,
# unless the caller knows better.
MISSING_FIX = "train one with `python -m experiments.prepare` or fix data.tokenizer_path"
LOAD_FIX = ("point data.tokenizer_path at a file written by andrea_jax.tokenizer.save, or "
            "delete it and re-prepare")


def check_file(path: str | os.PathLike, name: str | None = None, fix: str = MISSING_FIX) -> None:
  """Refuse a tokenizer path (of the field ``name``, if given) that does not exist or is a
  directory, with one line naming it and ``fix``."""
  path = os.fspath(path)
  subject = f"{name}={path!r}" if name else f"tokenizer file {path!r}"
  if os.path.isdir(path):
    inside = os.path.join(path, "tokenizer.json")
    hint = f" (the one in it is {inside!r})" if os.path.isfile(inside) else ""
    raise TokenizerError(f"{subject} is a directory, not a tokenizer.json{hint}; {fix}")
  if not os.path.isfile(path):
    raise TokenizerNotFoundError(f"{subject} does not exist; {fix}")


def load(path: str | os.PathLike, vocab_size: int | None = None,
         bytes_first: bool = False, fix: str | None = None) -> Tokenizer:
  """Load a ``tokenizer.json``; with ``vocab_size`` also check the id layout: its size, EOT
  last, every byte encodable (and with ``bytes_first`` byte b at id b, as ``prepare`` trains
  them; GPT-2's own tokenizer, for llm.c's shards, has its bytes in another order). ``fix``:
  what the error for a missing or unreadable file says to do."""
  check_file(path, fix=fix or MISSING_FIX)
  try:
    tok = Tokenizer.from_file(os.fspath(path))
  except Exception as e:  # the Rust library raises a bare Exception for unreadable files
    raise TokenizerError(f"{os.fspath(path)!r} is not a readable tokenizer.json ({e}); "
                         f"{fix or LOAD_FIX}") from None
  if vocab_size is not None:
    check_layout(tok, vocab_size, where=f"tokenizer {os.fspath(path)!r}", bytes_first=bytes_first)
  return _configure(tok)


def eot_id(tok: Tokenizer) -> int:
  """The id of ``<|endoftext|>`` (the last id)."""
  i = tok.token_to_id(EOT)
  if i is None:
    raise TokenizerError(f"tokenizer has no {EOT} token; train it with andrea_jax.tokenizer")
  return i


def encode(tok: Tokenizer, text: str) -> list[int]:
  """Token ids of ``text``; a literal ``<|endoftext|>`` in it is encoded as plain bytes."""
  _configure(tok)
  return tok.encode(text, add_special_tokens=False).ids


def encode_batch(tok: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
  """``encode`` of many texts, in parallel on all cores (the library's ``encode_batch``)."""
  _configure(tok)
  # encode_batch_fast skips computing character offsets, which we never use.
  batch = getattr(tok, "encode_batch_fast", tok.encode_batch)
  return [e.ids for e in batch(list(texts), add_special_tokens=False)]


def decode(tok: Tokenizer, ids: Sequence[int]) -> str:
  """The text of ``ids``; EOT ids come out as ``<|endoftext|>``."""
  return tok.decode(list(ids), skip_special_tokens=False)


def token_byte_lengths(tok: Tokenizer) -> np.ndarray:
  """``[vocab]`` int32: the UTF-8 bytes each id decodes to (EOT 0, it is not text).

  Every ordinary token is a string over ``byte_to_unicode``'s alphabet, one character per
  byte, so its byte length is its string length. ``lengths[ids].sum()`` is the size of the
  decoded text; bits per byte = loss (nats/token) * tokens / (bytes * ln 2).
  """
  eot = eot_id(tok)
  vocab = tok.get_vocab_size(with_added_tokens=True)
  lengths = np.array([len(tok.id_to_token(i)) for i in range(vocab)], dtype=np.int32)
  lengths[eot] = 0
  return lengths
