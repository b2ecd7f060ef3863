"""Progress of a long phase, on a terminal and in a log alike.

``Progress`` is a tqdm bar on a terminal; when the output is not one (a log file, a
notebook's captured output, a job scheduler), tqdm draws nothing, so it prints a plain
line every ``every_s`` seconds instead: what is done, the rate and an estimate of the
time left. The last line comes at ``close``.
"""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

# Seconds between two progress lines in a log that is not a terminal.
LINE_EVERY_S = 30.0


def _size(n: float, unit: str) -> str:
  if unit != "B":
    return f"{n:,.0f} {unit}"
  for scale, name in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
    if n >= scale:
      return f"{n / scale:,.1f} {name}"
  return f"{n:,.0f} B"


def _duration(seconds: float) -> str:
  if seconds >= 3600:
    return f"{seconds / 3600:.1f} h"
  return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


class Progress:
  """``update(n)`` as work is done; ``note`` adds a few words (e.g. shards written)."""

  def __init__(self, desc: str, total: float = 0, unit: str = "B", initial: float = 0,
               every_s: float = LINE_EVERY_S, stream=None):
    self.desc, self.total, self.unit, self.done = desc, total, unit, initial
    self.note = ""
    self.stream = stream or sys.stdout
    self.bar = tqdm(total=total or None, initial=initial, desc=desc, unit=unit,
                    unit_scale=unit == "B", disable=None, leave=False, dynamic_ncols=True)
    self.lines = self.bar.disable or not getattr(self.stream, "isatty", lambda: False)()
    self.every_s = every_s
    self.start = self.last = time.monotonic()
    self.start_done = initial

  def update(self, n: float) -> None:
    self.done += n
    self.bar.update(n)
    if self.lines and time.monotonic() - self.last >= self.every_s:
      self.print_line()

  def line(self) -> str:
    """``desc: 1.2 GB of 10.0 GB (12 %), 4.1 MB/s, about 35 min left``."""
    elapsed = max(time.monotonic() - self.start, 1e-9)
    rate = (self.done - self.start_done) / elapsed
    text = f"{self.desc}: {_size(self.done, self.unit)}"
    if self.total:
      text += f" of {_size(self.total, self.unit)} ({100 * self.done / self.total:.0f} %)"
    text += f", {_size(rate, self.unit)}/s"
    if self.total and rate > 0 and self.done < self.total:
      text += f", about {_duration((self.total - self.done) / rate)} left"
    return text + (f"; {self.note}" if self.note else "")

  def print_line(self) -> None:
    self.last = time.monotonic()
    print(self.line(), file=self.stream, flush=True)

  def close(self) -> None:
    self.bar.close()
    if self.lines:
      self.print_line()

  def __enter__(self) -> "Progress":
    return self

  def __exit__(self, *exc) -> None:
    self.close()
