"""What a run says it is in for: the durations it prints and the note for a GPU config on a CPU.

The estimate and the measured line are printed by every training run (tests/test_train.py
runs them); here the pieces whose text a reader acts on."""

import pytest

from andrea_jax import forecast


@pytest.mark.parametrize("seconds, text", [(4.2, "4.2 s"), (42, "42 s"), (720, "12 min"),
                                           (3.5 * 3600, "3.5 h"), (2.1 * 86400, "2.1 days")])
def test_a_duration_reads_in_the_unit_a_person_would_use(seconds, text):
  assert forecast.duration(seconds) == text


def test_a_gpu_config_on_a_cpu_gets_a_note_naming_the_cpu_config():
  note = forecast.gpu_config_note("andrea120m", "cpu")
  assert "andrea120m is sized for GPUs" in note and note.endswith("--config=tiny")
  assert forecast.gpu_config_note("andrea120m", "gpu") is None
  assert forecast.gpu_config_note("tiny", "cpu") is None


def test_the_measured_line_names_the_rate_and_the_time_left():
  line = forecast.measured(0.5, 2048.0, 120)
  assert line.startswith("measured: 0.5 s per step, 2,048 tokens/s; the remaining 120 steps")
  assert "take about 60 s" in line
