"""benchmarks/rounds.py: each side in its own process, alternating; the rounds' summary, the
lockstep order, the limits and the arms (the command's loop over them: tests/test_perf_step.py)."""

import math
import statistics

import pytest

from benchmarks import results as results_lib
from benchmarks import rounds as rounds_lib
from benchmarks import step
from benchmarks import timing


def rnd(ours, peer, faults=(1000, 200)):
  side = lambda s, f: {"step_s": s, "minor_faults_per_step": f, "cpu_s_per_step": 2 * s,
                       "peak_rss_mb": 100.0 + s, "times": [s]}
  return {"andrea_jax": side(ours, faults[0]), "peer": side(peer, faults[1])}


def test_the_sides_alternate_and_the_ratio_is_paired_by_round():
  assert [rounds_lib.order(i) for i in range(3)] == [("andrea_jax", "peer"), ("peer", "andrea_jax"),
                                                    ("andrea_jax", "peer")]
  # A slow round for both sides (the machine, not a side) leaves the paired ratio alone.
  rounds = [rnd(1.0, 1.2), rnd(1.5, 1.8), rnd(1.02, 1.2)]
  s = rounds_lib.summarise(rounds, tokens=1000, max_spread=0.10)
  assert s["ratio"] == pytest.approx(1.2) and s["ratio_range"] == pytest.approx((1.176, 1.2), abs=1e-3)
  assert s["andrea_jax"]["step_s"] == 1.02 and s["andrea_jax"]["tokens_per_s"] == pytest.approx(1000 / 1.02)
  assert s["andrea_jax"]["spread"] == pytest.approx(0.5 / 1.02) and not s["andrea_jax"]["agrees"]
  quiet = rounds_lib.summarise([rnd(1.0, 1.2), rnd(1.05, 1.25), rnd(1.02, 1.22)], 1000, 0.10)
  assert quiet["andrea_jax"]["agrees"] and quiet["peer"]["agrees"]
  assert quiet["andrea_jax"]["minor_faults_per_step"] == 1000 and quiet["peer"]["peak_rss_mb"] == 101.25


def test_the_ratio_gets_a_t_interval_that_narrows_with_rounds_where_its_range_does_not():
  ratios = [0.93, 1.0, 0.96, 1.03, 0.94, 1.02] * 4  # a noisy machine: rounds 10 % apart
  few = rounds_lib.ratio_interval(ratios[:4], 0.10)
  many = rounds_lib.ratio_interval(ratios, 0.10)
  width = lambda r: r["ratio_ci95"][1] - r["ratio_ci95"][0]
  assert few["ratio_ci95"][0] < few["ratio_mean"] < few["ratio_ci95"][1] and not few["ratio_decided"]
  assert width(many) < width(few) / 3 and many["ratio_decided"]
  assert many["ratio_mean"] == pytest.approx(math.exp(statistics.mean(math.log(r) for r in ratios)))
  # With 4 rounds the t quantile (3.18), not 1.96: a z interval would call it decided.
  logs = [math.log(r) for r in ratios[:4]]
  z_width = 2 * 1.96 * statistics.stdev(logs) / 2
  assert z_width / few["ratio_mean"] < 0.10 and not few["ratio_decided"]
  assert rounds_lib.ratio_interval([1.0], 0.1) == {"ratio_mean": 1.0, "ratio_decided": False}
  row = rounds_lib.summarise([rnd(1.0, 0.9), rnd(1.0, 1.1)], 100, 0.1)
  text = results_lib.rounds_markdown({"cpu": "c", "cores": 2, "versions": "v", "command": "x", "date": "d",
                            "load_at_start": 0.1, "shapes": [{"shape": "tiny", "batch": 2, "seq": 16, **row}]})
  assert "| 0.99x [" in text and ", too wide |" in text


def test_the_table_names_the_cpu_and_flags_a_spread_over_the_limit():
  rounds = [rnd(1.0, 1.2), rnd(1.5, 1.8)]
  results = {"cpu": "Some CPU 9000", "cores": 2, "versions": "jax x", "command": "c", "date": "d",
             "load_at_start": 0.1, "shapes": [{"shape": "tiny", "batch": 16, "seq": 128,
                                               **rounds_lib.summarise(rounds, 2048, 0.10)}]}
  text = results_lib.rounds_markdown(results)
  assert "CPU: Some CPU 9000 (2 cores)" in text and "over the limit" in text
  assert "| tiny | system | 16 x 128 |" in text and "1.20x [1.20, 1.20]" in text and "1,000 / 200" in text


def live(warmup):
  """Our side's lockstep process at a toy size (tiny at one layer, one sequence of 8)."""
  return rounds_lib.Live(step.child_argv("andrea_jax", "tiny", 1, 8, warmup, 1, "model.n_layer=1")
                         + ["--serve"])


