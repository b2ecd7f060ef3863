"""Corpus readers and their errors, split, fingerprint, shards, prepare cache and loader."""

import json
import os
import re
import pathlib
import shutil
import signal

import ml_collections
import numpy as np
import pytest

from andrea_jax import builtin_corpus
from andrea_jax import config as config_lib
from andrea_jax import corpus as corpus_lib
from andrea_jax import encode as encode_lib
from andrea_jax import errors
from andrea_jax import files as files_lib
from andrea_jax import loader as loader_lib
from andrea_jax import prepare as prepare_lib
from andrea_jax import shards
from andrea_jax import signals as signals_lib
from andrea_jax import split as split_lib
from andrea_jax import tokenizer as T
from experiments.configs import tiny

# Its tests share module-scoped fixtures: on one xdist worker they are computed once
# (pyproject.toml: --dist=loadgroup).
pytestmark = pytest.mark.xdist_group("test_data")

SMALL_VOCAB = 256 + 64 + 1
# Shards this small make the prepared fixture write several (andrea120m's hold 100 M tokens).
SHARD_TOKENS = 50_000


def data_config(**overrides) -> config_lib.DataConfig:
  config = tiny.get_config()
  config.data.update(overrides)
  return config_lib.RunConfig.from_configdict(config).data


def read_all(data) -> list[str]:
  return list(corpus_lib.documents(data))


def read(path, **overrides) -> list[str]:
  """The documents of ``path`` as the pipeline reads them (pieces joined)."""
  return list(corpus_lib.documents(data_config(path=str(path), **overrides)))


# ---------------------------------------------------------------------------- readers


def test_text_file_is_one_document_or_split_by_separator(tmp_path):
  f = tmp_path / "a.txt"
  f.write_text("one\n\n\ntwo\n\n\n\n\nthree", encoding="utf-8")
  assert read(f) == [f.read_text(encoding="utf-8")]
  assert read(f, doc_separator="\n\n\n") == ["one", "two", "\n\nthree"]


def test_directory_reads_matching_extensions_recursively_sorted(tmp_path):
  (tmp_path / "b").mkdir()
  (tmp_path / "b" / "z.md").write_text("md", encoding="utf-8")
  (tmp_path / "a.txt").write_text("txt", encoding="utf-8")
  (tmp_path / "c.py").write_text("ignored", encoding="utf-8")
  (tmp_path / "empty.txt").write_text("", encoding="utf-8")
  assert read(tmp_path, extensions=".txt,.md") == ["txt", "md"]
  assert read(tmp_path, extensions="py") == ["ignored"]


def test_jsonl_reads_text_fields_and_skips_blank_lines(tmp_path):
  f = tmp_path / "d.jsonl"
  f.write_text('{"text": "a\\nb"}\n\n{"text": "c", "id": 2}\n{"text": ""}\n', encoding="utf-8")
  assert read(f) == ["a\nb", "c"]


def test_jsonl_inside_a_directory(tmp_path):
  (tmp_path / "x.jsonl").write_text('{"text": "j1"}\n{"text": "j2"}\n', encoding="utf-8")
  (tmp_path / "y.txt").write_text("t", encoding="utf-8")
  assert read(tmp_path, extensions=".jsonl,.txt") == ["j1", "j2", "t"]


def test_missing_path(tmp_path):
  missing = str(tmp_path / "nope")
  with pytest.raises(FileNotFoundError, match="nope.*does not exist"):
    read_all(data_config(path=missing))
  with pytest.raises(errors.DataNotFoundError):
    corpus_lib.list_files("")


def test_data_errors_are_the_projects_data_error():
  # The entry points turn errors.AndreaError into one line and exit code 2.
  assert issubclass(errors.DataNotFoundError, errors.DataError)
  assert issubclass(errors.DataNotFoundError, FileNotFoundError)
  assert issubclass(T.TokenizerError, errors.DataError)


def test_data_path_alone_selects_it(tmp_path):
  (tmp_path / "a.txt").write_text("mine", encoding="utf-8")
  data = data_config(path=str(tmp_path))
  assert not hasattr(data, "source")  # data.path decides: empty = the built-in corpus
  assert read_all(data) == ["mine"]
  assert (read_all(data_config(path="", max_docs=3))
          == corpus_lib.builtin_documents(3))


@pytest.mark.parametrize("files,match", [
    ({"a.txt": ""}, r"a\.txt is an empty file \(0 bytes\), which holds no documents; accepted: "),
    ({"a.txt": "", "b.md": ""}, r"every one of the 2 files of data.path=.* \(.*a\.txt, \.\.\.\) "
     r"is empty \(0 bytes\)"),
    ({"d.jsonl": "\n"}, "no non-empty documents")])
def test_empty_corpus(tmp_path, files, match):
  for name, text in files.items():
    (tmp_path / name).write_text(text, encoding="utf-8")
  target = tmp_path if len(files) > 1 else tmp_path / next(iter(files))
  with pytest.raises(errors.DataError, match=match):
    read_all(data_config(path=str(target)))


def test_directory_without_matching_files(tmp_path):
  (tmp_path / "a.py").write_text("x", encoding="utf-8")
  with pytest.raises(errors.DataError, match=r"no files ending in \.txt, \.md"):
    read(tmp_path, extensions=".txt,.md")


def test_bad_utf8_names_file_and_offset_and_replace_mode(tmp_path):
  f = tmp_path / "bad.txt"
  f.write_bytes(b"abc\xffdef")
  with pytest.raises(errors.DataError, match=r"bad\.txt: not valid UTF-8 at byte offset 3"):
    read_all(data_config(path=str(f)))
  docs = read_all(data_config(path=str(f), utf8_errors="replace"))
  assert docs == ["abc\ufffddef"]


def test_jsonl_line_without_text(tmp_path):
  f = tmp_path / "d.jsonl"
  f.write_text('{"text": "ok"}\n{"body": "x"}\n', encoding="utf-8")
  with pytest.raises(errors.DataError, match=r"d\.jsonl:2: expected a JSON object with a string"):
    read(f)


def test_jsonl_line_not_json(tmp_path):
  f = tmp_path / "d.jsonl"
  f.write_text('{"text": "ok"}\n\n{"text": oops}\n', encoding="utf-8")
  with pytest.raises(errors.DataError, match=r"d\.jsonl:3: not valid JSON"):
    read(f)


