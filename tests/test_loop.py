"""The loop's record of each member, that its summary is built from: kept in memory, and
for a resumed segment started from the earlier segments' rows up to the resume step; an
evaluation's progress in a log."""

import time
import types

import numpy as np

from andrea_jax import loop
from andrea_jax import metrics as metrics_lib


def test_a_fresh_record_is_empty_and_keeps_what_it_is_given(tmp_path):
  record = loop.Record.start([str(tmp_path)], 0)
  assert (record.train_loss, record.initial_val, record.val) == ([None], [None], [None])
  record.add(0, {"step": 0, "val_loss": 5.0})
  record.add(0, {"step": 4, "loss": 4.5, "lr": 1e-3})
  record.add(0, {"step": 4, "val_loss": 4.0})
  assert (record.train_loss, record.initial_val, record.val) == ([4.5], [5.0], [(4.0, 4)])


def test_a_resumed_record_starts_from_the_rows_up_to_the_resume_step(tmp_path):
  a, b = tmp_path / "a", tmp_path / "b"
  for d, offset in ((a, 0.0), (b, 1.0)):
    d.mkdir()
    w = metrics_lib.Writer(str(d), tensorboard=False)
    w.write(0, {"val_loss": 6.0 + offset})
    for step in (2, 4, 6):
      w.write(step, {"loss": 5.0 - step / 10 + offset})
    w.write(4, {"val_loss": 4.2 + offset})
    w.write(6, {"val_loss": 4.0 + offset})  # after the checkpoint the run resumes from
    w.close()
  record = loop.Record.start([str(a), str(b)], 4)
  np.testing.assert_allclose(record.train_loss, [4.6, 5.6])
  assert record.initial_val == [6.0, 7.0]
  assert record.val == [(4.2, 4), (5.2, 4)]


def test_an_evaluation_prints_its_progress_where_stdout_is_not_a_terminal(monkeypatch, capsys):
  """A long evaluation in a log (issue 44): a line every ``EVAL_LINE_EVERY_S`` with the
  batches done and the time left, none per batch, no closing line (the result follows)."""
  now = [0.0]
  monkeypatch.setattr(time, "monotonic", lambda: now[0])

  def eval_loss(params, batch):  # each batch takes 4 s
    now[0] += 4.0
    return np.float32(batch.mean())

  models = types.SimpleNamespace(eval_loss=eval_loss)  # all that evaluate reads of Models
  batches = [np.full((2, 5), float(i)) for i in range(8)]
  eval_set = loop.EvalSet(arrays=batches, unigram=0.0, targets=None, token_bytes=None,
                          first_batch=batches[0])
  assert loop.evaluate(models, None, eval_set, step=12) == np.float32(3.5)
  lines = capsys.readouterr().out.splitlines()
  assert lines == [  # every 10 s (loop.EVAL_LINE_EVERY_S): at 12 s (3 batches), at 24 s (6)
      "eval step 12: batch 3/8 (38 %), 4.0 s/batch, about 20 s left",
      "eval step 12: batch 6/8 (75 %), 4.0 s/batch, about 8 s left"]
