"""The learning rate: one typed plan, built once, shared by the optimizer and the logs.

``Shape`` is the schedule's plan at a peak of 1, read from the ``train`` group (a
``step.TrainConfig`` or a saved ``train`` dict of ``config.json`` / ``config_history.json``):
its kind (``cosine`` or ``wsd``), steps, warmup, floor, and WSD's decay. ``learning_rate``
turns a run's segments (``resume.schedule_segments``: ``[(start_step, Shape), ...]``) and
its peak into the one ``optax.Schedule`` the optimizer steps with and the metrics rows
report (``lr``).

The warmup is linear from above zero: update ``k`` (0, 1, ...) uses
``peak * (k + 1) / (warmup_steps + 1)``, as nanoGPT does, so the first update already moves
the parameters and update ``warmup_steps`` is the first at the peak (optax's linear warmup
from ``peak / (warmup + 1)`` is exactly this line). Then:

* ``cosine``: a cosine from the peak to ``peak * min_lr_ratio`` at ``steps``;
* ``wsd`` (warmup-stable-decay; Hägele et al. 2024, "Scaling Laws and Compute-Optimal
  Training Beyond Fixed Training Durations", Sec. 3): the peak until the last
  ``round(decay_fraction * steps)`` updates, then a decay to ``peak * min_lr_ratio`` at
  ``steps`` whose shape is ``decay_shape``: ``linear``, ``cosine`` or ``1-sqrt``
  (``1 - sqrt(progress)``, the paper's best cooldown).

Both reach the floor at update ``steps``, one past the last (updates count 0..steps-1, as
optax's ``warmup_cosine_decay_schedule`` reaches ``end_value`` at ``decay_steps``): the
last update runs one decay step above it (docs/training.md says so, with the figures).

Resuming never changes the schedule of the steps already planned: each later segment keeps
its predecessor's rates up to its start (or up to the end of the warmup, when it starts
inside it), then goes on from the value there by its own plan: a cosine segment decays by
a cosine to its floor at its ``steps``; a WSD segment holds the value until its decay
starts (at once, if that is past), then decays by its shape to its floor at its ``steps``.
So a run continued to more steps extends its decay without a jump at the seam, and a
cooldown (``cooldown.branch_cooldown``) is a WSD segment whose decay starts at its branch
step. A changed peak scales the whole shape from the seam on.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax.numpy as jnp
import optax

from andrea_jax import errors

SCHEDULES = ("cosine", "wsd")
# The decay of a WSD schedule: the fraction of the way from the peak to the floor still
# left at ``progress`` p in [0, 1] of the decay (Hägele et al. 2024, Sec. 3 and Fig. 3).
DECAYS: dict[str, Callable[[Any], Any]] = {
    "linear": lambda p: 1.0 - p,
    "cosine": lambda p: 0.5 * (1.0 + jnp.cos(jnp.pi * p)),
    "1-sqrt": lambda p: 1.0 - jnp.sqrt(p),
}


@dataclasses.dataclass(frozen=True)
class Shape:
  """The plan of one segment's learning rate at a peak of 1 (the module docstring); its
  fields are the ``train`` group's of the same names (``step.TrainConfig``: their defaults
  and docs)."""
  steps: int
  warmup_steps: int
  min_lr_ratio: float
  schedule: str
  decay_shape: str
  decay_fraction: float

  # The ``train`` fields a Shape reads (the peak ``learning_rate`` only scales it).
  FIELDS = ("steps", "warmup_steps", "min_lr_ratio", "schedule", "decay_shape", "decay_fraction")

  def __post_init__(self):
    if self.schedule not in SCHEDULES:
      raise errors.ConfigError(f"train.schedule={self.schedule!r}: expected one of {SCHEDULES}")
    if self.decay_shape not in DECAYS:
      raise errors.ConfigError(f"train.decay_shape={self.decay_shape!r}: expected one of "
                               f"{tuple(DECAYS)}")
    if not 0 <= self.decay_fraction <= 1:
      raise errors.ConfigError(f"train.decay_fraction={self.decay_fraction!r}: expected a "
                               f"fraction of train.steps in [0, 1] (0: no decay; Hägele et "
                               f"al. 2024 find 0.2 enough)")
    if self.schedule == "wsd" and self.decay_start < self.warmup_steps:
      raise errors.ConfigError(
          f"train.decay_fraction={self.decay_fraction!r} starts the decay at update "
          f"{self.decay_start}, inside the warmup (train.warmup_steps={self.warmup_steps}): "
          f"lower train.decay_fraction or train.warmup_steps")

  @classmethod
  def of(cls, train) -> Shape:
    """The shape of a ``step.TrainConfig`` or of a whole ``train`` dict (a saved one completed
    by ``run_record.with_added_fields``)."""
    get = train.__getitem__ if isinstance(train, dict) else lambda k: getattr(train, k)
    return cls(**{k: get(k) for k in cls.FIELDS})

  @property
  def decay_steps(self) -> int:
    """The updates of a WSD schedule's decay."""
    return round(self.decay_fraction * self.steps)

  @property
  def decay_start(self) -> int:
    """The first update of a WSD schedule's decay (``steps``: none)."""
    return self.steps - self.decay_steps


