"""benchmarks/separate.py: each side in its own process, alternating; the rounds' summary."""

import json
import math
import statistics

import pytest

from benchmarks import separate


def rnd(ours, peer, faults=(1000, 200)):
  side = lambda s, f: {"step_s": s, "minor_faults_per_step": f, "cpu_s_per_step": 2 * s,
                       "peak_rss_mb": 100.0 + s, "times": [s]}
  return {"andrea_jax": side(ours, faults[0]), "peer": side(peer, faults[1])}


def test_the_sides_alternate_and_the_ratio_is_paired_by_round():
  assert [separate.order(i) for i in range(3)] == [("andrea_jax", "peer"), ("peer", "andrea_jax"),
                                                    ("andrea_jax", "peer")]
  # A slow round for both sides (the machine, not a side) leaves the paired ratio alone.
  rounds = [rnd(1.0, 1.2), rnd(1.5, 1.8), rnd(1.02, 1.2)]
  s = separate.summarise(rounds, tokens=1000, max_spread=0.10)
  assert s["ratio"] == pytest.approx(1.2) and s["ratio_range"] == pytest.approx((1.176, 1.2), abs=1e-3)
  assert s["andrea_jax"]["step_s"] == 1.02 and s["andrea_jax"]["tokens_per_s"] == pytest.approx(1000 / 1.02)
  assert s["andrea_jax"]["spread"] == pytest.approx(0.5 / 1.02) and not s["andrea_jax"]["agrees"]
  quiet = separate.summarise([rnd(1.0, 1.2), rnd(1.05, 1.25), rnd(1.02, 1.22)], 1000, 0.10)
  assert quiet["andrea_jax"]["agrees"] and quiet["peer"]["agrees"]
  assert quiet["andrea_jax"]["minor_faults_per_step"] == 1000 and quiet["peer"]["peak_rss_mb"] == 101.25


def test_the_ratio_gets_a_t_interval_that_narrows_with_rounds_where_its_range_does_not():
  ratios = [0.93, 1.0, 0.96, 1.03, 0.94, 1.02] * 4  # a noisy machine: rounds 10 % apart
  few = separate.ratio_interval(ratios[:4], 0.10)
  many = separate.ratio_interval(ratios, 0.10)
  width = lambda r: r["ratio_ci95"][1] - r["ratio_ci95"][0]
  assert few["ratio_ci95"][0] < few["ratio_mean"] < few["ratio_ci95"][1] and not few["ratio_decided"]
  assert width(many) < width(few) / 3 and many["ratio_decided"]
  assert many["ratio_mean"] == pytest.approx(math.exp(statistics.mean(math.log(r) for r in ratios)))
  # With 4 rounds the t quantile (3.18), not 1.96: a z interval would call it decided.
  logs = [math.log(r) for r in ratios[:4]]
  z_width = 2 * 1.96 * statistics.stdev(logs) / 2
  assert z_width / few["ratio_mean"] < 0.10 and not few["ratio_decided"]
  assert separate.ratio_interval([1.0], 0.1) == {"ratio_mean": 1.0, "ratio_decided": False}
  row = separate.summarise([rnd(1.0, 0.9), rnd(1.0, 1.1)], 100, 0.1)
  text = separate.markdown({"cpu": "c", "cores": 2, "versions": "v", "command": "x", "date": "d",
                            "load_at_start": 0.1, "shapes": [{"shape": "tiny", "batch": 2, "seq": 16, **row}]})
  assert "| 0.99x [" in text and ", too wide |" in text


def test_the_table_names_the_cpu_and_flags_a_spread_over_the_limit():
  rounds = [rnd(1.0, 1.2), rnd(1.5, 1.8)]
  results = {"cpu": "Some CPU 9000", "cores": 2, "versions": "jax x", "command": "c", "date": "d",
             "load_at_start": 0.1, "shapes": [{"shape": "tiny", "batch": 16, "seq": 128,
                                               **separate.summarise(rounds, 2048, 0.10)}]}
  text = separate.markdown(results)
  assert "CPU: Some CPU 9000 (2 cores)" in text and "over the limit" in text
  assert "| tiny | system | 16 x 128 |" in text and "1.20x [1.20, 1.20]" in text and "1,000 / 200" in text