def test_jsonl_lone_surrogate(tmp_path):
  f = tmp_path / "d.jsonl"
  f.write_text('{"text": "a\\ud800"}\n', encoding="utf-8")
  with pytest.raises(errors.DataError, match=r"d\.jsonl:1: .*lone surrogate"):
    read(f)


@pytest.mark.parametrize("field,value,match", [("utf8_errors", "ignore", "utf8_errors"),
                                               ("path", "x.txt", "'x.txt' does not exist")])
def test_bad_settings(field, value, match):
  with pytest.raises(errors.DataError, match=match):
    read_all(data_config(**{field: value}))


def test_builtin_corpus_capped_deterministically():
  ten, twenty = corpus_lib.builtin_documents(10), corpus_lib.builtin_documents(100)
  assert len(ten) == 10 and len(twenty) == 100
  assert ten == twenty[:10] == corpus_lib.builtin_documents(10)
  assert all(ten)
  assert "100 documents" in corpus_lib.builtin_corpus_summary(100)


def test_builtin_corpus_leaves_out_codec_tables_and_duplicates():
  names = [p.as_posix() for p in corpus_lib.builtin_source_files()]
  assert not [n for n in names if "/encodings/" in n or "/pydoc_data/" in n]
  assert any(n.endswith("/json/decoder.py") for n in names) and len(names) > 1000


HEX_TABLE = "decoding_map = {\n" + "".join(
    f"    0x{i:04x}: 0x{i * 7 % 65536:04x},  # CHAR {i}\n" for i in range(128, 200)) + "}\n"
ESCAPE_TABLE = "decoding_table = (\n" + "".join(
    f"    '\\u{i:04x}'  # 0x{i:02x}\n" for i in range(60)) + ")\n"
CODE = "def f(x):\n  return {0x10: 1, 2: 3}[x]  # a table in code is fine\n" * 20


def test_generated_table_rule(tmp_path, monkeypatch):
  assert corpus_lib.is_generated_table(HEX_TABLE) and corpus_lib.is_generated_table(ESCAPE_TABLE)
  assert not corpus_lib.is_generated_table(CODE)
  assert not corpus_lib.is_generated_table("NAMES = [\n" + "    'alpha', 'beta',\n" * 50 + "]\n")
  # More than half of the code lines: a module with a small table stays in.
  assert not corpus_lib.is_generated_table(HEX_TABLE + CODE * 3)
  files = []
  for name, text in (("a_table.py", HEX_TABLE), ("b_code.py", CODE), ("c_escapes.py", ESCAPE_TABLE)):
    files.append(tmp_path / name)
    files[-1].write_text(text, encoding="utf-8")
  monkeypatch.setattr(builtin_corpus, "builtin_source_files", lambda: files)
  from pydoc_data.topics import topics  # pylint: disable=import-outside-toplevel
  corpus_lib.builtin_documents.cache_clear()  # read once a process: read these instead
  try:
    assert corpus_lib.builtin_documents()[len([t for t in topics.values() if t]):] == [CODE]
  finally:
    corpus_lib.builtin_documents.cache_clear()


# ---------------------------------------------------------------------------- split, fingerprint


def _nbytes(docs):
  return sum(len(d.encode("utf-8")) for d in docs)


def _lines(n, tag):
  return "".join(f"{tag} line {i}: some text, é and more text\n" for i in range(n))


def split_config(**overrides):
  return data_config(**{"val_fraction": 0.1, "val_max_bytes": 10**9, **overrides})


def split(docs, **overrides):
  """``{side: [(text, starts), ...]}``: the runs of ``docs`` as the pipeline splits them."""
  splitter = prepare_lib.Splitter(split_config(**overrides))
  out = {"train": [], "val": []}
  for run in splitter.split((d, True) for d in docs):
    out[run.side].append((run.text, run.starts))
  return out, splitter


MANY = [_lines(int(n), f"doc{k}") for k, n in enumerate(np.random.default_rng(0).integers(1, 60, 3000))]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("fraction", [0.05, 0.3])
def test_split_holds_out_about_the_asked_share_by_document(seed, fraction):
  runs, splitter = split(MANY, val_fraction=fraction, split_seed=seed)
  share = splitter.bytes["val"] / (splitter.bytes["val"] + splitter.bytes["train"])
  # 3000 documents of under 8k characters: each is one block, held out with probability
  # `fraction`; the share's binomial spread is under 0.01 at these sizes.
  assert share == pytest.approx(fraction, abs=0.03)
  assert all(starts for side in runs.values() for _, starts in side)  # whole documents
  assert sorted(t for side in runs.values() for t, _ in side) == sorted(MANY)  # nothing lost
  assert splitter.docs == {side: len(r) for side, r in runs.items()}


def test_split_is_deterministic_follows_the_seed_and_sends_duplicates_together():
  first, _ = split(MANY, split_seed=3)
  assert split(MANY, split_seed=3)[0] == first
  assert split(MANY, split_seed=4)[0]["val"] != first["val"]
  doubled, _ = split(MANY[:500] + MANY[:500], split_seed=3)
  held = [t for t, _ in doubled["val"]]
  assert all(held.count(t) % 2 == 0 for t in held)  # a copy never lands on the other side


def test_a_long_document_is_split_in_blocks_at_line_breaks():
  doc = _lines(20000, "only")  # about 850 k characters, one document
  assert prepare_lib.blocks(doc) and all(b.endswith("\n") for b in prepare_lib.blocks(doc))
  assert "".join(prepare_lib.blocks(doc)) == doc
  assert max(map(len, prepare_lib.blocks(doc))) < 2 * prepare_lib.SPLIT_BLOCK_CHARS
  runs, splitter = split([doc])
  assert 0.05 < splitter.bytes["val"] / len(doc.encode()) < 0.15
  # Consecutive blocks on one side are one run; each side's first run of it starts a document
  # there, and a run after a held-out block starts one again (an EOT in that side's stream).
  assert all(starts for _, starts in runs["train"]) and all(starts for _, starts in runs["val"])
  assert prepare_lib.blocks("x" * 20000) == ["x" * 8192, "x" * 8192, "x" * 3616]  # no line break


