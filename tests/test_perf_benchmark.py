"""The CPU-runnable logic of benchmarks/train_step.py and its parts: formulas, load guard, writers.

No real benchmark runs here: the timed steps and matmuls are fakes that take a set time on a
fake clock, so the real timing loop and the real formulas (ratio, overhead, the matmul
limit and each side's percentage of it) turn known seconds into the reported figures.
The one real run is ``components --ops`` at a toy shape, for its table's structure.
"""

import json

import jax
import numpy as np
import pytest

from andrea_jax import model
from benchmarks import matmul_limit as limit_lib
from benchmarks import ours
from benchmarks import peer
from benchmarks import results as results_lib
from benchmarks import shapes
from benchmarks import timing
from benchmarks import train_step as bench

BUSY, IDLE = (lambda: (3.7, 3.0, 2.5)), (lambda: (0.12, 0.3, 0.4))
STEP_S = {"andrea_jax": 2.0, "model_only": 1.9, "peer": 3.0}  # ours 1.5x the peer's speed
GFLOPS = {"xla": 100.0, "torch": 80.0}  # each side's matmul FLOP/s, in 1e9


class FakeClock:
  """Seconds that pass only when a fake runs (each takes a set time) or the loop sleeps."""

  def __init__(self):
    self.now = 0.0

  def __call__(self) -> float:
    return self.now

  def sleep(self, seconds: float) -> None:
    self.now += seconds

  def taking(self, seconds: float):
    return lambda: self.sleep(seconds)


@pytest.fixture
def clock(monkeypatch):
  """Every timed piece of ``bench_shape`` replaced by a fake on one fake clock."""
  c = FakeClock()
  monkeypatch.setattr(ours, "ours_step", lambda config, batch, seq, bare=False: (
      c.taking(STEP_S["model_only" if bare else "andrea_jax"]), shapes.model_config(config, seq)))
  monkeypatch.setattr(peer, "peer_step", lambda *args, **kwargs: c.taking(STEP_S["peer"]))
  monkeypatch.setattr(peer, "peer_available", lambda: None)
  # One product of a form takes its FLOPs over the side's FLOP/s.
  for side, name in (("xla", "xla_matmul"), ("torch", "torch_matmul")):
    monkeypatch.setattr(limit_lib, name, lambda form, side=side: c.taking(
        limit_lib.form_flops(form) / form[-1] / (GFLOPS[side] * 1e9)))
  return c


def shape_row(clock, shape="tiny", batch=2, seq=16):
  row = bench.bench_shape(shape, batch, seq, reps=3, warmup=1, accelerator=False, loadavg=IDLE,
                          clock=clock, sleep=clock.sleep)
  return row, shapes.model_config(shapes.load_config(shape), seq)


def test_ratio_and_overhead_follow_from_the_timed_seconds(clock):
  row, _ = shape_row(clock)
  tokens = 2 * 16
  assert row["andrea_jax_step_s"] == pytest.approx(STEP_S["andrea_jax"])
  assert row["andrea_jax_tokens_per_s"] == pytest.approx(tokens / 2.0)
  assert row["peer_tokens_per_s"] == pytest.approx(tokens / 3.0)
  assert row["ratio"] == pytest.approx(1.5)  # ours over the peer's tokens/s: faster is > 1
  assert row["step_overhead"] == pytest.approx(2.0 / 1.9 - 1)  # slower than model-only is > 0


@pytest.mark.parametrize("gflops", [{"xla": 100.0, "torch": 80.0}, {"xla": 60.0, "torch": 90.0}])
def test_each_side_is_a_percentage_of_the_faster_matmul_ceiling(clock, monkeypatch, gflops):
  monkeypatch.setattr(f"{__name__}.GFLOPS", gflops)
  row, cfg = shape_row(clock)
  assert row["xla_matmul_flops_per_s"] == pytest.approx(gflops["xla"] * 1e9)
  assert row["torch_matmul_flops_per_s"] == pytest.approx(gflops["torch"] * 1e9)
  limit = max(gflops.values()) * 1e9
  assert row["limit_flops_per_s"] == pytest.approx(limit)
  flops = model.flops_per_token(cfg, 16)  # PaLM's count, the whole T x T attention square
  assert row["flops_per_token"] == flops
  assert row["ours_pct_of_limit"] == pytest.approx(32 / 2.0 * flops / limit)
  assert row["peer_pct_of_limit"] == pytest.approx(32 / 3.0 * flops / limit)
  assert row["flops_per_token_causal"] < flops and "12 L H Q T" in row["pct_of_limit_counts"]


def test_without_the_peer_the_limit_is_xla_alone(clock, monkeypatch):
  monkeypatch.setattr(peer, "peer_available", lambda: "torch missing")
  row, _ = shape_row(clock)
  assert "ratio" not in row and "peer_pct_of_limit" not in row and "torch_matmul_flops_per_s" not in row
  assert row["peer_missing"] == "torch missing"
  assert row["limit_flops_per_s"] == pytest.approx(GFLOPS["xla"] * 1e9)
  assert row["ours_pct_of_limit"] > 0
  text = results_lib.markdown({"machine": "m", "command": "c", "train": [row]})
  assert "| n/a | n/a |" in text and "% / n/a | 100 / n/a |" in text


