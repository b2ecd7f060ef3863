"""SIGTERM/SIGINT: one handler for a whole run, from data preparation to the last save.

A signal is a request to stop. ``StopSignals`` (entered once, by the entry point or by
``train.run``; nested entries reuse it) turns it into a flag; the run reads the flag at its
safe points: after each training step (``stop_requested``: save a checkpoint, exit 4), and
between the batches of an evaluation, after compilation and between the phases of a start
(``check``: raise ``Interrupted``, which the entry point turns into exit 4 and the resume
line). Nothing is raised from inside the handler itself (an exception raised there can land
in a garbage-collector callback, where Python drops it: a Ctrl-C that was ignored).

Some calls cannot be interrupted: XLA compiling a program, a long jitted step or
evaluation batch, a tokenizer being trained. A watcher thread wakes on the signal (Python's
wakeup fd, written by the C-level handler even while the main thread is blocked) and, when
the main thread has not reached a safe point within ``GRACE_S`` seconds, prints what
happened and the resume command and ends the process with exit 4, but only where nothing
trained is unsaved: before the first step (``progress``: nothing was trained yet), or with
every step trained already in a checkpoint. Where steps trained since the newest checkpoint
(the loop reports both, ``progress``), it says it waits for the running step and the save,
and waits: the first signal never throws trained work away. A second signal ends the
process at once in any phase, saying which steps that loses. Once the run has acknowledged
the stop (it is saving), it gets ``SAVE_GRACE_S``.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time

from andrea_jax import errors

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Seconds the main thread has to reach a safe point after a signal, before the watcher
# ends the process (environment: ANDREA_STOP_GRACE_S).
GRACE_S = float(os.environ.get("ANDREA_STOP_GRACE_S", 3.0))
# Seconds a run that is saving on its way out has, before the watcher ends it.
SAVE_GRACE_S = 120.0

_active: "StopSignals | None" = None


class Interrupted(BaseException):
  """A stop requested by SIGTERM/SIGINT outside a training step (a BaseException, like
  KeyboardInterrupt: ``except Exception`` does not swallow it)."""

  def __init__(self, signum: int, phase: str):
    super().__init__(f"interrupted by {signal.Signals(signum).name} while {phase}")
    self.signum, self.phase = signum, phase
    self.kept = ""  # what the interrupted phase kept, for the entry point's line (encode.py)


class StopSignals:
  """SIGTERM/SIGINT as a flag (``received``), with a watcher for a blocked main thread."""

  def __init__(self):
    self.received: int | None = None
    self.phase = "starting"  # what the run is doing, for the messages
    self.resume: str | None = None  # the command that resumes the run (the entry point's)
    self.acknowledged = False  # the run is stopping (saving): the watcher waits longer
    self.trained: int | None = None  # the newest step known trained (None: not a training run)
    self.saved = 0  # the newest step in a checkpoint (0: none)
    self._beat = time.monotonic()
    self._old: dict = {}
    self._installed = False

  def __enter__(self) -> "StopSignals":
    global _active
    if _active is not None:
      return _active
    if threading.current_thread() is not threading.main_thread():
      return self  # signals reach the main thread only
    for sig in STOP_SIGNALS:
      self._old[sig] = signal.signal(sig, self._handle)
    self._r, self._w = socket.socketpair()
    self._w.setblocking(False)
    self._old_fd = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
    self._thread = threading.Thread(target=self._watch, name="andrea-stop-watcher", daemon=True)
    self._thread.start()
    self._installed, _active = True, self
    return self

  def __exit__(self, *exc) -> None:
    global _active
    if not self._installed:
      return
    _active, self._installed = None, False
    signal.set_wakeup_fd(self._old_fd)
    for sig, handler in self._old.items():
      signal.signal(sig, handler)
    try:
      self._w.send(b"\0")  # tells the watcher to end
    except OSError:
      pass
    self._thread.join(timeout=1)
    self._r.close()
    self._w.close()

  def _handle(self, signum, frame) -> None:
    del frame
    if self.received is None:
      self.received = signum

  def beat(self) -> None:
    """The main thread is at a safe point (a training step ended): the watcher waits."""
    self._beat = time.monotonic()

  def progress(self, trained: int | None = None, saved: int | None = None) -> None:
    """The loop's news: step ``trained`` has finished, step ``saved`` is in a checkpoint
    (a safe point too: the watcher waits afresh)."""
    if trained is not None:
      self.trained = trained
    if saved is not None:
      self.saved = self.trained = saved
      self._beat = time.monotonic()

  def unsaved(self) -> int:
    """How many steps trained since the newest checkpoint (0: nothing a stop would lose)."""
    return 0 if self.trained is None else max(self.trained - self.saved, 0)

  def _since_saved(self) -> str:
    return f"the checkpoint of step {self.saved}" if self.saved else "the start"

  def acknowledge(self) -> None:
    """The run is stopping (saving what it has): the watcher gives it ``SAVE_GRACE_S``."""
    self.acknowledged = True
    self._beat = time.monotonic()

  def _watch(self) -> None:
    count, since, waiting = 0, None, False
    while True:
      self._r.settimeout(None if since is None else 0.1)
      try:
        data = self._r.recv(64)
      except socket.timeout:
        data = None
      except OSError:
        return
      if data is not None:
        if not data or 0 in data:
          return
        new = sum(b in STOP_SIGNALS for b in data)
        count += new
        if new and since is None:
          since = time.monotonic()
          _say(f"{signal.Signals(data[0]).name if data[0] in STOP_SIGNALS else 'signal'} "
               f"received while {self.phase}: " + (
                   "stopping after a save (again to stop at once, without saving)"
                   if self.unsaved() else "stopping (again to stop at once)"))
        if count >= 2:
          self._exit_now("a second signal")
      if since is not None:
        grace = SAVE_GRACE_S if self.acknowledged else GRACE_S
        if time.monotonic() - max(since, self._beat) > grace:
          if not self.unsaved():
            self._exit_now(f"{self.phase} could not be interrupted within {grace:g} s")
          elif not waiting:  # trained work is never thrown away by one signal
            waiting = True
            n = self.unsaved()
            _say(f"waiting for {self.phase} to end, then saving: {n} step{'s' * (n > 1)} "
                 f"trained since {self._since_saved()} (again to stop at once without "
                 f"{'them' if n > 1 else 'it'})")

  def _exit_now(self, why: str) -> None:
    n = self.unsaved()
    if n:
      kept = (f"the {n} step{'s' * (n > 1)} trained since {self._since_saved()} "
              f"{'were' if n > 1 else 'was'} not saved")
    elif self.trained is None:  # before a run's plan, or data preparation alone
      kept = "nothing was trained in this start; checkpoints and token shards written are whole"
    elif self.saved:
      kept = f"nothing was trained since the checkpoint of step {self.saved}, so nothing is lost"
    else:
      kept = "nothing was trained yet, so nothing to save"
    _say(f"interrupted: {why}; stopped at once: {kept}")
    _say(f"to resume, run: {self.resume}" if self.resume else
         "to resume, run the same command again")
    os._exit(errors.EXIT_INTERRUPTED)  # pylint: disable=protected-access


def _say(message: str) -> None:
  try:
    sys.stdout.flush()
  except (OSError, ValueError, RuntimeError):
    pass
  os.write(2, (message + "\n").encode())


def active() -> StopSignals | None:
  return _active


def set_phase(phase: str) -> None:
  """What the run does now (``preparing data``, ``compiling``, ``evaluating``, ...)."""
  if _active is not None:
    _active.phase = phase


def set_resume(command: str) -> None:
  if _active is not None:
    _active.resume = command


def check() -> None:
  """At a safe point outside a training step: raise ``Interrupted`` if a stop was requested.

  With several processes it does nothing: one process must not leave a collective (an
  evaluation batch) that the others are in; they agree on a stop in the training loop
  (``stop_requested``), and the watcher ends a blocked phase.
  """
  jax = sys.modules.get("jax")  # not imported (data preparation alone): one process
  if jax is not None and jax.process_count() > 1:
    return
  if _active is not None and _active.received is not None:
    _active.acknowledge()
    raise Interrupted(_active.received, _active.phase)


def stop_requested(signals: StopSignals, step: int, every: int) -> bool:
  """Whether to save and stop after this step because of SIGTERM/SIGINT.

  Asked at the end of a step (after its rows and evaluation): a signal that came during
  any of them stops at this step. Processes must agree, or one would enter the
  (collective) save while the others train on: with several, they compare their flags at
  log steps, where the loop syncs anyway.
  """
  import jax  # pylint: disable=import-outside-toplevel
  from andrea_jax import sharding  # pylint: disable=import-outside-toplevel
  signals.beat()
  if jax.process_count() == 1:
    stop = bool(signals.received)
  else:
    stop = step % every == 0 and sharding.any_process(bool(signals.received))
  if stop:
    signals.acknowledge()
  return stop