def test_the_tokenizer_sample_is_the_lowest_hashes_that_fill_it_wherever_they_come():
  key, limit = b"andrea-sample-0", 50_000
  def sample(docs):
    splitter = prepare_lib.Splitter(split_config())
    runs = [r for r in splitter.split((d, True) for d in docs) if r.side == "train"]
    kept = prepare_lib.sample_runs(iter(runs), key, limit)
    return runs, kept
  runs, kept = sample(MANY)
  texts = {raw.decode() for _, raw in kept}
  assert [i for i, _ in kept] == sorted(i for i, _ in kept)  # in the stream's order
  units = sorted(split_lib.keyed_unit(r.text.encode(), key) for r in runs)
  held = [split_lib.keyed_unit(raw, key) for _, raw in kept]
  assert sorted(held) == units[:len(kept)]  # the lowest hashes ...
  total = sum(len(raw) for _, raw in kept)
  assert total >= limit > total - len(max(kept, key=lambda k: split_lib.keyed_unit(k[1], key))[1])
  _, reversed_kept = sample(MANY[::-1])  # ... whatever the order the documents come in
  assert {raw.decode() for _, raw in reversed_kept} == texts


def test_the_validation_side_stops_at_its_cap():
  runs, splitter = split(MANY, val_fraction=0.5, val_max_bytes=20_000)
  assert 19_000 < splitter.bytes["val"] <= 20_000
  assert sum(len(t.encode()) for t, _ in runs["val"]) == splitter.bytes["val"]


def test_bad_val_fraction():
  for bad in (0.0, 1.0):
    with pytest.raises(errors.DataError, match=f"val_fraction={bad}"):
      prepare_lib.Splitter(split_config(val_fraction=bad))


def test_fingerprint_changes_with_any_document():
  docs = ["ab", "c"]
  assert corpus_lib.fingerprint(docs) == corpus_lib.fingerprint(list(docs))
  assert corpus_lib.fingerprint(docs) != corpus_lib.fingerprint(["ab", "d"])
  assert corpus_lib.fingerprint(docs) != corpus_lib.fingerprint(["c", "ab"])
  assert corpus_lib.fingerprint(docs) != corpus_lib.fingerprint(["a", "bc"])


# ---------------------------------------------------------------------------- shards


def test_shard_round_trip(tmp_path):
  tokens = np.array([0, 1, 2, 65535, 300], dtype=np.int64)
  shards.write_shard(tmp_path / "s.bin", tokens)
  got = shards.read_shard(tmp_path / "s.bin")
  assert isinstance(got, np.memmap) and got.dtype == np.uint16
  np.testing.assert_array_equal(got, tokens)
  header = np.fromfile(tmp_path / "s.bin", dtype="<i4", count=256)
  assert list(header[:3]) == [20240520, 1, 5] and not header[3:].any()
  assert os.path.getsize(tmp_path / "s.bin") == 1024 + 2 * 5
  assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_shard_rejects_ids_over_uint16(tmp_path):
  with pytest.raises(errors.DataError, match="0..65535"):
    shards.write_shard(tmp_path / "s.bin", np.array([65536]))


def _corrupt(path, offset, value):
  raw = bytearray(path.read_bytes())
  raw[offset:offset + 4] = np.int32(value).tobytes()
  path.write_bytes(bytes(raw))


@pytest.mark.parametrize("offset,value,match", [(0, 1234, "magic 1234"),
                                                (4, 2, "version 2"),
                                                (8, 99, "expected 1222 for its 99 tokens")])
def test_shard_header_checks(tmp_path, offset, value, match):
  path = tmp_path / "s.bin"
  shards.write_shard(path, np.arange(10))
  _corrupt(path, offset, value)
  with pytest.raises(errors.DataError, match=match):
    shards.read_shard(path)


def test_truncated_and_missing_shard(tmp_path):
  path = tmp_path / "s.bin"
  shards.write_shard(path, np.arange(10))
  path.write_bytes(path.read_bytes()[:-1])
  with pytest.raises(errors.DataError, match="1043 bytes, expected 1044"):
    shards.read_shard(path)
  path.write_bytes(b"\0" * 100)
  with pytest.raises(errors.DataError, match="100 bytes, expected at least"):
    shards.read_shard(path)
  with pytest.raises(FileNotFoundError, match="nope.bin"):
    shards.read_shard(tmp_path / "nope.bin")


# ---------------------------------------------------------------------------- prepare


def prepare(config, fit_vocab: bool = False) -> prepare_lib.PreparedData:
  """``prepare.prepare`` of a ConfigDict, typed as the boundary types it."""
  return prepare_lib.prepare(config_lib.RunConfig.from_configdict(config), fit_vocab)


def data_of(config) -> config_lib.DataConfig:
  return config_lib.RunConfig.from_configdict(config).data


def prep_config(tmp_path, **data_overrides):
  config = tiny.get_config()
  config.model.vocab_size = SMALL_VOCAB
  config.data.update(dict(vocab_size=SMALL_VOCAB, max_docs=40, val_fraction=0.1,
                          cache_dir=str(tmp_path / "cache"), shard_tokens=SHARD_TOKENS))
  config.data.update(data_overrides)
  return config


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("prep")
  return tmp, prepare(prep_config(tmp))


def expected_streams(config):
  """``({side: text}, splitter)``: each side's stream as text, ``EOT run EOT run ...``."""
  data = config_lib.RunConfig.from_configdict(config).data
  source = corpus_lib.source_of(data)
  splitter = prepare_lib.Splitter(data, prepare_lib.split_block_chars(source, data))
  out = {"train": "", "val": ""}
  for run in splitter.split(corpus_lib.pieces(source, data)):
    out[run.side] += (T.EOT if run.starts else "") + run.text
  return out, splitter


