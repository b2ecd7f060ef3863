"""The norm-menu table (experiments/readings/norms.py): each figure per arm and depth against
one computed here from the cells, and the report opening with it."""

import math

import numpy as np
import pytest

from experiments.readings.norms import MenuTable
from research import cells as cells_lib
from research import kinds
from research import stats

UNIGRAM, INIT = 5.27, 6.3
RATES = (1e-3, 3e-3, 1e-2)


def record(arm, depth, lr, seed, final, growth_init, growth_end):
  return {"name": f"{arm}-L{depth}-lr{lr:g}-s{seed}", "arms": [arm], "seed": seed, "round": 0, "group": arm,
          "learning_rate": lr, "status": "completed", "final_val_loss": final, "initial_val_loss": INIT,
          "unigram_val_loss": UNIGRAM, "overrides": {"train.learning_rate": lr, "model.n_layer": depth},
          "init": {"residual_norm": [0.3, 1.0, growth_init]}, "end": {"residual_norm": [0.3, 2.0, 2.0 * growth_end]},
          "steps": 10, "n_params": 1, "wall_time_s": 1.0, "train_curve": [], "val_curve": [], "group_size": 1}


def cells():
  out = []
  for seed, noise in enumerate((-0.01, 0.0, 0.02)):
    # "good" learns everywhere, best at 3e-3; "flat" learns only at 1e-3 (5.27 elsewhere).
    for lr, loss in zip(RATES, (4.3, 4.0, 4.4)):
      out.append(record("good", 4, lr, seed, loss + noise, 1.2, 1.2 * math.exp(0.1 + noise)))
    for lr, loss in zip(RATES, (4.9, 5.27, 5.27)):
      out.append(record("flat", 4, lr, seed, loss + noise / 10, 1.0, 1.0))
  return out


def test_each_figure_is_the_cells_own():
  data = kinds.Data.of(cells(), ("model.n_layer",), cells_lib.to_run)
  table = MenuTable(papers={"good": "3.34 against 3.43 (400M)"})
  rows = {r["arm"]: r for r in table.rows(data)}
  assert rows["good"]["learns_at"] == list(RATES) and rows["flat"]["learns_at"] == [1e-3]
  # Growth: log(end ratio / init ratio) at each seed's best rate (3e-3), mean over seeds with its t interval.
  want = stats.one_sample([0.1 - 0.01, 0.1, 0.1 + 0.02])
  assert rows["good"]["growth"] == pytest.approx(want.diff)
  assert rows["good"]["growth_interval"] == pytest.approx([want.lo, want.hi])
  assert rows["flat"]["growth"] == pytest.approx(0.0, abs=1e-12)
  # The best loss is the fitted optimum's (at or below the best grid point's mean, above 3.9).
  assert 3.9 < rows["good"]["best_loss"] <= np.mean([4.0 - 0.01, 4.0, 4.0 + 0.02]) + 1e-9
  lines = table.lines(table.rows(data), UNIGRAM)
  good = next(l for l in lines if l.startswith("| good |"))
  assert "0.001, 0.003, 0.01 (3 of 3)" in good and "3.34 against 3.43 (400M)" in good
  assert "| flat | 4 |" in "\n".join(lines) and "0.001 (1 of 3)" in "\n".join(lines)
  assert "log ratio" in lines[0] and "nats" not in lines[0].split("growth")[1]


def test_dyts_saturation_is_read_at_each_seeds_best_rate_and_each_point_is_its_own_row():
  out = []
  for seed in range(3):
    for lr, loss in zip(RATES, (4.6, 4.5, 5.27)):
      for width, share in ((64, 0.9), (128, 0.5)):
        r = record("dyt", 8, lr, seed, loss + 0.01 * seed, 1.0, 1.0)
        r["overrides"]["model.d_model"] = width
        # blocks [a, b] then the final norm; at the best rate (3e-3) the end reads share, elsewhere 1.
        end = share if lr == 3e-3 else 1.0
        r["init"]["dyt_saturation"], r["end"]["dyt_saturation"] = [0.0, 0.2, 0.1], [end, end, end / 2]
        out.append(r)
  data = kinds.Data.of(out, ("model.n_layer", "model.d_model"), cells_lib.to_run)
  table = MenuTable(labels={"dyt": "DyT"})
  rows = table.rows(data)
  assert [r["point"] for r in rows] == [{"model.d_model": 64}, {"model.d_model": 128}]
  assert rows[0]["saturation"] == pytest.approx({"init": 0.1, "end": 0.9, "init_final": 0.1, "end_final": 0.45})
  assert rows[1]["saturation"]["end"] == pytest.approx(0.5)
  text = "\n".join(table.lines(rows, UNIGRAM))
  assert "| DyT, d_model 128 | 8 |" in text and "10 % / 90 % | 10 % / 45 % |" in text
