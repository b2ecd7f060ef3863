"""Corpus reading, document split, token shards, preparation cache and the batch loader.

Pipeline (``prepare(config)``): read documents (the built-in corpus or ``data.path``) ->
fingerprint them -> split by document into train/val -> train a tokenizer on the train
split (or load ``data.tokenizer_path``) -> encode -> write one train and one val token
shard into ``data.cache_dir/<key>/``, ``meta.json`` last. In the token stream every
document is preceded by the EOT id, so EOT separates documents (as in GPT-2 and llm.c).

Empty documents are dropped (they would only add an EOT). Shards use llm.c's format:
256 int32 header (magic 20240520, version 1, token count), then uint16 tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import queue
import sys
import sysconfig
import threading
from typing import Iterator, Sequence

import numpy as np
from tqdm import tqdm

from andrea_jax import tokenizer as tokenizer_lib

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
# Bump when the shard contents or cache layout change, so old caches are not reused.
CACHE_FORMAT = 1


class DataError(ValueError):
  """Input data that cannot be used; the message names the file and the fix."""


class DataNotFoundError(DataError, FileNotFoundError):
  """A data path that does not exist."""


# ---------------------------------------------------------------------------- corpus


def _decode(raw: bytes, path: str, errors: str) -> str:
  try:
    # data.utf8_errors "error" is Python's "strict" handler.
    return raw.decode("utf-8", errors="strict" if errors == "error" else errors)
  except UnicodeDecodeError as e:
    raise DataError(f"{path}: not valid UTF-8 at byte offset {e.start} ({e.reason}); "
                    f"fix the file or set data.utf8_errors='replace'") from None


def builtin_documents(max_docs: int = 0) -> list[str]:
  """The Python stdlib's pydoc topics, then its ``.py`` files, in a fixed order.

  Files that are not valid UTF-8 (a few deliberate test fixtures) and empty files are
  skipped; ``max_docs > 0`` keeps the first ``max_docs`` documents of that order.
  """
  from pydoc_data.topics import topics  # pylint: disable=import-outside-toplevel
  docs = [topics[k] for k in sorted(topics) if topics[k]]
  for path in builtin_source_files():
    if 0 < max_docs <= len(docs):
      break
    try:
      text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
      continue
    if text:
      docs.append(text)
  return docs[:max_docs] if max_docs > 0 else docs


def builtin_source_files() -> list[pathlib.Path]:
  """Every ``.py`` file of the standard library outside ``site-packages``, sorted."""
  root = pathlib.Path(sysconfig.get_paths()["stdlib"])
  files = [p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).parts]
  return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def builtin_corpus_summary(max_docs: int = 0) -> str:
  """One line with the built-in corpus size, for the README and logs."""
  docs = builtin_documents(max_docs)
  mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
  return (f"built-in corpus (Python {sys.version_info.major}.{sys.version_info.minor} "
          f"pydoc topics + stdlib .py files): {len(docs)} documents, {mb:.1f} MB UTF-8")


def path_documents(path: str, extensions: str = ".txt,.md,.rst", utf8_errors: str = "error",
                   doc_separator: str = "") -> list[str]:
  """Documents of a text file, a directory of files (recursive) or a ``.jsonl`` file."""
  p = pathlib.Path(path)
  if not path or not p.exists():
    raise DataNotFoundError(f"data.path {path!r} does not exist; point data.path at a text "
                            f"file, a directory of text files or a .jsonl file")
  files = _directory_files(p, extensions) if p.is_dir() else [p]
  docs = []
  for f in tqdm(files, desc="reading", unit="file", disable=None, leave=False):
    docs.extend(_file_documents(f, utf8_errors, doc_separator))
  return docs


def _directory_files(root: pathlib.Path, extensions: str) -> list[pathlib.Path]:
  exts = tuple(e.strip() if e.strip().startswith(".") else "." + e.strip()
               for e in extensions.split(",") if e.strip())
  files = sorted((f for f in root.rglob("*") if f.is_file() and f.name.endswith(exts)),
                 key=lambda f: f.relative_to(root).as_posix())
  if not files:
    raise DataError(f"directory {str(root)!r} has no files ending in {', '.join(exts)} "
                    f"(data.extensions={extensions!r}); add files or change data.extensions")
  return files


def _file_documents(path: pathlib.Path, utf8_errors: str, doc_separator: str) -> list[str]:
  text = _decode(path.read_bytes(), str(path), utf8_errors)
  if path.suffix == ".jsonl":
    return _jsonl_documents(text, str(path))
  parts = text.split(doc_separator) if doc_separator else [text]
  return [t for t in parts if t]


def _jsonl_documents(text: str, path: str) -> list[str]:
  docs = []
  for number, line in enumerate(text.splitlines(), start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise DataError(f"{path}:{number}: not valid JSON ({e.msg} at column {e.colno}); "
                      f"each line must be a JSON object like {{\"text\": \"...\"}}") from None
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
      raise DataError(f"{path}:{number}: expected a JSON object with a string \"text\" "
                      f"field, found {line[:80]!r}; add the field or drop the line")
    _check_encodable(record["text"], f"{path}:{number}")
    if record["text"]:
      docs.append(record["text"])
  return docs


def _check_encodable(text: str, where: str) -> None:
  # JSON escapes can smuggle in lone surrogates, which no UTF-8 tokenizer can encode.
  try:
    text.encode("utf-8")
  except UnicodeEncodeError as e:
    raise DataError(f"{where}: \"text\" has a lone surrogate {text[e.start]!r} at "
                    f"character {e.start}, which is not valid Unicode; fix the line") from None


def read_documents(data) -> list[str]:
  """The documents selected by a ``data`` config group; fails if there are none."""
  if data.utf8_errors not in ("error", "replace"):
    raise DataError(f"data.utf8_errors={data.utf8_errors!r}; expected 'error' or 'replace'")
  if data.source == "builtin" and data.path:
    raise DataError(f"data.path={data.path!r} is set but data.source='builtin', which "
                    f"ignores it; add --config.data.source=path (or clear data.path)")
  if data.source == "builtin":
    docs = builtin_documents(data.max_docs)
    where = "the built-in corpus"
  elif data.source == "path":
    docs = path_documents(data.path, data.extensions, data.utf8_errors, data.doc_separator)
    where = f"data.path={data.path!r}"
  else:
    raise DataError(f"data.source={data.source!r}; expected 'builtin' or 'path' "
                    f"(with data.path set to a file or directory)")
  if not docs:
    raise DataError(f"{where} has no non-empty documents; add text or point data.path "
                    f"elsewhere")
  return docs


def fingerprint(docs: Sequence[str]) -> str:
  """sha256 over the documents in order (length-prefixed, so boundaries count)."""
  h = hashlib.sha256()
  for d in docs:
    b = d.encode("utf-8")
    h.update(len(b).to_bytes(8, "little"))
    h.update(b)
  return h.hexdigest()


def split_documents(docs: Sequence[str], val_fraction: float,
                    seed: int) -> tuple[list[str], list[str]]:
  """Deterministic train/val split by document; each side gets at least one document."""
  n = len(docs)
  if n < 2:
    raise DataError(f"the corpus has {n} document(s); a train/val split needs at least 2 "
                    f"(use a directory of files, a JSONL file, or data.doc_separator)")
  if not 0.0 < val_fraction < 1.0:
    raise DataError(f"data.val_fraction={val_fraction}; expected a fraction strictly "
                    f"between 0 and 1, e.g. 0.05")
  n_val = min(max(round(n * val_fraction), 1), n - 1)
  is_val = np.zeros(n, dtype=bool)
  is_val[np.random.default_rng(seed).permutation(n)[:n_val]] = True
  return ([d for d, v in zip(docs, is_val) if not v], [d for d, v in zip(docs, is_val) if v])


# ---------------------------------------------------------------------------- shards


def _atomic_write(path: str | os.PathLike, *chunks: bytes) -> None:
  """Write to a temp file in the same directory and rename it into place."""
  tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
  with open(tmp, "wb") as f:
    for c in chunks:
      f.write(c)
  os.replace(tmp, path)


def write_shard(path: str | os.PathLike, tokens: np.ndarray) -> None:
  """Write tokens in llm.c's format (int32 header, uint16 little-endian tokens)."""
  tokens = np.asarray(tokens)
  if tokens.size and (tokens.min() < 0 or tokens.max() >= 65536):
    raise DataError(f"token ids must be in 0..65535 for a uint16 shard, found "
                    f"{tokens.min()}..{tokens.max()}; use a vocab_size <= 65536")
  header = np.zeros(HEADER_INTS, dtype="<i4")
  header[:3] = (SHARD_MAGIC, SHARD_VERSION, tokens.size)
  _atomic_write(path, header.tobytes(), tokens.astype("<u2").tobytes())


