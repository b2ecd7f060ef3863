"""benchmarks/components.py --separate: each side's rows in its own process, alternating,
and the profile of where a training step's time goes (issue 31)."""

import json
import subprocess
import sys

import pytest

from benchmarks import components
from benchmarks import shapes


def side(ms):
  return {"ms": dict(ms), "peak_rss_mb": 100.0, "cpu": "c"}


def test_the_sides_alternate_and_each_row_is_paired_by_round():
  cfg = shapes.model_config(shapes.load_config("tiny"), 16)
  calls, slow = [], iter([1.0, 1.0, 2.0, 2.0, 1.0, 1.0])  # round 2: the machine, both sides slow

  def run(who):
    calls.append(who)
    k = next(slow)
    return side({"layer_norm": k * (1.0 if who == "ours" else 1.5),
                 "model forward + backward": k * (10.0 if who == "ours" else 8.0)})
  printed = []
  rounds = components.separate_rounds("tiny", 2, 16, 3, 1, run=run, sleep=lambda s: None,
                                      progress=lambda *a, **k: printed.append(a[0]))
  assert calls == ["ours", "peer", "peer", "ours", "ours", "peer"] and len(printed) == 3
  rows = {r["row"]: r for r in components.separate_summary(rounds, cfg)}
  ln, fb = rows["layer_norm"], rows["model forward + backward"]
  # The slow round moves both sides' times but not the paired ratio.
  assert ln["ratio"] == pytest.approx(1.5) and ln["ratio_range"] == pytest.approx((1.5, 1.5))
  assert fb["ratio"] == pytest.approx(0.8) and fb["ratio_mean"] == pytest.approx(0.8)
  # LayerNorm runs twice a block; the step's parts once a step.
  assert ln["per_step"] == 2 * cfg.n_layer and fb["per_step"] == 1
  assert ln["gap_ms_per_step"] == pytest.approx(2 * cfg.n_layer * (1.0 - 1.5))
  assert fb["gap_ms_per_step"] == pytest.approx(10.0 - 8.0)


def test_a_round_without_a_side_is_left_out_and_named():
  cfg = shapes.model_config(shapes.load_config("tiny"), 16)
  rounds = [{"ours": side({"mlp": 2.0}), "peer": side({"mlp": 1.0})},
            {"ours": {"error": "exit 1: out of memory"}, "peer": side({"mlp": 5.0})},
            {"ours": side({"mlp": 2.2}), "peer": side({"mlp": 1.1})}]
  (row,) = components.separate_summary(rounds, cfg)
  assert row["peer_ms"] == pytest.approx(1.05) and row["ratio_range"] == pytest.approx((0.5, 0.5))
  text = components.separate_markdown({
      "cpu": "Some CPU", "cores": 2, "versions": "jax x", "command": "c", "date": "d",
      "load_at_start": 0.1, "shapes": [{"shape": "tiny", "batch": 2, "seq": 16, "reps": 1,
                                        "rounds": 3, "good_rounds": 2, "per_round": rounds,
                                        "rows": [row]}]})
  assert "| mlp | 2.1 | 1.1 | 0.50 [0.50, 0.50] |" in text and "out of memory" in text
  assert "3 rounds (2 with both sides)" in text


def test_a_real_separate_run_times_every_row_in_two_processes(tmp_path):
  """One round at a toy length, each side a real process: every component and both step
  parts are timed on both sides, and our process never loaded PyTorch."""
  out = tmp_path / "components.json"
  got = subprocess.run([sys.executable, "-m", "benchmarks.components", "--separate", "--shape=tiny",
                        "--batch=1", "--seq=16", "--rounds=1", "--reps=1", f"--out={out}"],
                       capture_output=True, text=True, timeout=600, check=True).stdout
  results = json.loads(out.read_text())
  (s,) = results["shapes"]
  assert s["good_rounds"] == 1, s["per_round"]
  names = [r["row"] for r in s["rows"]]
  assert names == list(components.ROWS + components.PARTS)
  assert all(r["ours_ms"] > 0 and r["peer_ms"] > 0 for r in s["rows"])
  assert s["per_round"][0]["ours"]["torch_loaded"] is False
  assert s["per_round"][0]["peer"]["torch_loaded"] is True
  assert "| model forward + backward |" in got and (tmp_path / "components_tables.md").exists()


def test_ctrl_c_stops_a_separate_run_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
  def interrupted(*args, **kwargs):
    raise KeyboardInterrupt
  monkeypatch.setattr(components, "separate_rounds", interrupted)
  out = tmp_path / "c.json"
  try:
    code = components.main(["--separate", "--shape=tiny", "--rounds=2", f"--out={out}"])
  except KeyboardInterrupt:
    pytest.fail("Ctrl-C escaped main as a traceback")
  assert code == 130
  assert "interrupted: nothing written" in capsys.readouterr().err and not out.exists()


def test_a_bad_shape_or_round_count_is_refused_before_any_round(capsys):
  assert components.main(["--separate", "--shape=tiny,no_such_shape", "--rounds=1"]) == 2
  got = capsys.readouterr()
  assert "no_such_shape" in got.err and "names are" in got.err and "round" not in got.out
  with pytest.raises(SystemExit):
    components.main(["--separate", "--shape=tiny", "--rounds=0"])
  assert "--rounds=0: expected at least 1" in capsys.readouterr().err
