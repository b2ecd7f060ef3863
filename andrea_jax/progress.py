"""Progress of a long phase, on a terminal and in a log alike.

``Progress`` is a tqdm bar on a terminal; when the output is not one (a log file, a
notebook's captured output, a job scheduler), tqdm draws nothing, so it prints a plain
line every ``every_s`` seconds instead: what is done, the rate and an estimate of the
time left. The last line comes at ``close`` (unless ``last_line=False``: a phase whose
result is printed next, such as an evaluation). Bytes read as sizes (``1.2 GB of 10.0
GB``), other units as counts (``batch 12/40``).

``say`` prints one line of a phase's progress at once (a preparation's steps).
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


def _rate(rate: float, unit: str) -> str:
  """``4.1 MB/s``; a count as ``3.0 batch/s``, or below one a second ``2.6 s/batch``."""
  if unit == "B":
    return f"{_size(rate, unit)}/s"
  return f"{rate:,.1f} {unit}/s" if rate >= 1 or rate <= 0 else f"{1 / rate:,.1f} s/{unit}"


def _duration(seconds: float) -> str:
  if seconds >= 3600:
    return f"{seconds / 3600:.1f} h"
  return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


class Progress:
  """``update(n)`` as work is done; ``note`` adds a few words (e.g. shards written).

  ``show=False`` shows nothing (a process other than the lead of a multi-process run).
  """

  def __init__(self, desc: str, total: float = 0, unit: str = "B", initial: float = 0,
               every_s: float = LINE_EVERY_S, stream=None, show: bool = True,
               last_line: bool = True):
    self.desc, self.total, self.unit, self.done = desc, total, unit, initial
    self.note = ""
    self.stream = stream or sys.stdout
    self.bar = tqdm(total=total or None, initial=initial, desc=desc, unit=unit,
                    unit_scale=unit == "B", disable=None if show else True, leave=False,
                    dynamic_ncols=True)
    self.lines = show and (self.bar.disable
                           or not getattr(self.stream, "isatty", lambda: False)())
    self.every_s, self.last_line = every_s, last_line
    self.start = self.last = time.monotonic()
    self.start_done = initial

  def update(self, n: float) -> None:
    self.done += n
    self.bar.update(n)
    if self.lines and time.monotonic() - self.last >= self.every_s:
      self.print_line()

  def line(self) -> str:
    """``desc: 1.2 GB of 10.0 GB (12 %), 4.1 MB/s, about 35 min left``;
    ``desc: batch 12/40 (30 %), 2.6 s/batch, about 72 s left``."""
    elapsed = max(time.monotonic() - self.start, 1e-9)
    rate = (self.done - self.start_done) / elapsed
    share = f" ({100 * self.done / self.total:.0f} %)" if self.total else ""
    if self.unit == "B":
      text = f"{self.desc}: {_size(self.done, self.unit)}"
      text += f" of {_size(self.total, self.unit)}{share}" if self.total else ""
    else:
      text = f"{self.desc}: {self.unit} {self.done:,.0f}"
      text += f"/{self.total:,.0f}{share}" if self.total else ""
    text += f", {_rate(rate, self.unit)}"
    if self.total and rate > 0 and self.done < self.total:
      text += f", about {_duration((self.total - self.done) / rate)} left"
    return text + (f"; {self.note}" if self.note else "")

  def print_line(self) -> None:
    self.last = time.monotonic()
    print(self.line(), file=self.stream, flush=True)

  def close(self) -> None:
    self.bar.close()
    if self.lines and self.last_line:
      self.print_line()

  def __enter__(self) -> "Progress":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def say(message: str) -> None:
  """A progress line on stdout, flushed: a log that is not a terminal shows it at once."""
  print(message, flush=True)
