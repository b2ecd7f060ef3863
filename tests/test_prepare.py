"""The advice when data is too small for a run's batch (``loader.batch_fix``): it names the
field that fixes it, and following it passes every later check at once (issue 73: a
27-byte corpus was told a block size that then met a refusal of the batch size)."""

import itertools
import re

import pytest

from andrea_jax import errors
from andrea_jax import loader as loader_lib


def passes(train, val, batch, block, multiple=1, prompt=0, new_tokens=0):
  """Every check a run makes of the data's size, written apart from ``batch_fix``."""
  return (block >= 1 and batch >= 1 and batch % multiple == 0 and block + 1 <= val
          and batch * (block + 1) <= train and (not new_tokens or prompt + new_tokens <= block))


def follow(fix, batch, block, new_tokens):
  """The settings after doing what ``fix`` says (its largest allowed values)."""
  for field, value in re.findall(r"(batch_size|block_size|max_new_tokens|num_samples)"
                                 r"(?:=| of at most )(\d+)", fix):
    value = int(value)
    if field == "batch_size":
      batch = value
    elif field == "block_size":
      block = value
    else:
      new_tokens = value
  return batch, block, new_tokens


def test_a_batch_that_a_smaller_batch_fixes_names_the_batch_size():
  with pytest.raises(errors.DataError, match=r"train.batch_size=8 windows .* use a "
                     r"train.batch_size of at most 2 \(or a smaller model.block_size\)"):
    loader_lib.check_fits(303, 500, 8, 127, "the split")


def test_one_window_too_long_names_the_block_size_not_a_batch_of_one():
  with pytest.raises(errors.DataError) as caught:
    loader_lib.check_fits(43, 500, 1, 128, "the split")
  text = str(caught.value)
  assert "one window of block_size + 1 = 129" in text and "block_size of at most 42" in text
  assert "batch_size" not in text.split(";")[1]
  loader_lib.check_fits(43, 500, 1, 42, "the split")  # the advice fits


def test_a_27_byte_corpus_is_told_both_settings_at_once():
  # The case: 28 training tokens at most, a batch of 32 windows of 129. The old
  # advice, block_size 1, then met a refusal of the batch size (32 x 2 = 64 > 28).
  fix = loader_lib.batch_fix(28, 28, 32, 128)
  assert "block_size=27" in fix and "batch_size=1" in fix
  assert passes(28, 28, *follow(fix, 32, 128, 0)[:2])


@pytest.mark.parametrize("multiple,prompt,new_tokens", [(1, 0, 0), (1, 3, 64), (4, 1, 8),
                                                         (2, 30, 64)])
def test_following_the_advice_passes_every_check(multiple, prompt, new_tokens):
  refused = 0
  for train, val, batch, block in itertools.product(
      (1, 2, 5, 28, 43, 122, 303, 5000), (1, 3, 69, 130, 5000), (1, 4, 8, 32), (1, 16, 128)):
    if batch % multiple:
      continue
    fix = loader_lib.batch_fix(train, val, batch, block, multiple, prompt, new_tokens)
    if fix is None:
      assert passes(train, val, batch, block, multiple)  # (the samples are their own check)
      continue
    refused += 1
    if fix.startswith("add text"):  # no setting of 1 or more fits: said so
      assert not any(passes(train, val, multiple, b, multiple) for b in range(1, block + 1))
      continue
    new = 0 if "num_samples=0" in fix else new_tokens
    b, t, n = follow(fix, batch, block, new)
    assert passes(train, val, b, t, multiple, prompt, n), (train, val, batch, block, fix)
    assert t <= block and b <= batch and (t == block or b < batch or
                                          t == min(block, val - 1, train // multiple - 1))
  assert refused > 50
