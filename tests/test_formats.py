"""Tokens are a function of the documents alone (split.py, readers.py): the same documents
stored as a folder of text files, JSONL, gzip- or zstd-compressed JSONL and Parquet give
byte-identical tokenizers and shards."""

import gzip
import hashlib
import json
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from andrea_jax import config as config_lib
from andrea_jax import corpus as corpus_lib
from andrea_jax import prepare as prepare_lib
from andrea_jax import readers
from andrea_jax import split as split_lib
from experiments.configs import tiny

VOCAB = 256 + 64 + 1
SYLLABLES = "ka to re mi su no é ha lu wa 漢 字 pe ri".split()


def documents(n: int = 120, seed: int = 0) -> list[str]:
  """``n`` documents of 1-30 lines, and one long one (many text pieces, many blocks)."""
  rng = np.random.default_rng(seed)
  words = ["".join(rng.choice(SYLLABLES, rng.integers(1, 5))) for _ in range(300)]

  def line():
    return " ".join(rng.choice(words, rng.integers(3, 14))) + "\n"

  docs = ["".join(line() for _ in range(rng.integers(1, 30))) for _ in range(n)]
  docs.insert(n // 2, "".join(line() for _ in range(3000)))  # about 150 k characters
  return docs


def write(kind: str, docs: list[str], root: pathlib.Path) -> pathlib.Path:
  records = "".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs).encode()
  if kind == "text":
    (root / "docs").mkdir()
    for i, d in enumerate(docs):
      (root / "docs" / f"{i:04d}.txt").write_text(d, encoding="utf-8")
    return root / "docs"
  path = root / {"jsonl": "d.jsonl", "gzip": "d.jsonl.gz", "zstd": "d.jsonl.zst",
                 "parquet": "d.parquet"}[kind]
  if kind == "parquet":
    pq.write_table(pa.table({"text": docs}), path, row_group_size=16)
  else:
    path.write_bytes({"jsonl": lambda b: b, "gzip": gzip.compress,
                      "zstd": zstandard.ZstdCompressor().compress}[kind](records))
  return path


def run_config(path: pathlib.Path, cache: pathlib.Path | None = None) -> config_lib.RunConfig:
  config = tiny.get_config()
  config.model.vocab_size = VOCAB
  # A sample smaller than the corpus: the tokenizer's sample is drawn, not the whole split.
  config.data.update(dict(path=str(path), vocab_size=VOCAB, val_fraction=0.1,
                          cache_dir=str(cache), shard_tokens=20_000, tokenizer_sample_bytes=60_000))
  return config_lib.RunConfig.from_configdict(config)


def data_config(path: pathlib.Path) -> config_lib.DataConfig:
  return run_config(path).data


def prepared(path: pathlib.Path, cache: pathlib.Path) -> dict:
  """``{file name: sha256}`` of everything a preparation of ``path`` writes but its manifest,
  and the manifest's token and document counts."""
  p = prepare_lib.prepare(run_config(path, cache))
  out = {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
         for f in pathlib.Path(p.directory).iterdir() if f.name != "manifest.json"}
  return {"files": out, "tokens": (p.train_tokens, p.val_tokens), "docs": (p.train_docs, p.val_docs)}


def test_the_same_documents_in_every_format_give_the_same_tokenizer_and_shards(tmp_path, monkeypatch):
  # Text files stream in pieces; pieces this small cut the long document (and some short
  # ones) into many, as a large file's 1 M-character pieces do.
  monkeypatch.setattr(readers, "PIECE_CHARS", 1000)
  monkeypatch.setattr(split_lib, "RUN_CHARS", 20_000)  # and the long one runs in several runs
  docs = documents()
  results = {}
  for kind in ("jsonl", "text", "gzip", "zstd", "parquet"):
    (tmp_path / kind).mkdir()
    path = write(kind, docs, tmp_path / kind)
    assert list(corpus_lib.documents(data_config(path))) == docs  # the same documents
    results[kind] = prepared(path, tmp_path / kind / "cache")
  sizes = {k: sum(f.stat().st_size for f in (tmp_path / k).rglob("*") if f.is_file()
                  and "cache" not in f.parts) for k in results}
  assert len(set(sizes.values())) == len(sizes)  # the files on disk differ in size ...
  first = results["jsonl"]
  assert len([f for f in first["files"] if f.startswith("train_")]) > 2
  for kind, result in results.items():  # ... what they hold does not
    assert result == first, kind
