"""The learning-rate schedule (schedule.py): WSD's values at known steps, and the segments of
a resumed run or a cooldown."""

import dataclasses
import math
import pathlib

import jax
import jax.numpy as jnp
import pytest

from andrea_jax import schedule as schedule_lib

WSD = schedule_lib.Shape(steps=100, warmup_steps=10, min_lr_ratio=0.1, schedule="wsd",
                         decay_shape="1-sqrt", decay_fraction=0.2)
COSINE = dataclasses.replace(WSD, schedule="cosine")


def rates(shape, peak=1.0, segments=None):
  lr = schedule_lib.learning_rate(peak, segments or [(0, shape)])
  return lambda k: float(lr(k))


@pytest.mark.parametrize("decay_shape, at_90, at_95", [
    # Progress p of the decay (updates 80..100): floor + (1 - floor) x f(p), f(p) = 1 - p,
    # (1 + cos(pi p)) / 2, 1 - sqrt(p) (Hägele et al. 2024): p = 0.5 and 0.75, written out.
    ("linear", 0.1 + 0.9 * 0.5, 0.1 + 0.9 * 0.25),
    ("cosine", 0.1 + 0.9 * 0.5, 0.1 + 0.9 * (1 - math.sqrt(0.5)) / 2),
    ("1-sqrt", 0.1 + 0.9 * (1 - math.sqrt(0.5)), 0.1 + 0.9 * (1 - math.sqrt(0.75)))])
def test_wsd_warms_up_holds_the_peak_then_decays_by_its_shape_to_the_floor(decay_shape, at_90,
                                                                           at_95):
  lr = rates(schedule_lib.Shape(**{**WSD.__dict__, "decay_shape": decay_shape}), peak=2.0)
  for k in range(11):  # the warmup: peak x (k + 1) / (warmup + 1), the cosine schedule's
    assert lr(k) == pytest.approx(2.0 * (k + 1) / 11, rel=1e-6), k
  for k in (10, 11, 50, 79, 80):  # stable: the peak, to the first update of the decay
    assert lr(k) == pytest.approx(2.0, rel=1e-6), k
  assert lr(81) < 2.0
  assert lr(90) == pytest.approx(2.0 * at_90, rel=1e-5)
  assert lr(95) == pytest.approx(2.0 * at_95, rel=1e-5)
  assert lr(100) == pytest.approx(2.0 * 0.1, rel=1e-6)


def test_wsd_without_a_decay_holds_the_peak_to_the_end():
  lr = rates(schedule_lib.Shape(**{**WSD.__dict__, "decay_fraction": 0.0}))
  assert [lr(k) for k in (10, 99, 100)] == [1.0, 1.0, 1.0]


def test_a_cooldown_segment_from_the_stable_phase_is_the_shorter_wsd_run():
  # A 100-step WSD run branched at update 40 into a decay of 20 updates: the rates of a
  # WSD run planned for 60 steps whose decay is its last 20 (the cooldown's record).
  cooldown = schedule_lib.Shape(**{**WSD.__dict__, "steps": 60, "decay_fraction": 20 / 60})
  assert cooldown.decay_start == 40
  branched = rates(None, segments=[(0, WSD), (40, cooldown)])
  planned = rates(cooldown)
  for k in range(61):
    assert branched(k) == planned(k), k
  assert branched(39) == branched(40) == 1.0 and branched(60) == pytest.approx(0.1)
  # More than the same rates: the same program as the planned run (so the same bits, on any
  # backend), where a chain of segments would be another graph that XLA may round otherwise.
  program = lambda segments: jax.jit(schedule_lib.learning_rate(1.0, segments)).lower(
      jnp.int32(0)).as_text()
  assert program([(0, WSD), (40, cooldown)]) == program([(0, cooldown)])
  # Branched inside the run's decay (from update 80), the cooldown starts from the rate it had.
  late = schedule_lib.Shape(**{**WSD.__dict__, "steps": 95, "decay_fraction": 5 / 95})
  assert rates(None, segments=[(0, WSD), (90, late)])(90) == pytest.approx(rates(WSD)(90), rel=1e-6)
  assert rates(WSD)(90) < 0.9