def test_prepare_writes_streams_of_eot_separated_documents_in_fixed_size_shards(prepared):
  tmp, p = prepared
  assert not p.reused and p.vocab_size == SMALL_VOCAB and p.eot_id == SMALL_VOCAB - 1
  streams, splitter = expected_streams(prep_config(tmp))
  assert (p.train_docs, p.val_docs) == (splitter.docs["train"], splitter.docs["val"])
  tok = T.load(p.tokenizer_path, SMALL_VOCAB)
  for side, count in (("train", p.train_tokens), ("val", p.val_tokens)):
    tokens = p.stream(side)
    assert len(tokens) == count and tokens[0:1][0] == p.eot_id
    assert T.decode(tok, tokens[:len(tokens)].tolist()) == streams[side]
  sizes = [shards.shard_count(f) for f in p.train_paths]
  assert len(sizes) > 2 and set(sizes[:-1]) == {SHARD_TOKENS} and 0 < sizes[-1] <= SHARD_TOKENS
  manifest = json.loads(pathlib.Path(p.directory, "manifest.json").read_text())
  assert manifest["fingerprint"] == p.fingerprint and manifest["train"]["tokens"] == p.train_tokens
  assert [s["file"] for s in manifest["train"]["shards"]] == [os.path.basename(f) for f in p.train_paths]
  assert all(s["sha256"] == files_lib.sha256(os.path.join(p.directory, s["file"]))
             for s in manifest["train"]["shards"] + manifest["val"]["shards"])
  assert manifest["val_share_tokens"] == p.val_share_tokens == pytest.approx(
      p.val_tokens / (p.train_tokens + p.val_tokens))
  assert not os.path.exists(os.path.join(p.directory, "progress.json"))


def test_shuffle_seed_moves_batches_not_the_split(prepared):
  tmp, p = prepared
  cfg = prep_config(tmp)
  assert prepare_lib.cache_key(p.fingerprint, data_of(cfg)) == prepare_lib.cache_key(
      p.fingerprint, data_of(prep_config(tmp, shuffle_seed=5)))
  other = prepare(prep_config(tmp, shuffle_seed=5))
  assert other.reused and dataclasses_equal_except_reused(other, p)
  assert T.load(other.tokenizer_path).to_str() == T.load(p.tokenizer_path).to_str()
  kw = dict(batch_size=4, block_size=16, process_index=0, process_count=1)
  with (loader_lib.Loader(p.train_paths, seed=0, **kw) as a,
        loader_lib.Loader(other.train_paths, seed=5, **kw) as b):
    assert not np.array_equal(next(a), next(b))
  resplit = prepare(prep_config(tmp, split_seed=5))
  assert resplit.directory != p.directory
  assert not np.array_equal(resplit.stream("val")[:1000], p.stream("val")[:1000])


def test_prepare_holds_out_the_asked_share_of_tokens(tmp_path):
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  for k, doc in enumerate(MANY[:1000]):
    (corpus / f"{k:04d}.txt").write_text(doc, encoding="utf-8")
  p = prepare(prep_config(tmp_path, path=str(corpus), val_fraction=0.1))
  assert p.val_share_bytes == pytest.approx(0.1, abs=0.03)  # 1000 documents, by hash
  assert p.val_share_tokens == pytest.approx(p.val_share_bytes, abs=0.01)
  assert p.val_share_tokens == pytest.approx(p.val_tokens / (p.train_tokens + p.val_tokens))


def test_prepare_bad_input_is_a_data_error(tmp_path):
  (tmp_path / "bad.txt").write_bytes(b"fine text\n" * 5 + b"\xc3(")
  with pytest.raises(errors.DataError, match=r"bad\.txt: not valid UTF-8 at byte offset 50 .*"
                                             r"data\.utf8_errors='replace'"):
    prepare(prep_config(tmp_path, path=str(tmp_path)))
  missing = str(tmp_path / "tok.json")
  with pytest.raises(errors.DataError, match="data.tokenizer_path=.*tok.json' does not exist"):
    prepare(prep_config(tmp_path, path=str(tmp_path), utf8_errors="replace",
                                    tokenizer_path=missing))
  (tmp_path / "file").write_text("not a directory")
  with pytest.raises(errors.DataError, match="data.cache_dir=.*file' is a file: pass a directory"):
    prepare(prep_config(tmp_path, path=str(tmp_path), utf8_errors="replace",
                                    cache_dir=str(tmp_path / "file")))
  pathlib.Path(missing).write_text("{not a tokenizer")
  with pytest.raises(errors.DataError, match="tok.json' is not a readable tokenizer.json"):
    prepare(prep_config(tmp_path, path=str(tmp_path), utf8_errors="replace",
                                    tokenizer_path=missing))


def _mtimes(directory):
  return {f: os.stat(os.path.join(directory, f)).st_mtime_ns for f in os.listdir(directory)}


def test_prepare_reuses_a_complete_cache(prepared):
  tmp, p = prepared
  before = _mtimes(p.directory)
  again = prepare(prep_config(tmp, shuffle_seed=1))  # the batch order is not in the key
  assert again.reused and again.directory == p.directory
  assert _mtimes(p.directory) == before
  assert dataclasses_equal_except_reused(again, p)


def dataclasses_equal_except_reused(a, b):
  import dataclasses  # pylint: disable=import-outside-toplevel
  return dataclasses.replace(a, reused=b.reused) == b


@pytest.mark.parametrize("change", [dict(vocab_size=SMALL_VOCAB + 1), dict(max_docs=41),
                                    dict(val_fraction=0.2), dict(split_seed=1)])
def test_prepare_never_reuses_a_stale_cache(prepared, change):
  tmp, p = prepared
  config = prep_config(tmp, **change)
  config.model.vocab_size = config.data.vocab_size
  other = prepare(config)
  assert not other.reused and other.directory != p.directory


def test_prepare_user_corpus_change_gives_a_new_key(tmp_path):
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  docs = corpus_lib.builtin_documents(12)
  for i, d in enumerate(docs):
    (corpus / f"{i:02d}.txt").write_text(d, encoding="utf-8")
  config = prep_config(tmp_path, path=str(corpus), extensions=".txt")
  first = prepare(config)
  (corpus / "05.txt").write_text(docs[5] + "!", encoding="utf-8")  # a new size
  second = prepare(config)
  assert second.fingerprint != first.fingerprint and second.directory != first.directory
  (corpus / "05.txt").write_text("?" + docs[5], encoding="utf-8")  # the same size, other bytes
  third = prepare(config)
  assert third.fingerprint not in (first.fingerprint, second.fingerprint)