def read_shard(path: str | os.PathLike) -> np.memmap:
  """Memory-map a shard's tokens (uint16) after checking its header and length."""
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise DataNotFoundError(f"token shard {path!r} does not exist; run "
                            f"`python -m experiments.prepare --config=...` to write it")
  size = os.path.getsize(path)
  if size < HEADER_BYTES:
    raise DataError(f"token shard {path!r} has {size} bytes, expected at least the "
                    f"{HEADER_BYTES}-byte header; it is truncated, delete it and re-prepare")
  header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
  if header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
    raise DataError(f"{path!r} is not an llm.c token shard: expected magic {SHARD_MAGIC} "
                    f"version {SHARD_VERSION}, found magic {header[0]} version {header[1]}")
  count = int(header[2])
  if size != HEADER_BYTES + 2 * count:
    raise DataError(f"token shard {path!r} has {size} bytes, expected "
                    f"{HEADER_BYTES + 2 * count} for its {count} tokens; it is truncated "
                    f"or corrupt, delete it and re-prepare")
  return np.memmap(path, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(count,))


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


# ---------------------------------------------------------------------------- prepare


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
  vocab_size: int
  eot_id: int
  # True when the cache was complete and nothing was trained or encoded.
  reused: bool


def _file_sha256(path: str) -> str:
  with open(path, "rb") as f:
    return hashlib.file_digest(f, "sha256").hexdigest()


