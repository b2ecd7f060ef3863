"""andrea_jax/split.py: the advice when a batch cannot fit the training split names the field that fixes it."""

import types

import pytest

from andrea_jax import errors
from andrea_jax import split as split_lib


def check(batch_size, block_size, nbytes, docs):
  config = types.SimpleNamespace(train=types.SimpleNamespace(batch_size=batch_size),
                                 model=types.SimpleNamespace(block_size=block_size))
  splitter = types.SimpleNamespace(bytes={"train": nbytes}, docs={"train": docs})
  split_lib.check_batch_bound(config, splitter)


def test_a_batch_that_a_smaller_batch_fixes_names_the_batch_size():
  with pytest.raises(errors.DataError, match=r"train.batch_size=8 windows .* 3 documents, .* use a "
                     r"train.batch_size of at most 2 \(or a smaller model.block_size\)"):
    check(8, 127, 300, 3)


def test_one_window_too_long_names_the_block_size_not_a_batch_of_one():
  # A 3-line file: 40 bytes and 3 documents hold at most 43 tokens; a batch of 1 window of
  # 129 does not fit, and a batch size of 1 cannot fix it.
  with pytest.raises(errors.DataError) as caught:
    check(1, 128, 40, 3)
  text = str(caught.value)
  assert "train.batch_size=1 window of" in text and "use a model.block_size of at most 42" in text
  assert "batch_size of at most" not in text
  with pytest.raises(errors.DataError, match=r"1 document, a token"):
    check(1, 128, 40, 1)
  check(1, 42, 40, 3)  # the advice fits