def test_incomplete_cache_is_rebuilt(tmp_path):
  config = prep_config(tmp_path, max_docs=30)
  first = prepare(config)
  os.remove(os.path.join(first.directory, "manifest.json"))
  assert not prepare(config).reused
  path = pathlib.Path(first.train_paths[1])
  path.write_bytes(path.read_bytes()[:-2])
  assert prepare_lib.load_prepared(first.directory) is None
  pathlib.Path(first.directory, "manifest.json").write_text("{not json")
  assert prepare_lib.load_prepared(first.directory) is None
  rebuilt = prepare(config)
  assert not rebuilt.reused and len(rebuilt.stream("train")) == first.train_tokens


WORDS = ("the a old young quiet river house garden road morning evening light rain letter "
         "friend child village window door book walked looked found said carried opened "
         "waited slowly again always never still across under through before after because "
         "and but so then green dark warm cold").split()


def write_prose(folder: pathlib.Path, files: int, sentences: int = 120, seed: int = 0) -> None:
  """A folder of prose-like text: sentences of common words, in paragraphs, one file a chapter."""
  rng = np.random.default_rng(seed)
  folder.mkdir(parents=True, exist_ok=True)
  for i in range(files):
    lines = [" ".join(rng.choice(WORDS, rng.integers(5, 14))).capitalize() + "."
             for _ in range(sentences)]
    paragraphs = [" ".join(lines[j:j + 6]) for j in range(0, len(lines), 6)]
    (folder / f"chapter{i:02d}.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")


def test_a_small_corpus_gets_the_vocabulary_it_fills_or_a_clean_error(tmp_path):
  write_prose(tmp_path / "prose", files=4)
  config = prep_config(tmp_path, path=str(tmp_path / "prose"))
  config.model.vocab_size = 2305
  with pytest.raises(T.TokenizerError, match="too small for vocab_size=2305"):
    prepare(config)
  assert not (tmp_path / "cache").exists() or not os.listdir(tmp_path / "cache")
  fitted = prepare(config, fit_vocab=True)
  assert T.N_BYTES + 1 < fitted.vocab_size < 2305
  tok = T.load(fitted.tokenizer_path, fitted.vocab_size)  # the layout holds at the fitted size
  assert max(fitted.stream("train")[:fitted.train_tokens]) == fitted.vocab_size - 1 == T.eot_id(tok)
  again = prepare(config, fit_vocab=True)
  assert again.reused and again.directory == fitted.directory
  assert os.listdir(tmp_path / "cache") == [os.path.basename(fitted.directory)]


def test_a_failed_preparation_leaves_no_cache_directory(tmp_path, monkeypatch):
  config = prep_config(tmp_path, max_docs=5)
  monkeypatch.setattr(shards, "write_shard", lambda *a: (_ for _ in ()).throw(OSError(28, "No space")))
  with pytest.raises(OSError, match="No space"):
    prepare(config)
  assert os.listdir(tmp_path / "cache") == []


def test_opening_words_come_from_the_first_validation_document(prepared):
  _, p = prepared
  val = p.stream("val")[:20000]
  eots = np.flatnonzero(val == p.eot_id)
  first = T.decode(T.load(p.tokenizer_path), val[eots[0] + 1:eots[1]])
  line = first.lstrip().splitlines()[0].rstrip()  # a prompt never spans lines
  assert prepare_lib.opening_words(p, words=50) == line, (line, first[:80])
  assert prepare_lib.opening_words(p, words=1) == line.split()[0]


def test_prepare_with_a_given_tokenizer(prepared):
  tmp, p = prepared
  other = prepare(prep_config(tmp, tokenizer_path=p.tokenizer_path))
  assert not other.reused and other.directory != p.directory
  np.testing.assert_array_equal(other.stream("val")[:p.val_tokens], p.stream("val")[:p.val_tokens])


def test_prepare_vocab_mismatch(tmp_path):
  # The named configs tie data.vocab_size to model.vocab_size; a hand-built config may not.
  config = prep_config(tmp_path)
  config.model.vocab_size = 999
  assert config.data.vocab_size == 999
  unlinked = ml_collections.ConfigDict(config.to_dict())
  unlinked.data.vocab_size = SMALL_VOCAB
  with pytest.raises(errors.DataError, match=f"data.vocab_size={SMALL_VOCAB} but model.vocab_size=999"):
    prepare(unlinked)


# ---------------------------------------------------------------------------- loader


@pytest.fixture()
def stream(tmp_path):
  path = tmp_path / "stream.bin"
  shards.write_shard(path, np.arange(5000) % 65536)
  return str(path)


KW = dict(batch_size=8, block_size=16, seed=7)


def test_batch_rows_are_contiguous_windows(stream):
  b = loader_lib.batch_at(shards.read_shard(stream), 3, **KW)
  assert b.shape == (8, 17) and b.dtype == np.int32
  np.testing.assert_array_equal(b - b[:, :1], np.broadcast_to(np.arange(17), (8, 17)))
  assert b.min() >= 0 and b.max() < 5000


def test_batch_is_a_function_of_seed_and_step(stream):
  tokens = shards.read_shard(stream)
  a = loader_lib.batch_at(tokens, 5, **KW)
  np.testing.assert_array_equal(a, loader_lib.batch_at(tokens, 5, **KW))
  assert not np.array_equal(a, loader_lib.batch_at(tokens, 6, **KW))
  assert not np.array_equal(a, loader_lib.batch_at(tokens, 5, **{**KW, "seed": 8}))


def test_process_slices_concatenate_to_the_global_batch(stream):
  tokens = shards.read_shard(stream)
  glob = loader_lib.batch_at(tokens, 11, **KW)
  parts = [loader_lib.batch_at(tokens, 11, process_index=p, process_count=2, **KW)
           for p in range(2)]
  assert parts[0].shape == (4, 17)
  np.testing.assert_array_equal(np.concatenate(parts), glob)
  with pytest.raises(errors.DataError, match="batch_size=8 is not divisible by process_count=3"):
    loader_lib.batch_at(tokens, 0, process_index=0, process_count=3, **KW)


