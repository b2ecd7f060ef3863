"""The step benchmark's measuring parts (benchmarks/matmul_limit.py, timing.py, results.py):
the matmuls the limit times, the interleaving, the load and the guard on results/benchmarks/.
The command's modes are tests/test_perf_step.py's."""

import jax
import numpy as np
import pytest

from andrea_jax import model
from benchmarks import matmul_limit as limit_lib
from benchmarks import peer
from benchmarks import results as results_lib
from benchmarks import shapes
from benchmarks import timing

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


def test_refusal_only_guards_the_published_results():
  published = results_lib.PUBLISHED_DIR
  assert published.endswith("results/benchmarks")
  assert results_lib.refusal("/tmp/x.json", 9.0, 0.5, False) is None
  assert results_lib.refusal("", 9.0, 0.5, False) is None
  assert results_lib.refusal(f"{published}/performance.json", 0.1, 0.5, False) is None
  assert "busy" in results_lib.refusal(f"{published}/performance.json", 0.6, 0.5, False)
  assert "--force never writes" in results_lib.refusal(f"{published}/performance.json", 0.1, 0.5, True)
  assert results_lib.refusal(f"{published}/../benchmarks_other/x.json", 9.0, 0.5, False) is None


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


def test_time_steps_warms_up_untimed_then_times_each_step_with_its_cpu_and_faults():
  calls = []
  warmup_s, steps = timing.time_steps(lambda: calls.append(bytearray(1 << 22)), warmup=2, steps=3)
  assert len(calls) == 5 and len(steps) == 3 and warmup_s >= 0
  assert all(s["s"] > 0 and s["cpu_s"] >= 0 and s["faults"] >= 0 for s in steps)
  got = timing.side_result(steps)
  assert got["step_s"] == sorted(s["s"] for s in steps)[1] and got["times"] == [s["s"] for s in steps]
  assert got["peak_rss_mb"] > 4 and got["cpu"] == timing.cpu_model()
