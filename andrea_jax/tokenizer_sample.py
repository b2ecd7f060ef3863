"""The tokenizer a preparation encodes with (``docs/corpus.md``, step 3): the one an
interrupted preparation saved in its cache directory, the given ``data.tokenizer_path``, or a
byte-level BPE trained on a seeded bottom-k sample of the training runs, at most
``data.tokenizer_sample_bytes`` (``sample_runs``); and its files (``tokenizer.json``,
``sample.json``) moved to a fitted vocabulary's cache directory.
"""

from __future__ import annotations

import heapq
import os
from typing import TYPE_CHECKING, Iterator

from andrea_jax import errors
from andrea_jax import files
from andrea_jax import loader as loader_lib
from andrea_jax import prepared as prepared_lib
from andrea_jax import progress as progress_lib
from andrea_jax import signals as signals_lib
from andrea_jax import split as split_lib
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax.progress import say

if TYPE_CHECKING:  # for the annotations alone: preparing data needs no JAX
  from andrea_jax.config import RunConfig


def load_or_train(directory: str, config: RunConfig, source, fit: bool):
  """``(tokenizer, sample record)``: the one an interrupted preparation saved, the given
  ``data.tokenizer_path``, or one trained on a seeded sample of the training runs."""
  data, vocab_size = config.data, config.data.vocab_size
  path = os.path.join(directory, "tokenizer.json")
  saved = files.read_json(os.path.join(directory, "sample.json"))
  if saved is not None and os.path.isfile(path):
    say(f"data: resuming in {directory} with its tokenizer")
    return tokenizer_lib.load(path, saved["vocab_size"]), saved
  if data.tokenizer_path:
    tok = tokenizer_lib.load(data.tokenizer_path, vocab_size)
    sample = {"bytes": 0, "block_chars": split_lib.split_block_chars(source, data)}
  else:
    tok, sample = _train_on_sample(config, source, fit)
  prepared_lib.make_directory(directory)
  tokenizer_lib.save(tok, path)
  sample["vocab_size"] = tok.get_vocab_size(with_added_tokens=True)
  files.write_json(os.path.join(directory, "sample.json"), sample)
  return tokenizer_lib.load(path, sample["vocab_size"]), sample


def move_tokenizer(directory: str, to: str) -> None:
  """The fitted tokenizer's files, to the directory keyed by its size."""
  os.makedirs(to, exist_ok=True)
  for name in ("tokenizer.json", "sample.json"):
    os.replace(os.path.join(directory, name), os.path.join(to, name))


def _train_on_sample(config: RunConfig, source, fit: bool):
  """A tokenizer trained on the training runs of lowest keyed hash that fill
  ``data.tokenizer_sample_bytes`` (all of a small corpus's training split)."""
  data, limit = config.data, config.data.tokenizer_sample_bytes
  if limit < 1:
    raise errors.DataError(f"data.tokenizer_sample_bytes={limit}; expected a positive size, "
                           f"e.g. 200_000_000")
  sample = {"limit": limit, "block_chars": split_lib.split_block_chars(source, data)}
  splitter = split_lib.Splitter(data, sample["block_chars"])
  with progress_lib.Progress("sampling text for the tokenizer", source.total_bytes) as bar:
    kept = sample_runs(split_lib.runs(source, data, splitter, bar),
                       f"andrea-sample-{data.split_seed}".encode(), limit)
  split_lib.check_split(splitter, source)  # first: no batch or block size fixes it
  sample.update(bytes=sum(len(raw) for _, raw in kept), runs=len(kept),
                complete=len(kept) == splitter.runs["train"])  # the whole training split
  say(f"data: training a byte-level BPE tokenizer of {data.vocab_size} tokens on a sample of "
      f"the training split ({sample['bytes'] / 1e6:,.1f} MB, at most "
      f"data.tokenizer_sample_bytes={limit:,})")
  signals_lib.set_phase("training the tokenizer")
  texts = (raw.decode("utf-8") for _, raw in kept)  # in the stream's order
  tok = tokenizer_lib.train_tokenizer(texts, data.vocab_size, show_progress=False, fit=fit)
  signals_lib.check()
  if not split_lib.batch_may_fit(config, splitter):  # refused before anything is cached
    check_fits(config, source, tok, sample["block_chars"])
  return tok, sample


def check_fits(config: RunConfig, source, tok, block_chars: int) -> None:
  """Refuse a split smaller than one batch with settings that pass every later check
  (``loader.check_fits``), from its exact token counts with ``tok``: a split this small
  encodes in a moment, and a bound in bytes would suggest a batch the tokens cannot hold.
  The samples' prompt is the longer of ``sample.prompt`` and the opening words of the
  first held-out document (what ``experiments/cli.py`` gives a run on its own data)."""
  data, t, s = config.data, config.train, config.sample
  tokens, opening = {side: 0 for side in split_lib.SIDES}, None
  for run in split_lib.runs(source, data, split_lib.Splitter(data, block_chars)):
    tokens[run.side] += len(tokenizer_lib.encode(tok, run.text)) + run.starts
    if opening is None and run.side == "val":
      opening = prepared_lib.first_words(run.text)
  prompt = max(len(tokenizer_lib.encode(tok, text)) for text in (s.prompt, opening or ""))
  loader_lib.check_fits(tokens["train"], tokens["val"], t.batch_size, config.model.block_size,
                        f"the split of {source.name}", multiple=t.grad_accum_steps,
                        prompt=max(prompt, 1), new_tokens=s.max_new_tokens * (s.num_samples > 0))


def sample_runs(runs: Iterator[split_lib.Run], key: bytes, limit: int) -> list[tuple[int, bytes]]:
  """``(index, UTF-8 text)`` of the training runs whose keyed hashes are the lowest, as many as
  fill ``limit`` bytes (the one that crosses it included), in the stream's order.

  A bottom-k sample (by bytes): which runs it holds is a function of the runs' texts alone,
  not of the corpus's size on disk or where in the stream they come; it holds at most
  ``limit`` bytes and one run, whatever the corpus's size.
  """
  heap: list[tuple[float, int, bytes]] = []  # (-hash, -index, text): the highest hash on top
  held = 0
  for run in runs:
    signals_lib.check()
    if run.side != "train":
      continue
    raw = run.text.encode("utf-8")
    unit = split_lib.keyed_unit(raw, key)
    if held >= limit and unit > -heap[0][0]:
      continue  # above every kept run's hash, with the sample full: never kept
    heapq.heappush(heap, (-unit, -run.index, raw))
    held += len(raw)
    while held - len(heap[0][2]) >= limit:  # the sample stays full without its highest
      held -= len(heapq.heappop(heap)[2])
  return sorted((-index, raw) for _, index, raw in heap)