def test_a_side_runs_in_its_own_process_one_step_at_a_time_and_reports_faults_and_memory():
  live = separate.Live("andrea_jax", "tiny", 1, 8, 1)
  assert live.result is None and live.proc.pid != separate.os.getpid()
  steps = [live.step() for _ in range(2)]
  assert all(s["s"] > 0 and s["cpu_s"] >= 0 and s["faults"] >= 0 for s in steps)
  assert live.cpu_s() > 0  # its CPU seconds so far: building, compiling, three steps
  got = live.end()
  assert got["times"] == [s["s"] for s in steps] and got["peak_rss_mb"] > 50
  assert got["cpu"] == separate.cpu_model() and live.proc.returncode == 0
  # A process that dies mid-round answers its error, not a broken pipe.
  dead = separate.Live("andrea_jax", "tiny", 1, 8, 0)
  dead.proc.kill()
  dead.proc.wait()
  assert dead.step() is None and dead.end()["error"].startswith("exit -9")


def test_a_side_that_fails_says_why_whichever_way_it_runs():
  got = separate.run_child("andrea_jax", "no_such_shape", 1, 8, 1, 1)
  assert got["error"].startswith("exit 1") and "no_such_shape" in got["error"]


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
      self.result = {**separate.side_result(self.steps), "n": len(self.steps)}
    return self.result


def test_lockstep_takes_turns_by_step_rotating_who_goes_first():
  FakeLive.log, FakeLive.all = [], []
  runs = (("system", "andrea_jax"), ("system", "peer"))
  made = {"andrea_jax": dict(s=1.0), "peer": dict(s=2.0, burn=0.25)}

  def start(run):
    FakeLive.all.append(FakeLive(run[1], **made[run[1]]))
    return FakeLive.all[-1]
  slept = []
  got = separate.lockstep_round(runs, start, steps=3, round_index=1, settle_s=0.2, sleep=slept.append)
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
  got = separate.lockstep_round(runs, start, steps=3, round_index=0, settle_s=0.0, sleep=lambda s: None)
  assert got[runs[1]] == {"error": "exit 1: killed"} and got[runs[0]]["n"] == 3
  assert FakeLive.log == ["andrea_jax", "peer", "peer", "andrea_jax", "andrea_jax"]
  row = separate.summarise([{"andrea_jax": got[runs[0]], "peer": got[runs[1]]}], 100, 0.1)
  assert row["peer"] == {"error": "exit 1: killed"} and "ratio" not in row


def test_docs_take_figures_from_an_idle_machine_only(monkeypatch, capsys):
  monkeypatch.setattr(separate.os, "getloadavg", lambda: (3.0, 3.0, 3.0))
  assert separate.main(["--out=docs/performance_separate.json", "--shapes=tiny"]) == 2
  assert "busy before starting" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    separate.parse_args(["--rounds=0"])


def test_each_side_is_held_against_the_fma_peak_and_the_faster_librarys_ceiling():
  row = separate.summarise([rnd(1.0, 0.5)], tokens=1000, max_spread=0.10)
  limits = {"flops_per_token_causal": 1e6, "fma_peak_flops_per_s": 4e9, "fma_lanes": 8, "fma_threads": 2,
            "ceiling_xla_flops_per_s": 2.5e9, "ceiling_torch_flops_per_s": 3e9}
  row = separate.with_limits(row, limits)
  # ours: 1000 tokens/s x 1 MFLOP = 1 GFLOP/s; the peer twice that.
  assert row["andrea_jax"]["pct_of_fma_peak"] == pytest.approx(0.25)
  assert row["andrea_jax"]["pct_of_ceiling"] == pytest.approx(1 / 3)  # the faster library's, PyTorch's
  assert row["peer"]["pct_of_fma_peak"] == pytest.approx(0.5) and row["limits"]["ceiling_flops_per_s"] == 3e9
  results = {"cpu": "c", "cores": 2, "versions": "v", "command": "x", "date": "d", "load_at_start": 0.1,
             "fma": {k: limits[k] for k in ("fma_peak_flops_per_s", "fma_lanes", "fma_threads")},
             "shapes": [{"shape": "tiny", "batch": 16, "seq": 128, **row}]}
  text = separate.markdown(results)
  assert "| 25 % / 50 % | 33 % / 67 % |" in text
  assert "FMA peak: 4 GFLOP/s (2 threads, 8 float32 lanes" in text
  assert "ceiling XLA 2 GFLOP/s, PyTorch 3 GFLOP/s; a step counts 1.0 MFLOP per token (causal" in text