def test_loader_resumes_exactly_where_an_uninterrupted_run_was(stream):
  with loader_lib.Loader(stream, start_step=0, process_index=0, process_count=1, **KW) as full:
    uninterrupted = [next(full) for _ in range(8)]
  with loader_lib.Loader(stream, start_step=5, process_index=0, process_count=1, **KW) as resumed:
    after_restart = [next(resumed) for _ in range(3)]
    assert resumed.step == 8
  for got, want in zip(after_restart, uninterrupted[5:]):
    np.testing.assert_array_equal(got, want)
  tokens = shards.read_shard(stream)
  for step, got in enumerate(uninterrupted):
    np.testing.assert_array_equal(got, loader_lib.batch_at(tokens, step, **KW))


def test_loader_defaults_to_jax_process_and_splits(stream):
  with loader_lib.Loader(stream, prefetch=1, **KW) as default, \
       loader_lib.Loader(stream, process_index=1, process_count=2, **KW) as second:
    np.testing.assert_array_equal(next(default)[4:], next(second))


def test_loader_reraises_worker_errors_and_closes(stream, monkeypatch):
  real = loader_lib.batch_at

  def failing(tokens, step, **kw):
    if step == 2:
      raise RuntimeError("boom at step 2")
    return real(tokens, step, **kw)

  monkeypatch.setattr(loader_lib, "batch_at", failing)
  loader = loader_lib.Loader(stream, process_index=0, process_count=1, **KW)
  next(loader), next(loader)
  with pytest.raises(RuntimeError, match="boom at step 2"):
    next(loader)
  assert not loader._thread.is_alive()  # pylint: disable=protected-access
  with pytest.raises(StopIteration):
    next(loader)


def test_loader_close_stops_a_blocked_worker(stream):
  loader = loader_lib.Loader(stream, prefetch=1, process_index=0, process_count=1, **KW)
  loader.close()
  assert not loader._thread.is_alive()  # pylint: disable=protected-access


def test_too_short_stream(tmp_path):
  path = tmp_path / "short.bin"
  shards.write_shard(path, np.arange(16))
  with pytest.raises(errors.DataError, match=r"short\.bin.* has 16 tokens.*block_size \+ 1 = 17"):
    loader_lib.Loader(str(path), process_index=0, process_count=1, **KW)
  with pytest.raises(errors.DataError, match="smaller block_size or more data"):
    loader_lib.eval_batches(shards.read_shard(path), 1, 1, 16)


def test_a_batch_larger_than_the_data_is_refused_with_the_numbers(stream):
  with pytest.raises(errors.DataError, match=r"train.batch_size=300 windows .* 17 tokens is 5,100 "
                                        r"tokens, more than the 5,000 .*at most 294"):
    loader_lib.Loader(stream, **{**KW, "batch_size": 300}, process_index=0, process_count=1)


def test_eval_batches_are_fixed_evenly_spaced_and_disjoint(stream):
  tokens = shards.read_shard(stream)
  ev = loader_lib.eval_batches(tokens, 3, 4, 16)
  assert ev.shape == (3, 4, 17) and ev.dtype == np.int32
  np.testing.assert_array_equal(ev, loader_lib.eval_batches(tokens, 3, 4, 16))
  starts = ev[:, :, 0].ravel()
  assert starts[0] == 0 and starts[-1] == 5000 - 17
  assert np.all(np.diff(starts) >= 17)
  halves = [loader_lib.eval_batches(tokens, 3, 4, 16, process_index=p, process_count=2)
            for p in (0, 1)]
  np.testing.assert_array_equal(np.concatenate(halves, axis=1), ev)


# ---------------------------------------------------------------------------- command line


def test_resolve_config_path():
  from experiments import cli  # pylint: disable=import-outside-toplevel
  resolved = cli.resolve_config_path("tiny:norm=post")
  assert resolved.endswith(os.path.join("experiments", "configs", "tiny.py:norm=post"))
  assert os.path.isabs(resolved)
  assert cli.resolve_config_path(tiny.__file__) == tiny.__file__
  with pytest.raises(ValueError, match="'nope' is neither.*names are .*tiny"):
    cli.resolve_config_path("nope")


def test_prepare_command_line_with_overrides(tmp_path):
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  repo = pathlib.Path(__file__).resolve().parents[1]
  cmd = [sys.executable, "-m", "experiments.prepare", "--config=tiny:norm=post",
         "--config.data.max_docs=30", f"--config.data.vocab_size={SMALL_VOCAB}",
         f"--config.model.vocab_size={SMALL_VOCAB}", f"--config.data.cache_dir={tmp_path}"]
  out = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(repo)},
                       capture_output=True, text=True, check=True).stdout
  assert out.startswith("data: preparing the built-in corpus") and "data: training a byte-level BPE" in out
  assert "\nprepared in" in out and f"vocab {SMALL_VOCAB}" in out
  again = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(repo)},
                         capture_output=True, text=True, check=True).stdout
  assert again.startswith("reused cache in")


def test_own_data_on_the_first_try(tmp_path):
  """The README's own-data command on a prose folder: its own workdir, a vocabulary the
  corpus fills, samples from its own words, a 20-step run without a warmup flag."""
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  repo = pathlib.Path(__file__).resolve().parents[1]
  write_prose(tmp_path / "my_texts", files=4)
  short = ["--config.train.steps=20", "--config.train.batch_size=8", "--config.train.eval_batches=2",
           "--config.sample.num_samples=1", "--config.sample.max_new_tokens=8"]

  def run(*args):
    return subprocess.run([sys.executable, "-m", "experiments.run", "--config=tiny",
                           "--config.data.path=my_texts/", *args], cwd=tmp_path, text=True,
                          env={**os.environ, "PYTHONPATH": str(repo), "JAX_PLATFORMS": "cpu"},
                          capture_output=True, timeout=900, check=False)

  done = run(*short)
  assert done.returncode == 0, done.stdout + done.stderr
  # The folder names every override that changes training (experiments.run.default_workdir).
  name = "tiny_data=my_texts_batch_size=8_eval_batches=2"
  workdir = tmp_path / "runs" / name
  config = json.loads((workdir / "config.json").read_text())
  assert "train.warmup_steps=40 is not below train.steps=20: warming up over 2 steps" in done.stdout
  assert config["train"]["warmup_steps"] == 2
  assert f"fills a vocabulary of {config['model']['vocab_size']} tokens" in done.stdout
  (cache,) = (tmp_path / "runs" / "cache").iterdir()
  prompt = prepare_lib.opening_words(prepare_lib.load_prepared(str(cache)))
  assert config["sample"]["prompt"] == prompt and prompt.split()[0].lower() in WORDS
  assert (workdir / "samples.txt").read_text().startswith(prompt)
  refused = run(*short, "--config.model.vocab_size=4000")  # asked for: not fitted, refused
  assert refused.returncode == errors.EXIT_USER_ERROR and refused.stderr.count("\n") == 1
  assert "too small for vocab_size=4000" in refused.stderr
  assert sorted(os.listdir(tmp_path / "runs")) == ["cache", name]
  assert os.listdir(tmp_path / "runs" / "cache") == [cache.name]


