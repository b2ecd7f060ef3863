"""The training loop's ``jax.profiler`` trace of a range of updates
(``train.profile_steps``): ``Profiler``, in the layout TensorBoard's profile plugin reads.
"""

from __future__ import annotations

import glob
import os

import jax
from tqdm.auto import tqdm

from andrea_jax import sharding


class Profiler:
  """A ``jax.profiler`` trace of updates ``first..last`` (``train.profile_steps``) in
  ``directory``, in the layout TensorBoard's profile plugin reads
  (``plugins/profile/<run>/<host>.xplane.pb``); one line says where and how to open it.

  The trace starts once the update before ``first`` has finished and stops once ``last``
  has (a resumed segment traces what is left of the range); leaving its ``with`` stops a
  trace still running (a stop, a divergence, an error).
  """

  def __init__(self, steps: tuple[int, int] | None, directory: str):
    self.steps, self.directory = steps, directory
    self.running, self.last, self.done = None, None, False  # the first and the last traced

  def before(self, step: int, state) -> None:
    if (self.steps and not self.done and not self.running
        and self.steps[0] <= step <= self.steps[1]):
      jax.block_until_ready(state)  # the updates before it are not in the trace
      jax.profiler.start_trace(self.directory)
      self.running = step

  def step(self, step: int, fn, *args):
    """``fn(*args)``, update ``step``. While tracing, inside a ``train`` step annotation
    (TensorBoard's step-time view reads them) that ends once the update's results are
    ready: around the asynchronous call alone it would time the dispatch, a few ms of a
    step that runs for far longer. Untraced updates are not waited for."""
    if not self.running:
      return fn(*args)
    with jax.profiler.StepTraceAnnotation("train", step_num=step):
      return jax.block_until_ready(fn(*args))

  def after(self, step: int, state) -> None:
    self.last = step
    if self.running and step == self.steps[1]:
      jax.block_until_ready(state)
      self.stop()

  def stop(self) -> None:
    jax.profiler.stop_trace()
    first, last, self.running, self.done = self.running, self.last, None, True
    runs = sorted(glob.glob(os.path.join(self.directory, "plugins", "profile", "*")),
                  key=os.path.getmtime)
    if sharding.is_lead():
      tqdm.write(f"profile of updates {first}-{last}: {runs[-1] if runs else self.directory}; open "
                 f"it with: tensorboard --logdir {self.directory} (pip install tensorboard "
                 f"tensorboard-plugin-profile), then the Profile tab")

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    if self.running:
      self.stop()