def test_a_side_runs_in_its_own_process_one_step_at_a_time_and_reports_faults_and_memory():
  live_one = live(1)
  assert live_one.result is None and live_one.proc.pid != rounds_lib.os.getpid()
  steps = [live_one.step() for _ in range(2)]
  assert all(s["s"] > 0 and s["cpu_s"] >= 0 and s["faults"] >= 0 for s in steps)
  assert live_one.cpu_s() > 0  # its CPU seconds so far: building, compiling, three steps
  got = live_one.end()
  assert got["times"] == [s["s"] for s in steps] and got["peak_rss_mb"] > 50
  assert got["cpu"] == timing.cpu_model() and live_one.proc.returncode == 0
  # A process that dies mid-round answers its error, not a broken pipe.
  dead = live(0)
  dead.proc.kill()
  dead.proc.wait()
  assert dead.step() is None and dead.end()["error"].startswith("exit -9")


def test_a_side_that_fails_says_why_whichever_way_it_runs():
  got = step.run_child("andrea_jax", "no_such_shape", 1, 8, 1, 1)
  assert got["error"].startswith("exit 2: error: ") and "no_such_shape" in got["error"]


class FakeLive:
  """A lockstep process without a process: steps take ``s`` seconds; the ones waiting burn
  ``burn`` CPU seconds per step of another (a spinning thread pool); ``dies_after`` steps
  it ends with an error."""
  log = []

  def __init__(self, name, s, burn=0.0, dies_after=None):
    self.name, self.s, self.burn, self.dies_after = name, s, burn, dies_after
    self.steps, self.result, self.cpu = [], None, 0.0

  def cpu_s(self):
    return self.cpu

  def step(self):
    FakeLive.log.append(self.name)
    if self.dies_after is not None and len(self.steps) == self.dies_after:
      self.result = {"error": "exit 1: killed"}
      return None
    for other in FakeLive.all:
      if other is not self:
        other.cpu += other.burn
    self.steps.append({"s": self.s, "faults": 10, "cpu_s": 2 * self.s})
    return self.steps[-1]

  def end(self):
    if self.result is None:
      self.result = {**timing.side_result(self.steps), "n": len(self.steps)}
    return self.result


def test_lockstep_takes_turns_by_step_rotating_who_goes_first():
  FakeLive.log, FakeLive.all = [], []
  runs = (("system", "andrea_jax"), ("system", "peer"))
  made = {"andrea_jax": dict(s=1.0), "peer": dict(s=2.0, burn=0.25)}

  def start(run):
    FakeLive.all.append(FakeLive(run[1], **made[run[1]]))
    return FakeLive.all[-1]
  slept = []
  got = rounds_lib.lockstep_round(runs, start, steps=3, round_index=1, settle_s=0.2, sleep=slept.append)
  assert [f.name for f in FakeLive.all] == ["peer", "andrea_jax"]  # round 1 starts the peer first
  assert FakeLive.log == ["peer", "andrea_jax", "andrea_jax", "peer", "peer", "andrea_jax"]
  assert slept == [0.2] * 6 and got[runs[0]]["n"] == got[runs[1]]["n"] == 3
  # The peer burns CPU while ours steps: it shows on ours' row, not the peer's.
  assert got[runs[0]]["waiting_cpu_s_per_step"] == 0.25 and got[runs[1]]["waiting_cpu_s_per_step"] == 0.0


def test_a_side_that_dies_mid_round_leaves_the_others_stepping_and_says_why():
  FakeLive.log, FakeLive.all = [], []
  runs = (("system", "andrea_jax"), ("system", "peer"))

  def start(run):
    FakeLive.all.append(FakeLive(run[1], 1.0, dies_after=1 if run[1] == "peer" else None))
    return FakeLive.all[-1]
  got = rounds_lib.lockstep_round(runs, start, steps=3, round_index=0, settle_s=0.0, sleep=lambda s: None)
  assert got[runs[1]] == {"error": "exit 1: killed"} and got[runs[0]]["n"] == 3
  assert FakeLive.log == ["andrea_jax", "peer", "peer", "andrea_jax", "andrea_jax"]
  row = rounds_lib.summarise([{"andrea_jax": got[runs[0]], "peer": got[runs[1]]}], 100, 0.1)
  assert row["peer"] == {"error": "exit 1: killed"} and "ratio" not in row


