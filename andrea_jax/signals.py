"""SIGTERM/SIGINT as a request to save and stop, checked by the training loop after each step."""

from __future__ import annotations

import signal
import threading

import jax

from andrea_jax import sharding


class StopSignals:
  """Turns SIGTERM/SIGINT into a flag the loop checks after each step (main thread only)."""

  def __init__(self):
    self.received: int | None = None
    self._old = {}

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._old[sig] = signal.signal(sig, self._handle)
    return self

  def _handle(self, signum, frame):
    del frame
    self.received = signum

  def __exit__(self, *exc):
    for sig, handler in self._old.items():
      signal.signal(sig, handler)


def stop_requested(signals: StopSignals, step: int, every: int) -> bool:
  """Whether to save and stop after this step because of SIGTERM/SIGINT.

  Processes must agree, or one would enter the (collective) save while the others train
  on: with several, they compare their flags at log steps, where the loop syncs anyway.
  """
  if jax.process_count() == 1:
    return bool(signals.received)
  return step % every == 0 and sharding.any_process(bool(signals.received))