@pytest.mark.parametrize("shape, batch, seq", [("tiny", 16, 128), ("andrea120m", 1, 1024),
                                               ("andrea12m", 4, 1024)])
def test_the_matmuls_timed_are_the_steps_flops(shape, batch, seq):
  """The forms' FLOPs are PaLM's count of the step, less the biases and norms (no matmul)."""
  cfg = shapes.model_config(shapes.load_config(shape), seq)
  total = sum(limit_lib.form_flops(f) for f in limit_lib.matmul_forms(cfg, batch, seq))
  params = jax.eval_shape(lambda: model.init_params(cfg, jax.random.key(0)))
  vectors = sum(leaf.size for path, leaf in jax.tree_util.tree_leaves_with_path(params)
                if path[-1].key not in ("w_qkv", "w_out", "w_in", "wte", "wpe", "lm_head"))
  tokens = batch * seq
  assert total == model.flops_per_token(cfg, seq) * tokens - 6 * vectors * tokens
  L, H, Q = cfg.n_layer, cfg.n_head, cfg.head_dim
  skipped = 12 * L * H * Q * (seq - (seq + 1) / 2)  # above the diagonal, per token
  assert model.flops_per_token(cfg, seq, causal=True) == pytest.approx(
      model.flops_per_token(cfg, seq) - skipped)


def test_xla_and_torch_compute_each_form_as_written():
  cfg = model.ModelConfig(vocab_size=11, block_size=8, d_model=8, n_layer=1, n_head=2)
  for form in limit_lib.matmul_forms(cfg, 2, 8):
    batch, m, k, n, ta, tb, _ = form
    a, b = limit_lib._operands(form)  # pylint: disable=protected-access
    want = (np.swapaxes(a, -1, -2) if ta else a) @ (np.swapaxes(b, -1, -2) if tb else b)
    assert want.shape == (*batch, m, n)
    np.testing.assert_allclose(np.asarray(limit_lib.xla_matmul(form)()), want, rtol=1e-4, atol=1e-4)
    if peer.peer_available() is None:
      np.testing.assert_allclose(limit_lib.torch_matmul(form)().numpy(), want, rtol=1e-4, atol=1e-4)
  limit = limit_lib.matmul_limit(cfg, 2, 8, reps=1, warmup=0, torch_too=peer.peer_available() is None)
  assert all(v > 0 for v in limit.values()) and "xla_matmul_flops_per_s" in limit


@pytest.fixture
def docs(tmp_path, monkeypatch, clock):
  monkeypatch.setattr(results_lib, "DOCS_DIR", str(tmp_path / "docs"))
  (tmp_path / "docs").mkdir()
  return tmp_path / "docs"


def run_main(args, loadavg, clock):
  return bench.main(args + ["--reps=2", "--warmup=0"], loadavg=loadavg, clock=clock,
                    sleep=clock.sleep)


def test_refuses_to_write_docs_when_the_machine_was_busy(docs, clock, capsys):
  out = docs / "performance.json"
  assert run_main(["--shapes=tiny", f"--out={out}"], BUSY, clock) == 2
  assert not out.exists()
  err = capsys.readouterr().err
  assert "busy" in err and "3.70" in err and "--force" in err


def test_force_measures_on_a_busy_machine_but_never_writes_docs(docs, tmp_path, clock, capsys):
  out = docs / "performance.json"
  assert run_main(["--shapes=tiny", f"--out={out}", "--force"], IDLE, clock) == 0
  assert not out.exists()
  assert "never writes into docs/" in capsys.readouterr().err
  elsewhere = tmp_path / "bench.json"
  assert run_main(["--shapes=tiny", f"--out={elsewhere}", "--force"], BUSY, clock) == 0
  assert json.loads(elsewhere.read_text())["load_at_start"] == pytest.approx(3.7)


def test_an_idle_machine_writes_json_and_tables_with_the_load(docs, clock, capsys):
  out = docs / "performance.json"
  assert run_main(["--shapes=tiny,andrea12m", f"--out={out}"], IDLE, clock) == 0
  results = json.loads(out.read_text())
  assert [r["shape"] for r in results["train"]] == ["tiny", "andrea12m"]
  assert results["load_at_start"] == pytest.approx(0.12)
  tiny = results["train"][0]
  assert (tiny["batch"], tiny["seq"]) == (16, 128)
  tables = (docs / "performance_tables.md").read_text()
  assert "load average before starting: 0.12" in tables
  row = next(line for line in tables.splitlines() if line.startswith("| tiny"))
  # 16 x 128 tokens in 2.0 s (ours), 1.9 s (model-only) and 3.0 s (peer).
  pct = lambda s: f"{16 * 128 / s * tiny['flops_per_token'] / 100e9:.0%}"
  assert f"| 1,024 | 1,078 | +5.3% | 683 | 1.50x | {pct(2.0)} / {pct(3.0)} | 100 / 80 |" in row
  assert "| 0.12 / 0.12 |" in row
  assert tables in capsys.readouterr().out