def describe(s: Shape, peak: float) -> str:
  """The schedule in a phrase, for the run's first lines."""
  warmup = f"{s.warmup_steps} warmup steps, then " if s.warmup_steps else ""
  floor = f"{peak * s.min_lr_ratio:g} ({s.min_lr_ratio:g} of the peak)"
  if s.schedule == "cosine":
    return f"{warmup}a cosine from the peak {peak:g} to {floor} over {s.steps} steps"
  if s.decay_start >= s.steps:
    return f"wsd: {warmup}the peak {peak:g} to step {s.steps}, no decay"
  return (f"wsd: {warmup}the peak {peak:g} to step {s.decay_start}, then a {s.decay_shape} "
          f"decay to {floor} over the last {s.steps - s.decay_start} of {s.steps} steps")


def learning_rate(peak: float, segments: Sequence[tuple[int, Shape]]) -> optax.Schedule:
  """The rate of update ``count`` of a run whose plan is ``segments`` at peak ``peak``.

  ``segments``: ``[(start_step, Shape), ...]``, the first starting at 0 (one segment: a run
  that was never resumed with other settings). Segments whose rates a later one's own plan
  repeats are dropped first (``_planned``): a cooldown of a WSD run's stable phase is then the
  one program of the shorter WSD run, bit for bit.
  """
  segments = _planned(segments)
  shapes = [s for _, s in segments]
  if len(set(shapes)) == 1 and shapes[0].schedule == "cosine":  # optax's own schedule
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


def _planned(segments: Sequence[tuple[int, Shape]]) -> list[tuple[int, Shape]]:
  """``segments`` without those a later segment's own plan repeats: WSD followed at ``start``
  by WSD with the same warmup, where neither has begun its decay by ``start``, holds the same
  rates (the warmup, then the peak) up to ``start`` as the later plan alone does, so the later
  one replaces it from step 0. Same rates either way; one segment is one compiled graph."""
  out = [tuple(segments[0])]
  for start, new in segments[1:]:
    (_, old) = out[-1]
    if (old.schedule == new.schedule == "wsd" and old.warmup_steps == new.warmup_steps
        and start <= min(old.decay_start, new.decay_start)):
      out[-1] = (0, new)
    else:
      out.append((start, new))
  return out


def for_config(t) -> optax.Schedule:
  """The schedule of a ``step.TrainConfig`` alone (a run never resumed with other settings)."""
  return learning_rate(t.learning_rate, [(0, t.shape)])


def _warmup(warmup_steps: int) -> optax.Schedule:
  return optax.linear_schedule(1.0 / (warmup_steps + 1), 1.0, warmup_steps)


def _continue(before: optax.Schedule, at: int, value: float, s: Shape) -> optax.Schedule:
  """``before`` up to update ``at``, then from ``value`` on by ``s``'s plan (the module
  docstring): its decay starts at ``at`` (cosine) or at ``max(at, s.decay_start)`` (WSD)."""
  start, curve = (at, "cosine") if s.schedule == "cosine" else (max(at, s.decay_start),
                                                                 s.decay_shape)
  end, steps = s.min_lr_ratio, max(s.steps, start + 1)

  def schedule(count):
    done = jnp.clip((count - start) / (steps - start), 0.0, 1.0)
    after = end + (value - end) * DECAYS[curve](done)
    # The hold is ``value`` itself: a stable phase is the peak, whatever the decay's formula.
    return jnp.where(count < at, before(count), jnp.where(count < start, value, after))

  return schedule