def cache_key(corpus_fingerprint: str, data) -> str:
  """Hash of everything that determines the cached files."""
  source = _file_sha256(data.tokenizer_path) if data.tokenizer_path else "trained"
  spec = dict(format=CACHE_FORMAT, corpus=corpus_fingerprint, vocab_size=data.vocab_size,
              val_fraction=data.val_fraction, seed=data.seed, tokenizer=source)
  return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


def _check_vocab(config) -> int:
  vocab_size = config.data.vocab_size
  model = config.get("model")
  if model is not None and model.get("vocab_size", vocab_size) != vocab_size:
    raise DataError(f"data.vocab_size={vocab_size} but model.vocab_size="
                    f"{model.vocab_size}; set both to the same value")
  tokenizer_lib.check_vocab_size(vocab_size)
  return vocab_size


def prepare(config) -> PreparedData:
  """Tokenizer and train/val shards for ``config``, from the cache when they are there."""
  data = config.data
  vocab_size = _check_vocab(config)
  docs = read_documents(data)
  fp = fingerprint(docs)
  directory = os.path.join(data.cache_dir, cache_key(fp, data))
  cached = load_prepared(directory)
  if cached is not None:
    return cached
  train_docs, val_docs = split_documents(docs, data.val_fraction, data.seed)
  os.makedirs(directory, exist_ok=True)
  tok_path = os.path.join(directory, "tokenizer.json")
  tokenizer_lib.save(_get_tokenizer(data, train_docs, vocab_size), tok_path)
  tok = tokenizer_lib.load(tok_path, vocab_size)
  counts = {}
  for name, split in (("train", train_docs), ("val", val_docs)):
    tokens = encode_documents(tok, split, desc=f"encoding {name}")
    write_shard(os.path.join(directory, f"{name}.bin"), tokens)
    counts[name] = (len(split), int(tokens.size))
  meta = dict(format=CACHE_FORMAT, fingerprint=fp, vocab_size=vocab_size,
              eot_id=tokenizer_lib.eot_id(tok), source=data.source,
              path=data.path, max_docs=data.max_docs, val_fraction=data.val_fraction,
              seed=data.seed, tokenizer_source=data.tokenizer_path or "trained",
              train_docs=counts["train"][0], train_tokens=counts["train"][1],
              val_docs=counts["val"][0], val_tokens=counts["val"][1])
  # meta.json is written last: its presence marks a complete cache directory.
  _atomic_write(os.path.join(directory, "meta.json"), json.dumps(meta, indent=2).encode())
  return _prepared(directory, meta, reused=False)


