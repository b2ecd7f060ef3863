"""The learning rate: one typed plan, built once, shared by the optimizer and the logs.

``Shape`` is the schedule's plan at a peak of 1, read from the ``train`` group (a
``step.TrainConfig`` or a saved ``train`` dict of ``config.json`` / ``config_history.json``):
its steps, warmup and floor. ``learning_rate``
turns a run's segments (``workdir.schedule_segments``: ``[(start_step, Shape), ...]``) and
its peak into the one ``optax.Schedule`` the optimizer steps with and the metrics rows
report (``lr``).

The warmup is linear from above zero: update ``k`` (0, 1, ...) uses
``peak * (k + 1) / (warmup_steps + 1)``, as nanoGPT does, so the first update already moves
the parameters and update ``warmup_steps`` is the first at the peak (optax's linear warmup
from ``peak / (warmup + 1)`` is exactly this line). Then a cosine from the peak to ``peak * min_lr_ratio`` at ``steps``.

Resuming never changes the schedule of the steps already planned: each later segment keeps
its predecessor's rates up to its start (or up to the end of the warmup, when it starts
inside it), then decays by a cosine from the value there to its own floor at its own
``steps``. So a run continued to more steps extends its decay without a jump at the seam.
A changed peak scales the whole shape from the seam on.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax.numpy as jnp
import optax


@dataclasses.dataclass(frozen=True)
class Shape:
  """The plan of one segment's learning rate at a peak of 1 (the module docstring)."""
  steps: int
  warmup_steps: int
  min_lr_ratio: float

  # The ``train`` fields a Shape reads (the peak ``learning_rate`` only scales it).
  FIELDS = ("steps", "warmup_steps", "min_lr_ratio")

  @classmethod
  def of(cls, train) -> Shape:
    """The shape of a ``step.TrainConfig`` or of a saved ``train`` dict (a record written
    before a field existed ran with its default, as ``workdir.ADDED_FIELDS`` says)."""
    get = train.get if isinstance(train, dict) else lambda k, d: getattr(train, k, d)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    return cls(**{k: get(k, defaults[k]) for k in cls.FIELDS})


def learning_rate(peak: float, segments: Sequence[tuple[int, Shape]]) -> optax.Schedule:
  """The rate of update ``count`` of a run whose plan is ``segments`` at peak ``peak``.

  ``segments``: ``[(start_step, Shape), ...]``, the first starting at 0 (one segment: a run
  that was never resumed with other settings).
  """
  shapes = [s for _, s in segments]
  if len(set(shapes)) == 1:  # optax's own schedule
    s = shapes[0]
    return optax.warmup_cosine_decay_schedule(
        init_value=peak / (s.warmup_steps + 1), peak_value=peak, warmup_steps=s.warmup_steps,
        decay_steps=s.steps, end_value=peak * s.min_lr_ratio)
  first = shapes[0]
  unit = _continue(_warmup(first.warmup_steps), first.warmup_steps, 1.0, first)
  for (start, new), old in zip(segments[1:], shapes):
    if new != old:
      at = max(int(start), new.warmup_steps)
      unit = _continue(unit, at, float(unit(at)), new)
  return lambda count: peak * unit(count)


def for_config(t) -> optax.Schedule:
  """The schedule of a ``step.TrainConfig`` alone (a run never resumed with other settings)."""
  return learning_rate(t.learning_rate, [(0, t.shape)])


def _warmup(warmup_steps: int) -> optax.Schedule:
  return optax.linear_schedule(1.0 / (warmup_steps + 1), 1.0, warmup_steps)


def _continue(before: optax.Schedule, at: int, value: float, s: Shape) -> optax.Schedule:
  """``before`` up to update ``at``, then a cosine from ``value`` to ``s``'s floor at its steps."""
  end, steps = s.min_lr_ratio, max(s.steps, at + 1)

  def schedule(count):
    done = jnp.clip((count - at) / (steps - at), 0.0, 1.0)
    after = end + (value - end) * 0.5 * (1.0 + jnp.cos(jnp.pi * done))
    return jnp.where(count < at, before(count), after)

  return schedule