# ---------------------------------------------------------------------------- any file a user points at


def test_every_file_of_a_folder_with_extensions_star_and_a_glob(tmp_path):
  for name in ("LICENSE", "COPYING", "sub/README", "notes.txt", ".git/config"):
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(name, encoding="utf-8")
  with pytest.raises(errors.DataError, match=r"no files ending in .*'\*' reads every file"):
    read(tmp_path / "sub")  # README has no extension
  # "*": every file, extensionless ones too, hidden folders left out, in path order.
  assert read(tmp_path, extensions="*") == [
      "COPYING", "LICENSE", "notes.txt", "sub/README"]
  assert read(tmp_path / "LICENSE") == ["LICENSE"]  # a file: any name
  assert read(tmp_path / "**" / "*README*") == ["sub/README"]
  with pytest.raises(errors.DataNotFoundError, match=r"matches no file"):
    read(tmp_path / "*.rst")
  (tmp_path / "sub" / "blob").write_bytes(b"\x00\xff\xfe binary")
  with pytest.raises(errors.DataError, match=r"sub/blob is a binary file"):  # by its content
    read(tmp_path, extensions="*")


def test_a_batch_larger_than_the_text_is_refused_before_anything_is_cached(tmp_path):
  # Both sides hold text (an empty side is refused first: no batch size fixes it); the
  # refusal counts the split's tokens, so its batch size is one the encoded split holds.
  (tmp_path / "text.txt").write_text("".join(f"line {i}: a few words of text, {i * 7}\n"
                                             for i in range(40)), encoding="utf-8")
  config = prep_config(tmp_path, path=str(tmp_path / "text.txt"), val_fraction=0.3)
  config.model.block_size = 16
  config.train.batch_size = 1000
  with pytest.raises(errors.DataError, match=r"train.batch_size=1000 .* use a train.batch_size of "
                     r"at most (\d+)") as caught:
    prepare(config)
  assert not os.listdir(tmp_path / "cache")  # nothing cached
  config.train.batch_size = int(re.search(r"at most (\d+)", str(caught.value))[1])
  prepared = prepare(config)  # the advice holds for the encoded split
  loader_lib.check_fits(len(prepared.stream("train")), len(prepared.stream("val")),
                        config.train.batch_size, 16, "the split")


# ---------------------------------------------------------------------------- streaming at scale


@pytest.mark.parametrize("damaged", [False, True])
def test_an_interrupted_preparation_resumes_after_its_last_whole_shard(tmp_path, monkeypatch,
                                                                      capsys, damaged):
  """Stopped after its third train shard, the rerun keeps those three (not rewritten) and
  ends with the shards an uninterrupted preparation writes, byte for byte; with one of them
  damaged, it encodes from the start, to the same shards."""
  monkeypatch.setattr(encode_lib, "ENCODE_BATCH_CHARS", 5_000)  # several batches a shard
  whole = prepare(prep_config(tmp_path / "whole", shard_tokens=20_000))
  config = prep_config(tmp_path / "cut", shard_tokens=20_000)

  def stop_after_three_shards():  # a SIGTERM seen at the loop's check after the third shard
    progress = list((tmp_path / "cut" / "cache").glob("*/progress.json"))
    if progress and len(json.loads(progress[0].read_text())["train"]) >= 3:
      raise signals_lib.Interrupted(signal.SIGTERM, "encoding the corpus")
  monkeypatch.setattr(signals_lib, "check", stop_after_three_shards)
  with pytest.raises(signals_lib.Interrupted) as stopped:
    prepare(config)
  monkeypatch.undo()
  (directory,) = (tmp_path / "cut" / "cache").iterdir()
  done = json.loads((directory / "progress.json").read_text())["train"]
  assert 3 <= len(done) < len(whole.train_paths)
  # What the entry points print after "interrupted while encoding the corpus: ": the shards kept.
  assert stopped.value.kept == (
      f"{len(done)} whole train shard(s), {sum(s['tokens'] for s in done):,} tokens, kept in "
      f"{directory}; the same command resumes after them")
  kept = {s["file"]: os.stat(directory / s["file"]).st_mtime_ns for s in done}
  if damaged:
    os.truncate(directory / "train_000001.bin", 100)
  capsys.readouterr()
  resumed = prepare(config)
  said = capsys.readouterr().out
  assert ("damaged or missing; encoding from the start" in said) == damaged
  assert (f"resuming after {len(done)} whole train shard(s)" in said) != damaged
  if not damaged:
    assert {f: os.stat(directory / f).st_mtime_ns for f in kept} == kept  # not encoded again
  assert [files_lib.sha256(p) for p in resumed.train_paths + resumed.val_paths] == [
      files_lib.sha256(p) for p in whole.train_paths + whole.val_paths]
  assert (resumed.train_tokens, resumed.train_docs) == (whole.train_tokens, whole.train_docs)