def _get_tokenizer(data, train_docs: list[str], vocab_size: int):
  if data.tokenizer_path:
    return tokenizer_lib.load(data.tokenizer_path, vocab_size)
  texts = tqdm(train_docs, desc="training tokenizer", unit="doc", disable=None, leave=False)
  return tokenizer_lib.train_tokenizer(texts, vocab_size, show_progress=False)


def _prepared(directory: str, meta: dict, reused: bool) -> PreparedData:
  return PreparedData(
      directory=directory, train_path=os.path.join(directory, "train.bin"),
      val_path=os.path.join(directory, "val.bin"),
      tokenizer_path=os.path.join(directory, "tokenizer.json"),
      fingerprint=meta["fingerprint"], train_tokens=meta["train_tokens"],
      val_tokens=meta["val_tokens"], train_docs=meta["train_docs"],
      val_docs=meta["val_docs"], vocab_size=meta["vocab_size"], eot_id=meta["eot_id"],
      reused=reused)


def load_prepared(directory: str) -> PreparedData | None:
  """The complete prepared data in ``directory``, or None if it is missing or partial."""
  meta_path = os.path.join(directory, "meta.json")
  if not os.path.isfile(meta_path):
    return None
  try:
    with open(meta_path, encoding="utf-8") as f:
      prepared = _prepared(directory, json.load(f), reused=True)
    ok = (len(read_shard(prepared.train_path)) == prepared.train_tokens
          and len(read_shard(prepared.val_path)) == prepared.val_tokens
          and os.path.isfile(prepared.tokenizer_path))
  except (DataError, ValueError, KeyError):  # unreadable meta.json or shards: rebuild
    return None
  return prepared if ok else None


# ---------------------------------------------------------------------------- loader


def _check_length(tokens: np.ndarray, block_size: int, name: str) -> None:
  if len(tokens) < block_size + 1:
    raise DataError(f"{name} has {len(tokens)} tokens, fewer than one window of "
                    f"block_size + 1 = {block_size + 1}; use a smaller block_size or more data")


def _local_slice(batch_size: int, process_index: int, process_count: int) -> slice:
  if batch_size % process_count:
    raise DataError(f"global batch_size={batch_size} is not divisible by "
                    f"process_count={process_count}; use a multiple of {process_count}")
  if not 0 <= process_index < process_count:
    raise DataError(f"process_index={process_index} is outside 0..{process_count - 1}")
  local = batch_size // process_count
  return slice(process_index * local, (process_index + 1) * local)


def _windows(tokens: np.ndarray, starts: np.ndarray, block_size: int) -> np.ndarray:
  return np.stack([tokens[s:s + block_size + 1] for s in starts]).astype(np.int32)