def test_each_side_is_held_against_the_fma_peak_and_the_faster_librarys_ceiling():
  row = rounds_lib.summarise([rnd(1.0, 0.5)], tokens=1000, max_spread=0.10)
  limits = {"flops_per_token_causal": 1e6, "fma_peak_flops_per_s": 4e9, "fma_lanes": 8, "fma_threads": 2,
            "ceiling_xla_flops_per_s": 2.5e9, "ceiling_torch_flops_per_s": 3e9}
  row = rounds_lib.with_limits(row, limits)
  # ours: 1000 tokens/s x 1 MFLOP = 1 GFLOP/s; the peer twice that.
  assert row["andrea_jax"]["pct_of_fma_peak"] == pytest.approx(0.25)
  assert row["andrea_jax"]["pct_of_ceiling"] == pytest.approx(1 / 3)  # the faster library's, PyTorch's
  assert row["peer"]["pct_of_fma_peak"] == pytest.approx(0.5) and row["limits"]["ceiling_flops_per_s"] == 3e9
  results = {"cpu": "c", "cores": 2, "versions": "v", "command": "x", "date": "d", "load_at_start": 0.1,
              "fma": {k: limits[k] for k in ("fma_peak_flops_per_s", "fma_lanes", "fma_threads")},
             "shapes": [{"shape": "tiny", "batch": 16, "seq": 128, **row}]}
  text = results_lib.rounds_markdown(results)
  assert "| 25 % / 50 % | 33 % / 67 % |" in text
  assert "FMA peak: 4 GFLOP/s (2 threads, 8 float32 lanes" in text
  assert "ceiling XLA 2 GFLOP/s, PyTorch 3 GFLOP/s; a step counts 1.0 MFLOP per token (causal" in text


def test_a_missing_library_leaves_its_ceiling_out_and_says_why():
  def run(kind, *_):
    return {"flops_per_s": 2e9} if kind == "ceiling_xla" else {"skipped": "torch is not installed"}
  limits = rounds_lib.shape_limits("tiny", 2, 16, {"fma_peak_skipped": "no C compiler"}, run)
  assert limits["ceiling_xla_flops_per_s"] == 2e9 and "not installed" in limits["ceiling_torch_skipped"]
  row = rounds_lib.with_limits(rounds_lib.summarise([rnd(1.0, 0.5)], 32, 0.1), limits)
  assert "pct_of_ceiling" in row["andrea_jax"] and "pct_of_fma_peak" not in row["andrea_jax"]
  text = results_lib.rounds_markdown({"cpu": "c", "cores": 2, "versions": "v", "command": "x", "date": "d",
                            "load_at_start": 0.1, "fma": limits, "shapes": [{"shape": "tiny", "batch": 2,
                                                                             "seq": 16, **row}]})
  assert "FMA peak: no C compiler" in text and "PyTorch n/a (torch is not installed)" in text


def test_allocators_alternate_in_one_run_and_each_gets_its_row():
  runs = (("system", "andrea_jax"), ("system", "peer"), ("tcmalloc", "andrea_jax"), ("tcmalloc", "peer"))
  orders = [rounds_lib.order(i, runs) for i in range(4)]
  assert [o[0] for o in orders] == list(runs)  # each run goes first once every four rounds
  assert all(sorted(o) == sorted(runs) for o in orders)
  # Ours 10 % faster under the second allocator in every round, whatever the round's speed.
  rounds = {"system": [rnd(1.1, 1.0), rnd(2.2, 2.0)], "tcmalloc": [rnd(1.0, 1.0), rnd(2.0, 2.0)]}
  ab = rounds_lib.arm_ab(rounds, base="system")
  assert set(ab) == {"tcmalloc"} and ab["tcmalloc"]["speedup"] == pytest.approx(1.1)
  assert rounds_lib.arm_ab({"tcmalloc": rounds["tcmalloc"]}, base="system") == {}  # no base: nothing paired


def test_process_rounds_rotate_the_runs_and_settle_between_processes():
  calls, slept, said = [], [], []
  got = rounds_lib.process_rounds(("a", "b", "c"), lambda r: calls.append(r) or r.upper(), 2, 0.5,
                                slept.append, lambda i, rnd: said.append((i, rnd)))
  assert calls == ["a", "b", "c", "b", "c", "a"] and slept == [0.5] * 6
  assert got == [{"a": "A", "b": "B", "c": "C"}] * 2 and [i for i, _ in said] == [0, 1]


def test_variants_and_allocators_make_the_arms():
  with pytest.raises(ValueError, match="NAME:SETTINGS"):
    rounds_lib.variant_settings(["model.remat_policy=none"])
  with pytest.raises(ValueError, match="'a:x=2'"):
    rounds_lib.variant_settings(["a:x=1", "a:x=2"])
  arms = rounds_lib.arms({"system": ""}, rounds_lib.variant_settings(["noremat:model.remat_policy=none"]),
                       "model.scan_unroll=1")
  assert arms == {"system": rounds_lib.Arm("", "model.scan_unroll=1", True),
                  "system+noremat": rounds_lib.Arm("", "model.scan_unroll=1,model.remat_policy=none", False)}
  with pytest.raises(ValueError, match="not installed"):
    rounds_lib.allocator_paths("system,/no/such/lib.so")