def test_a_killed_and_an_interrupted_command_resume(tmp_path):
  """A real process: SIGKILL mid-encoding keeps its whole shards; Ctrl-C (SIGINT) stops in
  one line with exit 4 within seconds; the reruns finish what an uninterrupted run writes."""
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  import time  # pylint: disable=import-outside-toplevel
  write_prose(tmp_path / "prose", files=60, sentences=400)
  args = [f"--config.data.path={tmp_path / 'prose'}", "--config.data.shard_tokens=5000",
          f"--config.data.cache_dir={tmp_path / 'cache'}", "--config.model.vocab_size=300"]
  # Small encoding batches, so a shard is written every moment (the module's constant).
  code = ("import sys; from andrea_jax import encode; encode.ENCODE_BATCH_CHARS = 3000; "
          "import runpy; sys.argv = ['prepare', '--config=tiny', *sys.argv[1:]]; "
          "runpy.run_module('experiments.prepare', run_name='__main__')")
  repo = pathlib.Path(__file__).resolve().parents[1]
  env = {**os.environ, "PYTHONPATH": str(repo), "JAX_PLATFORMS": "cpu"}

  def start():
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)

  def wait_for_shards(proc, more_than=0):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
      progress = list((tmp_path / "cache").glob("*/progress.json"))
      if progress and len(json.loads(progress[0].read_text())["train"]) > more_than:
        return len(json.loads(progress[0].read_text())["train"])
      time.sleep(0.05)
    timed_out = proc.poll() is None
    if timed_out:
      proc.kill()
    out = proc.communicate()
    raise AssertionError(f"no shard written ({'120 s passed' if timed_out else 'it exited'}, "
                         f"exit code {proc.returncode}): {out}")

  proc = start()
  first = wait_for_shards(proc)
  proc.kill()
  proc.communicate()
  proc = start()
  wait_for_shards(proc, more_than=first + 1)
  proc.send_signal(signal.SIGINT)
  at = time.monotonic()
  out, err = proc.communicate(timeout=30)
  assert time.monotonic() - at < 10 and proc.returncode == errors.EXIT_INTERRUPTED, (out, err)
  assert f"resuming after {first} whole train shard(s)" in out
  # It names the shards kept (the rerun resumes after them), not "nothing was saved".
  assert re.search(r"interrupted while encoding the corpus: \d+ whole train shard\(s\), [\d,]+ "
                   r"tokens, kept in .*; the same command resumes after them", out), out
  assert "Traceback" not in err
  done = subprocess.run([sys.executable, "-c", code, *args], env=env, text=True,
                        capture_output=True, check=True)
  assert "data: resuming after" in done.stdout and "prepared in" in done.stdout
  (directory,) = (tmp_path / "cache").iterdir()
  fresh = prepare(prep_config(tmp_path / "fresh", path=str(tmp_path / "prose"),
                                          shard_tokens=5000, vocab_size=300, max_docs=0,
                                          val_fraction=0.05))
  assert fresh.train_tokens == json.loads((directory / "manifest.json").read_text())["train"]["tokens"]
  assert [files_lib.sha256(p) for p in fresh.train_paths] == [
      files_lib.sha256(directory / os.path.basename(p)) for p in fresh.train_paths]


def test_no_shard_header_overflows_past_two_to_the_31_tokens(tmp_path):
  """llm.c's header counts in int32: a corpus of any size is cut into shards of at most
  data.shard_tokens; one array of 2**31 tokens is refused by name, not by an OverflowError."""
  writer = shards.ShardWriter(str(tmp_path), "train", shard_tokens=1000)
  taken = writer.add(np.arange(2500, dtype=np.uint16))
  writer.close()
  assert taken == 2000 and [s["tokens"] for s in writer.shards] == [1000, 1000, 500]
  assert np.array_equal(shards.TokenStream([tmp_path / s["file"] for s in writer.shards])[990:1010],
                        np.arange(990, 1010))
  with pytest.raises(errors.DataError, match=r"data.shard_tokens=2147483648; expected"):
    shards.ShardWriter(str(tmp_path), "train", shard_tokens=2**31)

  huge = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint16), shape=(2**31,), strides=(0,))
  with pytest.raises(errors.DataError, match=r"2,147,483,648 tokens do not fit one llm.c shard"):
    shards.write_shard(tmp_path / "x.bin", huge)  # 2**31 tokens that take no memory


def test_windows_cross_shard_boundaries(tmp_path):
  paths = []
  for k, n in enumerate((7, 1, 30)):
    paths.append(tmp_path / f"s{k}.bin")
    shards.write_shard(paths[-1], np.arange(sum((7, 1, 30)[:k]), sum((7, 1, 30)[:k + 1])))
  stream = shards.TokenStream(paths)
  assert len(stream) == 38 and np.array_equal(stream[5:12], np.arange(5, 12))
  batch = loader_lib.batch_at(stream, 3, batch_size=16, block_size=9, seed=0)
  assert all(np.array_equal(row, np.arange(row[0], row[0] + 10)) for row in batch)
  one = tmp_path / "one.bin"
  shards.write_shard(one, np.arange(38))
  assert np.array_equal(batch, loader_lib.batch_at(shards.read_shard(one), 3, batch_size=16,
                                                   block_size=9, seed=0))


def test_a_folder_of_llm_c_shards_trains_as_it_is(prepared, tmp_path):
  tmp, p = prepared
  folder = tmp_path / "fineweb10B"
  folder.mkdir()
  for k, path in enumerate(p.val_paths):
    shutil.copy(path, folder / f"fineweb_val_{k:06d}.bin")
  for k, path in enumerate(p.train_paths):
    shutil.copy(path, folder / f"fineweb_train_{k + 1:06d}.bin")
  config = prep_config(tmp, shards=str(folder), tokenizer_path=p.tokenizer_path)
  given = prepare(config)
  assert (given.train_tokens, given.val_tokens, given.eot_id) == (p.train_tokens, p.val_tokens,
                                                                  p.eot_id)
  assert [os.path.basename(f) for f in given.train_paths][:2] == ["fineweb_train_000001.bin",
                                                                  "fineweb_train_000002.bin"]
  assert np.array_equal(given.stream("train")[:p.train_tokens], p.stream("train")[:p.train_tokens])
  with pytest.raises(errors.DataError, match=r"needs data.tokenizer_path"):
    prepare(prep_config(tmp, shards=str(folder)))
  with pytest.raises(errors.DataError, match=r"is a file; point it at the folder"):
    prepare(prep_config(tmp, shards=str(given.train_paths[0]),
                                    tokenizer_path=p.tokenizer_path))
  for path in folder.glob("*val*"):
    path.unlink()
  with pytest.raises(errors.DataError, match=r"no val shard among its \d+ .bin file"):
    prepare(config)