def test_a_cooldown_segment_of_a_cosine_run_decays_from_the_rate_it_had():
  cosine = COSINE
  cooldown = schedule_lib.Shape(steps=70, warmup_steps=10, min_lr_ratio=0.1, schedule="wsd",
                                decay_shape="linear", decay_fraction=20 / 70)
  before, branched = rates(cosine), rates(None, segments=[(0, cosine), (50, cooldown)])
  for k in range(50):
    assert branched(k) == pytest.approx(before(k), rel=1e-6), k
  at = before(50)
  assert branched(50) == pytest.approx(at, rel=1e-6)  # no jump at the seam
  assert branched(60) == pytest.approx(0.1 + (at - 0.1) * 0.5, rel=1e-5)
  assert branched(70) == pytest.approx(0.1, rel=1e-6)


@pytest.mark.parametrize("field, value, match", [
    ("schedule", "step", r"^train\.schedule='step': expected one of \('cosine', 'wsd'\)"),
    ("decay_shape", "exp", r"^train\.decay_shape='exp': expected one of \('linear', 'cosine', '1-sqrt'\)"),
    ("decay_fraction", 1.5, r"^train\.decay_fraction=1\.5: expected a fraction"),
    ("decay_fraction", 0.95, r"^train\.decay_fraction=0\.95 starts the decay at update 5, inside the warmup")])
def test_a_bad_schedule_setting_is_one_line_naming_it(field, value, match):
  with pytest.raises(ValueError, match=match):
    schedule_lib.Shape(**{**WSD.__dict__, field: value})


def test_the_last_update_runs_one_decay_step_above_the_floor_as_the_docs_say():
  """docs/training.md: the floor is reached at update ``steps``, one past the last; the last
  update (printed as step ``steps``: ``Logger`` reads ``learning_rate(step - 1)``) runs at
  ``floor + (peak - floor) * f((D - 1) / D)``; its tiny-config figure is the one printed."""
  from experiments.configs import tiny  # pylint: disable=import-outside-toplevel
  t = tiny.get_config().train
  shape = schedule_lib.Shape(steps=t.steps, warmup_steps=t.warmup_steps,
                             min_lr_ratio=t.min_lr_ratio, schedule="wsd",
                             decay_shape=t.decay_shape, decay_fraction=t.decay_fraction)
  lr = rates(shape, peak=t.learning_rate)
  floor, d = t.learning_rate * t.min_lr_ratio, t.steps - shape.decay_start
  last = floor + (t.learning_rate - floor) * (1 - math.sqrt((d - 1) / d))
  assert lr(t.steps - 1) == pytest.approx(last, rel=1e-5) and lr(t.steps) == pytest.approx(floor)
  docs = (pathlib.Path(__file__).parent.parent / "docs" / "training.md").read_text(encoding="utf-8")
  assert "one past the last update" in docs
  assert (f"({t.steps} steps, peak {t.learning_rate:g}, floor {floor:g},\n  D = {d}) prints "
          f"`lr {lr(t.steps - 1):.3g}` at step {t.steps}") in docs


def test_the_schedule_in_a_phrase_names_its_kind_warmup_peak_and_floor():
  assert schedule_lib.describe(WSD, 0.002) == (
      "wsd: 10 warmup steps, then the peak 0.002 to step 80, then a 1-sqrt decay to 0.0002 "
      "(0.1 of the peak) over the last 20 of 100 steps")
  cosine = dataclasses.replace(COSINE, warmup_steps=0)
  assert schedule_lib.describe(cosine, 1.0) == (
      "a cosine from the peak 1 to 0.1 (0.1 of the peak) over 100 steps")
