"""Tokenizer: exact vocabulary layout, file format and exact encode/decode round trips."""

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest
import tokenizers

from andrea_jax import corpus as corpus_lib
from andrea_jax import errors
from andrea_jax import prepare as prepare_lib
from andrea_jax import tokenizer as T

# Its tests share module-scoped fixtures: on one xdist worker they are computed once
# (pyproject.toml: --dist=loadgroup).
pytestmark = pytest.mark.xdist_group("test_tokenizer")

SMALL_VOCAB = 256 + 64 + 1


@pytest.fixture(scope="module")
def corpus():
  return corpus_lib.builtin_documents(max_docs=300)


@pytest.fixture(scope="module")
def tok(corpus):
  return T.train_tokenizer(corpus[:60], SMALL_VOCAB)


@pytest.mark.parametrize("vocab_size", [257, SMALL_VOCAB, 1000, 4353])
def test_vocab_is_exactly_the_requested_size(corpus, vocab_size):
  tok = T.train_tokenizer(corpus, vocab_size)
  assert tok.get_vocab_size(with_added_tokens=True) == vocab_size
  assert T.eot_id(tok) == vocab_size - 1
  assert tok.id_to_token(vocab_size - 1) == T.EOT


def test_ids_0_to_255_are_the_bytes(tok):
  table = T.byte_to_unicode()
  assert set(table.values()) == set(tokenizers.pre_tokenizers.ByteLevel.alphabet())
  assert [tok.token_to_id(table[b]) for b in range(256)] == list(range(256))
  assert [T.encode(tok, chr(b)) for b in range(128)] == [[b] for b in range(128)]
  assert T.encode(tok, "\u00e9") == [0xC3, 0xA9]  # no merge for it in a 64-merge vocab


def test_learned_merges_encode_common_text_shorter(tok):
  text = "def __init__(self):\n    return self\n"
  assert len(T.encode(tok, text)) < len(text.encode())
  assert max(T.encode(tok, text)) >= 256


def test_too_small_corpus_names_the_sizes():
  with pytest.raises(T.TokenizerError, match=r"too small for vocab_size=400.*only \d+ merges"):
    T.train_tokenizer(["abab abab"], 400)


@pytest.mark.parametrize("vocab_size", [0, 256, 65537])
def test_vocab_size_out_of_range(vocab_size):
  with pytest.raises(T.TokenizerError, match=f"vocab_size={vocab_size} is out of range"):
    T.train_tokenizer(["hello"], vocab_size)


def test_saved_file_loads_with_the_library_and_the_project(tok, tmp_path):
  path = tmp_path / "tokenizer.json"
  T.save(tok, path)
  text = "print('hello, world')  # 日本語 😀\n"
  plain = tokenizers.Tokenizer.from_file(str(path))
  assert plain.get_vocab_size() == SMALL_VOCAB
  assert plain.encode(text).ids == T.encode(tok, text)
  loaded = T.load(path, SMALL_VOCAB)
  assert T.encode(loaded, text) == T.encode(tok, text)
  assert T.eot_id(loaded) == SMALL_VOCAB - 1


def test_load_checks_size_and_existence(tok, tmp_path):
  path = tmp_path / "tokenizer.json"
  T.save(tok, path)
  with pytest.raises(T.TokenizerError, match=f"has {SMALL_VOCAB} tokens, expected vocab_size=999"):
    T.load(path, 999)
  with pytest.raises(FileNotFoundError, match="missing.json"):
    T.load(tmp_path / "missing.json")


def test_load_errors_are_data_errors(tmp_path):
  # The entry points print an errors.AndreaError as one line (exit code 2), not a traceback.
  with pytest.raises(errors.DataError, match="missing.json' does not exist"):
    T.load(tmp_path / "missing.json")
  (tmp_path / "bad.json").write_text('{"model": 3}')
  with pytest.raises(errors.DataError, match="bad.json' is not a readable tokenizer.json"):
    T.load(tmp_path / "bad.json")
  with pytest.raises(errors.DataError, match="out of range"):
    T.check_vocab_size(10)


def test_eot_string_in_text_is_not_the_eot_token(tok):
  text = f"a{T.EOT}b"
  ids = T.encode(tok, text)
  assert T.eot_id(tok) not in ids
  assert T.decode(tok, ids) == text
  assert T.eot_id(tok) not in T.encode_batch(tok, [text])[0]


def test_decode_renders_eot(tok):
  ids = T.encode(tok, "x") + [T.eot_id(tok)] + T.encode(tok, "y")
  assert T.decode(tok, ids) == f"x{T.EOT}y"


def test_encode_batch_equals_encode(tok, corpus):
  texts = corpus[60:90] + ["", " ", "\n\n"]
  assert T.encode_batch(tok, texts) == [T.encode(tok, t) for t in texts]


SPECIAL = st.sampled_from(["", " ", "  ", "\t\n", "\r\n", "\x00", "\x1b[0m", "\u200b", "😀",
                           "👩‍👩‍👧", "日本語", "한국어", "e\u0301", "\u0301", "\ufeff", T.EOT,
                           "\U0010ffff", " leading", "trailing ", "'s", "a  b"])
TEXT = st.lists(st.one_of(st.text(), SPECIAL), max_size=8).map("".join)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(text=TEXT)
def test_round_trip_any_unicode(tok, text):
  ids = T.encode(tok, text)
  assert all(0 <= i < SMALL_VOCAB - 1 for i in ids)
  assert T.decode(tok, ids) == text


def test_round_trip_empty_string(tok):
  assert T.encode(tok, "") == []
  assert T.decode(tok, []) == ""


def test_round_trip_whole_tiny_validation_split(tok):
  from experiments.configs import tiny  # pylint: disable=import-outside-toplevel
  from andrea_jax import config as config_lib  # pylint: disable=import-outside-toplevel
  data = config_lib.RunConfig.from_configdict(tiny.get_config()).data
  splitter = prepare_lib.Splitter(data)
  val = [run.text for run in splitter.split((doc, True) for doc in corpus_lib.documents(data))
         if run.side == "val"]
  assert len(val) > 50
  for doc, ids in zip(val, T.encode_batch(tok, val)):
    assert T.decode(tok, ids) == doc


def test_training_is_deterministic(corpus):
  first = T.train_tokenizer(corpus[:40], SMALL_VOCAB)
  assert first.to_str() == T.train_tokenizer(corpus[:40], SMALL_VOCAB).to_str()


@hypothesis.settings(max_examples=100, deadline=None)
@hypothesis.given(text=TEXT)
def test_token_byte_lengths_sum_to_the_utf8_size(tok, text):
  lengths = T.token_byte_lengths(tok)
  assert lengths.shape == (SMALL_VOCAB,) and lengths[T.eot_id(tok)] == 0
  ids = T.encode(tok, text) + [T.eot_id(tok)]
  assert lengths[np.array(ids, dtype=np.int64)].sum() == len(text.encode("utf-8"))


def test_token_byte_lengths_of_bytes_and_merges(tok):
  lengths = T.token_byte_lengths(tok)
  assert (lengths[:256] == 1).all() and (lengths[256:-1] >= 2).all()
  # A merge of printable ASCII decodes to as many bytes as its length says.
  ascii_ids = [i for i in range(256, SMALL_VOCAB - 1) if T.decode(tok, [i]).isascii()]
  assert ascii_ids and all(lengths[i] == len(T.decode(tok, [i])) for i in ascii_ids)