def test_refusal_only_guards_docs():
  assert results_lib.refusal("/tmp/x.json", 9.0, 0.5, False) is None
  assert results_lib.refusal("", 9.0, 0.5, False) is None
  assert results_lib.refusal(f"{results_lib.DOCS_DIR}/performance.json", 0.1, 0.5, False) is None
  assert "busy" in results_lib.refusal(f"{results_lib.DOCS_DIR}/performance.json", 0.6, 0.5, False)
  assert results_lib.refusal(f"{results_lib.DOCS_DIR}/../docs_other/x.json", 9.0, 0.5, False) is None


def test_load_between_reports_cpu_seconds_per_wall_second():
  before = {"load_1m": 0.2, "cpu_s": 10.0, "wall_s": 100.0}
  after = {"load_1m": 1.5, "cpu_s": 13.0, "wall_s": 102.0}
  assert timing.load_between(before, after) == {"load_before": 0.2, "load_after": 1.5,
                                                "cpu_per_wall": 1.5}


def test_interleave_puts_every_side_after_every_other_equally_often():
  calls = []
  fns = {name: (lambda name=name: calls.append(name)) for name in "abc"}
  times = timing.interleave(fns, reps=6, warmup=1, settle_s=0.0)
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
  timing.interleave(fns, reps=4, warmup=0, settle_s=0.0)
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
  config = shapes.load_config("tiny")
  cfg = shapes.model_config(config, 16)
  parts = components.step_parts(cfg, 2, 16, config.train)
  assert set(parts) == {"model forward + backward", "AdamW update of every parameter"}
  for fns in parts.values():
    assert set(fns) == {"ours", "peer"}
    for fn in fns.values():
      fn()
  # The update donates the parameters and optimizer state: calling it again only works if
  # it keeps the new ones (a stale, donated buffer raises).
  parts["AdamW update of every parameter"]["ours"]()


def test_ops_ranking_names_each_op_with_its_shape_and_source():
  """``--ops`` in its own process (the trace flag must be set before JAX starts): the
  ranked rows are real ops of the compiled step, each with its output shape and the JAX
  operation it came from."""
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  out = subprocess.run([sys.executable, "-m", "benchmarks.components", "--shape=tiny", "--batch=1",
                        "--seq=16", "--ops", "--top=5"], capture_output=True, text=True, timeout=300,
                       check=True).stdout
  rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| op ")]
  assert len(rows) == 5, out
  total = float(out.split("ops: ")[1].split(" ms")[0])
  times = [float(r.split("|")[2]) for r in rows]
  assert times == sorted(times, reverse=True) and 0 < sum(times) <= total + 1e-6
  assert any("jit(loss_fn)" in r and "f32[" in r for r in rows), out


def test_hlo_sources_reads_shape_and_op_name():
  from benchmarks import components
  text = ('  %dot.25 = f32[768,3072]{1,0} dot(%a, %b), lhs_contracting_dims={0}, '
          'metadata={op_name="jit(loss_fn)/transpose(jvp())/dot_general" stack_frame_id=1}\n'
          '  ROOT %tuple.1 = (f32[2]{0}) tuple(%x)\n')
  sources = components.hlo_sources(text)
  assert sources["dot.25"] == "f32[768,3072]{1,0}  jit(loss_fn)/transpose(jvp())/dot_general"
  assert sources["tuple.1"] == "(f32[2]{0})"


def test_the_fma_peak_is_measured_or_says_why_not():
  got = limit_lib.fma_peak(seconds=0.02, reps=2)
  if "fma_peak_skipped" in got:  # no C compiler on this machine: the reason names it
    assert "compiler" in got["fma_peak_skipped"] or "could not build" in got["fma_peak_skipped"]
  else:
    assert got["fma_lanes"] in (4, 8, 16) and got["fma_threads"] >= 1
    assert 1e9 < got["fma_peak_flops_per_s"] < 1e14
  assert "no C compiler" in limit_lib.fma_peak(compiler="/no/such/cc")["fma_peak_skipped"]


def test_the_library_ceiling_times_the_weight_matmuls_alone():
  cfg = model.ModelConfig(vocab_size=64, block_size=16, d_model=32, n_layer=2, n_head=2)
  dense = limit_lib.dense_forms(cfg, 2, 16)
  assert len(dense) == 15 and all(not f[0] for f in dense)  # 5 weights x (y, dx, dw); no attention square
  assert len(limit_lib.matmul_forms(cfg, 2, 16)) == len(dense) + 3
  ticks = iter(range(10_000))
  clock = lambda: next(ticks) * 0.5  # every call lasts 0.5 s
  ceiling = limit_lib.library_ceiling(cfg, 2, 16, "xla", reps=1, warmup=0, settle_s=0.0, clock=clock)
  calls = sum(f[-1] for f in dense)
  assert ceiling == pytest.approx(sum(limit_lib.form_flops(f) for f in dense) / (0.5 * calls))