def test_a_missing_library_leaves_its_ceiling_out_and_says_why():
  def run(kind, *_):
    return {"flops_per_s": 2e9} if kind == "ceiling_xla" else {"skipped": "torch is not installed"}
  limits = separate.shape_limits("tiny", 2, 16, {"fma_peak_skipped": "no C compiler"}, run=run)
  assert limits["ceiling_xla_flops_per_s"] == 2e9 and "not installed" in limits["ceiling_torch_skipped"]
  row = separate.with_limits(separate.summarise([rnd(1.0, 0.5)], 32, 0.1), limits)
  assert "pct_of_ceiling" in row["andrea_jax"] and "pct_of_fma_peak" not in row["andrea_jax"]
  text = separate.markdown({"cpu": "c", "cores": 2, "versions": "v", "command": "x", "date": "d",
                            "load_at_start": 0.1, "fma": limits, "shapes": [{"shape": "tiny", "batch": 2,
                                                                             "seq": 16, **row}]})
  assert "FMA peak: no C compiler" in text and "PyTorch n/a (torch is not installed)" in text


def test_allocators_alternate_in_one_run_and_each_gets_its_row(monkeypatch, tmp_path):
  runs = (("system", "andrea_jax"), ("system", "peer"), ("tcmalloc", "andrea_jax"), ("tcmalloc", "peer"))
  orders = [separate.order(i, runs) for i in range(4)]
  assert [o[0] for o in orders] == list(runs)  # each run goes first once every four rounds
  assert all(sorted(o) == sorted(runs) for o in orders)
  # Ours 10 % faster under the second allocator in every round, whatever the round's speed.
  rounds = {"system": [rnd(1.1, 1.0), rnd(2.2, 2.0)], "tcmalloc": [rnd(1.0, 1.0), rnd(2.0, 2.0)]}
  ab = separate.arm_ab(rounds, base="system")
  assert set(ab) == {"tcmalloc"} and ab["tcmalloc"]["speedup"] == pytest.approx(1.1)
  assert separate.arm_ab({"tcmalloc": rounds["tcmalloc"]}, base="system") == {}  # no base: nothing paired
  # The real loop, its children faked: a row per allocator, the A/B beside the second.
  lib = tmp_path / "libfake.so"
  lib.write_bytes(b"")
  seen = []

  def fake_child(side, shape, batch, seq, warmup, steps, preload="", settings=""):
    seen.append((side, preload))
    return rnd(1.1 if preload == "" else 1.0, 1.0)[side]
  monkeypatch.setattr(separate, "run_child", fake_child)
  out = tmp_path / "sep.json"
  assert separate.main(["--shapes=tiny", "--rounds=2", "--no-limit", "--force", f"--out={out}",
                        f"--allocators=system,{lib}", "--interleave=processes"], sleep=lambda s: None) == 0
  assert seen[:4] == [("andrea_jax", ""), ("peer", ""), ("andrea_jax", str(lib)), ("peer", str(lib))]
  assert seen[4] == ("peer", "")  # the second round starts one run later
  text = (tmp_path / "sep_tables.md").read_text()
  assert "| tiny | system | 16 x 128 |" in text and "| tiny | libfake.so | 16 x 128 |" in text
  assert "our step in libfake.so against system, paired by round (above 1: faster): 1.10x [1.10, 1.10]; geometric mean 1.10x [95 % CI 1.10, 1.10]" in text
  # The same by step (the default): each side's process under each allocator, stepping in turn.
  FakeLive.log, FakeLive.all = [], []

  def fake_live(side, shape, batch, seq, warmup, preload="", settings=""):
    FakeLive.all.append(FakeLive((side, preload), 1.1 if preload == "" and side == "andrea_jax" else 1.0))
    return FakeLive.all[-1]
  monkeypatch.setattr(separate, "Live", fake_live)
  assert separate.main(["--shapes=tiny", "--rounds=2", "--steps=2", "--no-limit", "--force", f"--out={out}",
                        f"--allocators=system,{lib}", "--interleave=steps"], sleep=lambda s: None) == 0
  assert FakeLive.log[:5] == [("andrea_jax", ""), ("peer", ""), ("andrea_jax", str(lib)),
                              ("peer", str(lib)), ("peer", "")]  # the second step starts one later
  text = (tmp_path / "sep_tables.md").read_text()
  assert "Interleaved by step" in text and "| tiny | libfake.so | 16 x 128 |" in text
  assert "in libfake.so against system, paired by round (above 1: faster): 1.10x [1.10, 1.10]; geometric mean 1.10x [95 % CI 1.10, 1.10]" in text
  # The limits are the shape's, measured once: one line however many allocators' rows.
  results = json.loads(out.read_text())
  assert len(results["code"]["commit"]) == 40 and f"Code: commit {results['code']['commit'][:12]}" in text
  for row in results["shapes"]:
    row["limits"] = {"flops_per_token_causal": 1e6, "ceiling_xla_flops_per_s": 2e9}
  assert separate.markdown(results).count("- tiny: weight-matmul ceiling") == 1


