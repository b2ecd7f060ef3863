"""benchmarks/parts.py: where a training step's time goes, row by row, each side's rows in
its own process (issue 31); the rows themselves, the unit-axis table and XLA's op names.
The real separate-process run is tests/test_perf_step.py's."""

import pytest

from benchmarks import parts
from benchmarks import results
from benchmarks import rounds as rounds_lib
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
  got = rounds_lib.process_rounds(parts.SIDES, run, 3, 0.0, sleep=lambda s: None)
  assert calls == ["ours", "peer", "peer", "ours", "ours", "peer"]
  rows = {r["row"]: r for r in parts.summary(got, cfg)}
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
  (row,) = parts.summary(rounds, cfg)
  assert row["peer_ms"] == pytest.approx(1.05) and row["ratio_range"] == pytest.approx((0.5, 0.5))
  text = results.parts_markdown({
      "cpu": "Some CPU", "cores": 2, "versions": "jax x", "command": "c", "date": "d",
      "load_at_start": 0.1, "shapes": [{"shape": "tiny", "batch": 2, "seq": 16, "reps": 1,
                                        "rounds": 3, "good_rounds": 2, "per_round": rounds,
                                        "rows": [row]}]})
  assert "| mlp | 2.1 | 1.1 | 0.50 [0.50, 0.50] |" in text and "out of memory" in text
  assert "3 rounds (2 with both sides)" in text


def test_unit_axis_table_times_both_layouts():
  lines = parts.unit_axis(batch=1, seq=8, d=16, reps=2)
  assert lines[0].startswith("| computation | on (1, T, D)") and len(lines) == 4
  for line in lines[2:]:
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert float(cells[1]) > 0 and float(cells[2]) > 0 and cells[3].endswith("x")


def test_the_step_parts_run_on_both_sides_and_keep_the_donated_state():
  config = shapes.load_config("tiny", "model.n_layer=1")
  cfg = shapes.model_config(config, 16)
  ours, peer = (f(cfg, 2, 16, config.train) for f in (parts.ours_parts, parts.peer_parts))
  assert set(ours) == set(peer) == set(parts.PARTS)
  for fn in (*ours.values(), *peer.values()):
    fn()
  # The update donates the parameters and optimizer state: calling it again only works if
  # it keeps the new ones (a stale, donated buffer raises).
  ours["AdamW update of every parameter"]()


def test_in_process_rows_pair_the_sides(monkeypatch):
  for name in ("ours", "peer", "ours_parts", "peer_parts"):  # rows that are never run
    rows = parts.PARTS if name.endswith("_parts") else parts.ROWS
    monkeypatch.setattr(parts, name, lambda *a, name=name, rows=rows: {row: name for row in rows})
  seen = []

  def interleave(fns, reps, warmup, settle_s):
    seen.append((fns, reps, settle_s))
    return {"ours": [0.001, 0.003], "peer": [0.004, 0.004]}  # medians: 2 ms and 4 ms
  monkeypatch.setattr(parts.timing, "interleave", interleave)
  rows = parts.in_process(None, 1, 8, None, reps=2, settle_s=0.0)
  assert [r["row"] for r in rows] == list(parts.ROWS + parts.PARTS)
  assert seen[0] == ({"ours": "ours", "peer": "peer"}, 2, 0.0)
  assert seen[-1] == ({"ours": "ours_parts", "peer": "peer_parts"}, 2, 0.0)
  assert all(r["ours_ms"] == pytest.approx(2.0) and r["ratio"] == pytest.approx(2.0) for r in rows)
  shape = {"shape": "tiny", "batch": 1, "seq": 8, "reps": 2, "rows": rows}
  text = results.parts_in_process_markdown({"cpu": "c", "cores": 2, "versions": "v", "command": "x",
                                            "date": "d", "load_at_start": 0.1, "shapes": [shape]})
  assert "| mlp | 2.0 | 4.0 | 2.00 |" in text and "medians of 2 reps" in text


def test_hlo_sources_reads_shape_and_op_name():
  text = ('  %dot.25 = f32[768,3072]{1,0} dot(%a, %b), lhs_contracting_dims={0}, '
          'metadata={op_name="jit(loss_fn)/transpose(jvp())/dot_general" stack_frame_id=1}\n'
          '  ROOT %tuple.1 = (f32[2]{0}) tuple(%x)\n')
  sources = parts.hlo_sources(text)
  assert sources["dot.25"] == "f32[768,3072]{1,0}  jit(loss_fn)/transpose(jvp())/dot_general"
  assert sources["tuple.1"] == "(f32[2]{0})"
