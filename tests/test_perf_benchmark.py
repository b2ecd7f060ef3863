"""The CPU-runnable logic of benchmarks/train_step.py: the load guard and the result writers.

No real benchmark runs here: the timed functions are replaced by fakes.
"""

import json

import pytest

from benchmarks import train_step as bench

BUSY, IDLE = (lambda: (3.7, 3.0, 2.5)), (lambda: (0.12, 0.3, 0.4))


def fake_row(name, batch, seq, reps, warmup, accelerator, settings="", loadavg=None):
  return {"shape": name, "batch": batch, "seq": seq, "params": 1234, "load_before": 0.1,
          "load_after": 1.9, "cpu_per_wall": 1.8, "andrea_jax_tokens_per_s": 900.0,
          "model_only_tokens_per_s": 950.0, "step_overhead": 950 / 900 - 1,
          "peer_tokens_per_s": 600.0, "ratio": 1.5}


@pytest.fixture
def docs(tmp_path, monkeypatch):
  monkeypatch.setattr(bench, "DOCS_DIR", str(tmp_path / "docs"))
  monkeypatch.setattr(bench, "bench_shape", fake_row)
  (tmp_path / "docs").mkdir()
  return tmp_path / "docs"


def test_refuses_to_write_docs_when_the_machine_was_busy(docs, capsys):
  out = docs / "performance.json"
  assert bench.main(["--shapes=tiny", f"--out={out}"], loadavg=BUSY) == 2
  assert not out.exists()
  err = capsys.readouterr().err
  assert "busy" in err and "3.70" in err and "--force" in err


def test_force_measures_on_a_busy_machine_but_never_writes_docs(docs, tmp_path, capsys):
  out = docs / "performance.json"
  assert bench.main(["--shapes=tiny", f"--out={out}", "--force"], loadavg=IDLE) == 0
  assert not out.exists()
  assert "never writes into docs/" in capsys.readouterr().err
  elsewhere = tmp_path / "bench.json"
  assert bench.main(["--shapes=tiny", f"--out={elsewhere}", "--force"], loadavg=BUSY) == 0
  assert json.loads(elsewhere.read_text())["load_at_start"] == pytest.approx(3.7)


def test_an_idle_machine_writes_json_and_tables_with_the_load(docs, capsys):
  out = docs / "performance.json"
  assert bench.main(["--shapes=tiny,andrea12m", f"--out={out}"], loadavg=IDLE) == 0
  results = json.loads(out.read_text())
  assert [r["shape"] for r in results["train"]] == ["tiny", "andrea12m"]
  assert results["load_at_start"] == pytest.approx(0.12)
  tables = (docs / "performance_tables.md").read_text()
  assert "load average before starting: 0.12" in tables
  row = next(line for line in tables.splitlines() if line.startswith("| tiny"))
  assert "| 900 | 950 | +5.6% | 600 | 1.50x | 0.10 / 1.90 | 1.80 |" in row
  assert tables in capsys.readouterr().out


def test_refusal_only_guards_docs():
  assert bench.refusal("/tmp/x.json", 9.0, 0.5, False) is None
  assert bench.refusal("", 9.0, 0.5, False) is None
  assert bench.refusal(f"{bench.DOCS_DIR}/performance.json", 0.1, 0.5, False) is None
  assert "busy" in bench.refusal(f"{bench.DOCS_DIR}/performance.json", 0.6, 0.5, False)
  assert bench.refusal(f"{bench.DOCS_DIR}/../docs_other/x.json", 9.0, 0.5, False) is None


def test_load_between_reports_cpu_seconds_per_wall_second():
  before = {"load_1m": 0.2, "cpu_s": 10.0, "wall_s": 100.0}
  after = {"load_1m": 1.5, "cpu_s": 13.0, "wall_s": 102.0}
  assert bench.load_between(before, after) == {"load_before": 0.2, "load_after": 1.5,
                                               "cpu_per_wall": 1.5}


def test_markdown_says_n_a_for_a_missing_peer():
  row = {k: v for k, v in fake_row("tiny", 1, 8, 1, 1, False).items()
         if not k.startswith("peer") and k != "ratio"}
  text = bench.markdown({"machine": "m", "command": "c", "train": [row]})
  assert "| n/a | n/a |" in text


def test_interleave_puts_every_side_after_every_other_equally_often():
  calls = []
  fns = {name: (lambda name=name: calls.append(name)) for name in "abc"}
  times = bench.interleave(fns, reps=6, warmup=1, settle_s=0.0)
  assert calls[:3] == ["a", "b", "c"]  # the warm-up calls
  assert {k: len(v) for k, v in times.items()} == {"a": 6, "b": 6, "c": 6}
  timed = calls[3:]
  follows = {}
  for rep in range(6):
    order = timed[3 * rep:3 * rep + 3]
    assert sorted(order) == ["a", "b", "c"]
    for before, after in zip(order, order[1:]):
      follows[(before, after)] = follows.get((before, after), 0) + 1
  # Every ordered pair is adjacent equally often: no side always runs right after another.
  assert len(follows) == 6 and set(follows.values()) == {2}


def test_two_sides_alternate_their_order():
  calls = []
  fns = {name: (lambda name=name: calls.append(name)) for name in ("ours", "peer")}
  bench.interleave(fns, reps=4, warmup=0, settle_s=0.0)
  assert calls == ["ours", "peer", "peer", "ours", "ours", "peer", "peer", "ours"]


def test_unit_axis_table_times_both_layouts():
  from benchmarks import components
  lines = components.unit_axis(batch=1, seq=8, d=16, reps=2)
  assert lines[0].startswith("| computation | on (1, T, D)") and len(lines) == 4
  for line in lines[2:]:
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert float(cells[1]) > 0 and float(cells[2]) > 0 and cells[3].endswith("x")


def test_step_parts_run_on_both_sides_and_keep_the_donated_state():
  from benchmarks import components
  config = bench.load_config("tiny", False)
  cfg = bench.model_config(config, 16)
  parts = components.step_parts(cfg, 2, 16, config.train)
  assert set(parts) == {"model forward + backward", "AdamW update of every parameter"}
  for fns in parts.values():
    assert set(fns) == {"ours", "peer"}
    for fn in fns.values():
      fn()
  # The update donates the parameters and optimizer state: calling it again only works if
  # it keeps the new ones (a stale, donated buffer raises).
  parts["AdamW update of every parameter"]["ours"]()