def test_an_allocator_that_is_not_there_is_one_line_naming_it(capsys):
  assert separate.main(["--shapes=tiny", "--allocators=system,/no/such/libtcmalloc.so", "--force"]) == 2
  err = capsys.readouterr().err
  assert "'/no/such/libtcmalloc.so' is not installed" in err and "apt-get install" in err


def test_a_variant_of_ours_runs_beside_the_default_and_shares_its_peer(monkeypatch, tmp_path, capsys):
  made = []

  def fake_child(side, shape, batch, seq, warmup, steps, preload="", settings=""):
    made.append((side, settings))
    return rnd(0.8 if "remat_policy=none" in settings else 1.0, 1.0)[side]
  monkeypatch.setattr(separate, "run_child", fake_child)
  out = tmp_path / "v.json"
  assert separate.main(["--shapes=tiny", "--rounds=2", "--steps=2", "--no-limit", "--force", f"--out={out}",
                        "--settings=model.scan_unroll=1", "--variant=noremat:model.remat_policy=none"],
                       sleep=lambda s: None) == 0
  # Three processes a round: ours, the peer, ours without remat (the peer does not run twice).
  assert made[:3] == [("andrea_jax", "model.scan_unroll=1"), ("peer", "model.scan_unroll=1"),
                      ("andrea_jax", "model.scan_unroll=1,model.remat_policy=none")]
  rows = {r["arm"]: r for r in json.loads(out.read_text())["shapes"]}
  assert rows["system+noremat"]["peer"]["shared_with"] == "system"
  assert rows["system+noremat"]["ratio"] == pytest.approx(1.25) and rows["system"]["ratio"] == pytest.approx(1.0)
  text = (tmp_path / "v_tables.md").read_text()
  assert "| tiny | system+noremat | 16 x 128 |" in text
  assert "our step in system+noremat against system, paired by round (above 1: faster): 1.25x [1.25, 1.25]" in text
  with pytest.raises(ValueError, match="NAME:SETTINGS"):
    separate.variant_settings(["model.remat_policy=none"])
  assert separate.main(["--shapes=tiny", "--force", "--variant=a:x=1", "--variant=a:x=2"]) == 2
  assert "'a:x=2'" in capsys.readouterr().err


def test_ctrl_c_stops_the_run_in_one_line_and_writes_nothing(monkeypatch, tmp_path, capsys):
  def interrupted(*a, **k):
    raise KeyboardInterrupt
  monkeypatch.setattr(separate, "run_child", interrupted)
  out = tmp_path / "x.json"
  assert separate.main(["--shapes=tiny", "--no-limit", "--force", f"--out={out}"], sleep=lambda s: None) == 130
  assert capsys.readouterr().err.startswith("interrupted: nothing written") and not out.exists()