def batch_at(tokens: np.ndarray, step: int, *, batch_size: int, block_size: int, seed: int,
             process_index: int = 0, process_count: int = 1,
             name: str = "token stream") -> np.ndarray:
  """This process's rows of the global batch of ``step``: int32 ``[B_local, T+1]``.

  The global batch is a pure function of ``(seed, step)``; process p takes rows
  ``p*B_local:(p+1)*B_local``, so all processes together see exactly the global batch.
  Inputs are ``batch[:, :-1]``, targets ``batch[:, 1:]``.
  """
  _check_length(tokens, block_size, name)
  rows = _local_slice(batch_size, process_index, process_count)
  rng = np.random.default_rng([seed, step])
  starts = rng.integers(0, len(tokens) - block_size, size=batch_size)
  return _windows(tokens, starts[rows], block_size)


def eval_batches(tokens: np.ndarray, n_batches: int, batch_size: int, block_size: int, *,
                 process_index: int = 0, process_count: int = 1,
                 name: str = "token stream") -> np.ndarray:
  """A fixed eval set ``[n_batches, B_local, T+1]``: evenly spaced windows.

  The windows do not overlap when the stream is long enough; otherwise they are still
  evenly spaced (and overlap), so every evaluation sees the same tokens.
  """
  _check_length(tokens, block_size, name)
  rows = _local_slice(batch_size, process_index, process_count)
  starts = np.linspace(0, len(tokens) - block_size - 1, n_batches * batch_size)
  starts = starts.astype(np.int64).reshape(n_batches, batch_size)[:, rows]
  return np.stack([_windows(tokens, s, block_size) for s in starts])


def _process_defaults(process_index, process_count) -> tuple[int, int]:
  if process_index is None or process_count is None:
    import jax  # pylint: disable=import-outside-toplevel
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
  return process_index, process_count


class Loader:
  """Batches ``batch_at(step)`` for step = start_step, start_step+1, ..., prefetched.

  A background thread fills a bounded queue of ``prefetch`` batches. Errors in the
  thread are re-raised by ``next``. Use as a context manager or call ``close()``.
  """

  def __init__(self, shard_path: str, batch_size: int, block_size: int, seed: int,
               start_step: int = 0, process_index: int | None = None,
               process_count: int | None = None, prefetch: int = 2):
    self.tokens = read_shard(shard_path)
    p, n = _process_defaults(process_index, process_count)
    self._args = dict(batch_size=batch_size, block_size=block_size, seed=seed,
                      process_index=p, process_count=n, name=f"token shard {shard_path!r}")
    # Fail here, in the caller, rather than later in the worker thread.
    _check_length(self.tokens, block_size, self._args["name"])
    _local_slice(batch_size, p, n)
    self.step = start_step
    self._queue: queue.Queue = queue.Queue(maxsize=max(prefetch, 1))
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._fill, args=(start_step,), daemon=True)
    self._thread.start()

  def _fill(self, step: int) -> None:
    try:
      while not self._stop.is_set():
        self._put((step, batch_at(self.tokens, step, **self._args)))
        step += 1
    except BaseException as e:  # pylint: disable=broad-except
      self._put((None, e))

  def _put(self, item) -> None:
    # Poll so close() can stop a worker that is blocked on a full queue.
    while not self._stop.is_set():
      try:
        self._queue.put(item, timeout=0.1)
        return
      except queue.Full:
        continue

  def __iter__(self) -> Iterator[np.ndarray]:
    return self

  def __next__(self) -> np.ndarray:
    if self._stop.is_set():
      raise StopIteration
    step, item = self._queue.get()
    if step is None:
      self.close()
      raise item
    self.step = step + 1
    return item

  def close(self) -> None:
    self._stop.set()
    self._thread.join()

  def __enter__(self) -> "Loader":
    return self

  def __exit__(self, *exc) -> None:
    self.close()
