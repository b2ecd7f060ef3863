"""Progress of a long phase in a log that is not a terminal: a line every few seconds with
what is done, the rate and the time left (andrea_jax/progress.py)."""

import io
import time

from andrea_jax import progress


def test_a_log_gets_lines_with_the_rate_and_an_estimate(monkeypatch):
  now = [0.0]
  monkeypatch.setattr(time, "monotonic", lambda: now[0])
  out = io.StringIO()  # not a terminal
  bar = progress.Progress("encoding", total=100e6, every_s=15, stream=out)
  for _ in range(4):  # 10 MB every 10 s
    now[0] += 10
    bar.update(10e6)
  bar.note = "2 train shard(s) written"
  bar.close()
  lines = out.getvalue().splitlines()
  assert lines == [  # at 20 s (15 s after the start), at 40 s (15 s after the last), at close
      "encoding: 20.0 MB of 100.0 MB (20 %), 1.0 MB/s, about 80 s left",
      "encoding: 40.0 MB of 100.0 MB (40 %), 1.0 MB/s, about 60 s left",
      "encoding: 40.0 MB of 100.0 MB (40 %), 1.0 MB/s, about 60 s left; 2 train shard(s) written"]


def test_an_unknown_total_gets_the_rate_alone(monkeypatch):
  now = [0.0]
  monkeypatch.setattr(time, "monotonic", lambda: now[0])
  bar = progress.Progress("streaming", stream=io.StringIO())
  now[0] = 4.0
  bar.update(2e6)
  assert bar.line() == "streaming: 2.0 MB, 500.0 kB/s"


def test_sizes_and_durations_read_as_a_person_writes_them():
  assert progress._size(1.5e9, "B") == "1.5 GB" and progress._size(999, "B") == "999 B"
  assert progress._size(12, "docs") == "12 docs"
  assert progress._duration(30) == "30 s" and progress._duration(600) == "10 min"
  assert progress._duration(2 * 3600) == "2.0 h"
