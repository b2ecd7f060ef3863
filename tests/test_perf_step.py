"""benchmarks/step.py, the one step benchmark: its modes as flags, run for real at a toy size
(one process, separate processes, the parts, XLA's ops) and with fakes on a fake clock (the
one-process formulas, the arms of a separate run, the guard on results/benchmarks/)."""

import json
import subprocess
import sys

import pytest
from absl import app
from absl import flags

from andrea_jax import errors
from andrea_jax import model
from benchmarks import matmul_limit as limit_lib
from benchmarks import ours
from benchmarks import parts
from benchmarks import peer
from benchmarks import results as results_lib
from benchmarks import rounds
from benchmarks import shapes
from benchmarks import sides
from benchmarks import step
from benchmarks import timing

BUSY, IDLE = (lambda: (3.7, 3.0, 2.5)), (lambda: (0.12, 0.3, 0.4))
STEP_S = {"andrea_jax": 2.0, "model_only": 1.9, "peer": 3.0}  # ours 1.5x the peer's speed
GFLOPS = {"xla": 100.0, "torch": 80.0}  # each side's matmul FLOP/s, in 1e9
# A toy run: tiny at one layer, one sequence of 8 tokens, one timed step, no pauses.
TOY = ["--shapes=tiny", "--batch=1", "--seq=8", "--warmup=0", "--steps=1", "--settle_s=0",
       "--settings=model.n_layer=1", "--nolimit"]


def command(*args, timeout=600):
  """``python -m benchmarks.step ARGS`` as a user runs it: its exit code, stdout and stderr."""
  got = subprocess.run([sys.executable, "-m", "benchmarks.step", *args], capture_output=True,
                       text=True, timeout=timeout, check=False)
  return got.returncode, got.stdout, got.stderr


def run_main(args, loadavg=IDLE, **kw):
  return step.main(["benchmarks.step"], step.flag_values(args), loadavg=loadavg, **kw)


# ----------------------------------------------------------------------------- real runs, toy size


def test_one_process_times_ours_the_bare_step_and_the_peer_and_writes_json_and_tables(tmp_path):
  out = tmp_path / "one.json"
  code, text, err = command("--processes=one", "--step_settle_s=0", *TOY, f"--out={out}")
  assert code == 0, err
  (row,) = json.loads(out.read_text())["train"]
  assert (row["shape"], row["batch"], row["seq"]) == ("tiny", 1, 8)
  assert row["andrea_jax_tokens_per_s"] > 0 and row["model_only_tokens_per_s"] > 0
  assert row["step_overhead"] == pytest.approx(
      row["andrea_jax_step_s_beside_model_only"] / row["model_only_step_s"] - 1)
  if peer.peer_available() is None:
    assert row["ratio"] == pytest.approx(row["andrea_jax_tokens_per_s"] / row["peer_tokens_per_s"])
  else:
    assert "not installed" in row["peer_missing"]
  assert "limit_flops_per_s" not in row  # --nolimit
  results = json.loads(out.read_text())
  assert results["command"].startswith("python -m benchmarks.step --processes=one")
  assert len(results["code"]["commit"]) == 40 and results["platform"] == "cpu"
  tables = (tmp_path / "one_tables.md").read_text()
  assert "| tiny | 1 x 8 |" in tables and tables in text


def test_separate_processes_time_each_side_in_its_own_and_pair_the_rounds(tmp_path):
  out = tmp_path / "sep.json"
  code, text, err = command(*TOY, "--rounds=1", f"--out={out}")
  assert code == 0, err
  (row,) = json.loads(out.read_text())["shapes"]
  (rnd,) = row["per_round"]
  ours_side = rnd["andrea_jax"]
  assert ours_side["step_s"] > 0 and ours_side["peak_rss_mb"] > 50 and ours_side["compile_s"] > 0
  assert ours_side["times"] == [ours_side["step_s"]] and ours_side["cpu"] == timing.cpu_model()
  if peer.peer_available() is None:
    assert rnd["peer"]["step_s"] > 0 and rnd["peer"]["backend"] == "none" and rnd["peer"]["device"] == "cpu"
    assert row["ratio"] == pytest.approx(rnd["peer"]["step_s"] / ours_side["step_s"])
    assert row["andrea_jax"]["tokens_per_s"] == pytest.approx(8 / ours_side["step_s"])
  assert "tiny round 1/1" in text and "| tiny | system | 1 x 8 |" in (tmp_path / "sep_tables.md").read_text()


def test_the_parts_in_separate_processes_time_every_row_on_both_sides(tmp_path):
  """One round, each side a real process: every component and both step parts are timed on
  both sides, and our process never loaded PyTorch."""
  out = tmp_path / "parts.json"
  code, text, err = command("--measure=parts", *TOY, "--rounds=1", f"--out={out}")
  assert code == 0, err
  (s,) = json.loads(out.read_text())["shapes"]
  assert s["good_rounds"] == 1, s["per_round"]
  assert [r["row"] for r in s["rows"]] == list(parts.ROWS + parts.PARTS)
  assert all(r["ours_ms"] > 0 and r["peer_ms"] > 0 for r in s["rows"])
  assert s["per_round"][0]["ours"]["torch_loaded"] is False
  assert s["per_round"][0]["peer"]["torch_loaded"] is True
  assert "| model forward + backward |" in text and (tmp_path / "parts_tables.md").exists()


def test_ops_ranking_names_each_op_with_its_shape_and_source():
  """``--measure=ops`` sets the trace flag before JAX starts: the ranked rows are real ops of
  the compiled forward + backward, each with its output shape and the JAX operation it came
  from."""
  code, out, err = command("--measure=ops", "--shapes=tiny", "--batch=1", "--seq=16", "--top=5")
  assert code == 0, err
  rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| op ")]
  assert len(rows) == 5, out
  total = float(out.split("ops: ")[1].split(" ms")[0])
  times = [float(r.split("|")[2]) for r in rows]
  assert times == sorted(times, reverse=True) and 0 < sum(times) <= total + 1e-6
  assert any("jit(loss_fn)" in r and "f32[" in r for r in rows), out


def test_a_mistake_is_one_line_and_exit_2_before_anything_runs():
  code, out, err = command("--shapes=tiny,no_such_shape", "--rounds=1")
  assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
  assert "no_such_shape" in err and "names are" in err and "round" not in out


# ----------------------------------------------------------------------------- the flags


def test_flags_a_mode_would_ignore_are_refused():
  with pytest.raises(app.UsageError, match="--variant arms the whole step in separate"):
    run_main(["--processes=one", "--variant=a:model.n_layer=1"])
  with pytest.raises(app.UsageError, match="--allocators .* --processes=separate --measure=step"):
    run_main(["--measure=parts", "--allocators=system"])
  with pytest.raises(app.UsageError, match="--memory is for --processes=one"):
    run_main(["--memory"])
  with pytest.raises(app.UsageError, match="writes nothing"):
    run_main(["--measure=ops", "--out=/tmp/x.json"])
  with pytest.raises(errors.ConfigError, match="no_such_shape"):
    run_main(["--shapes=tiny,no_such_shape"])
  with pytest.raises(flags.IllegalFlagValueError):
    step.flag_values(["--rounds=0"])
  with pytest.raises(app.UsageError, match="unexpected arguments"):
    step.main(["benchmarks.step", "tiny"], step.flag_values([]))


def test_the_command_records_the_flags_it_was_given():
  fv = step.flag_values(["--shapes=tiny", "--variant=a:model.n_layer=1,model.d_model=8",
                         "--variant=b:model.n_layer=2", "--nolimit"])
  assert step.command(fv) == ["--shapes=tiny", "--variant=a:model.n_layer=1,model.d_model=8",
                              "--variant=b:model.n_layer=2", "--nolimit"]


# ----------------------------------------------------------------------------- one process, faked


class FakeClock:
  """Seconds that pass only when a fake runs (each takes a set time) or the loop sleeps."""

  def __init__(self):
    self.now = 0.0

  def __call__(self) -> float:
    return self.now

  def sleep(self, seconds: float) -> None:
    self.now += seconds

  def taking(self, seconds: float):
    return lambda tokens=None: self.sleep(seconds)


@pytest.fixture
def clock(monkeypatch):
  """Every timed piece of ``bench_shape`` replaced by a fake on one fake clock."""
  c = FakeClock()
  monkeypatch.setattr(ours, "ours_step", lambda config, batch, seq, bare=False: ours.Step(
      c.taking(STEP_S["model_only" if bare else "andrea_jax"]), shapes.model_config(config, seq), 0.0))
  monkeypatch.setattr(peer, "peer_step", lambda *args, **kwargs: c.taking(STEP_S["peer"]))
  monkeypatch.setattr(peer, "peer_available", lambda: None)
  # One product of a form takes its FLOPs over the side's FLOP/s.
  for side, name in (("xla", "xla_matmul"), ("torch", "torch_matmul")):
    monkeypatch.setattr(limit_lib, name, lambda form, side=side: c.taking(
        limit_lib.form_flops(form) / form[-1] / (GFLOPS[side] * 1e9)))
  return c


def shape_row(clock, shape="tiny", batch=2, seq=16):
  row = step.bench_shape(shape, batch, seq, reps=3, warmup=1, device="cpu", loadavg=IDLE,
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


@pytest.fixture
def published(tmp_path, monkeypatch, clock):
  monkeypatch.setattr(results_lib, "PUBLISHED_DIR", str(tmp_path / "results" / "benchmarks"))
  (tmp_path / "results" / "benchmarks").mkdir(parents=True)
  return tmp_path / "results" / "benchmarks"


def run_one(args, loadavg, clock):
  return run_main(args + ["--processes=one", "--steps=2", "--warmup=0"], loadavg=loadavg,
                  clock=clock, sleep=clock.sleep)


def test_refuses_to_write_results_when_the_machine_was_busy(published, clock):
  out = published / "performance.json"
  with pytest.raises(app.UsageError, match=r"busy .*3\.70.*--force"):
    run_one(["--shapes=tiny", f"--out={out}"], BUSY, clock)
  assert not out.exists()


def test_force_measures_on_a_busy_machine_but_never_writes_results(published, tmp_path, clock):
  out = published / "performance.json"
  with pytest.raises(app.UsageError, match="--force never writes into results/benchmarks/"):
    run_one(["--shapes=tiny", f"--out={out}", "--force"], IDLE, clock)
  assert not out.exists()
  elsewhere = tmp_path / "bench.json"
  assert run_one(["--shapes=tiny", f"--out={elsewhere}", "--force"], BUSY, clock) == 0
  assert json.loads(elsewhere.read_text())["load_at_start"] == pytest.approx(3.7)


def test_an_idle_machine_writes_json_and_tables_with_the_load(published, clock, capsys):
  out = published / "performance.json"
  assert run_one(["--shapes=tiny,andrea12m", f"--out={out}"], IDLE, clock) == 0
  results = json.loads(out.read_text())
  assert [r["shape"] for r in results["train"]] == ["tiny", "andrea12m"]
  assert results["load_at_start"] == pytest.approx(0.12)
  tiny = results["train"][0]
  assert (tiny["batch"], tiny["seq"]) == (16, 128)
  tables = (published / "performance_tables.md").read_text()
  assert "load average before starting: 0.12" in tables and "Code: commit " in tables
  row = next(line for line in tables.splitlines() if line.startswith("| tiny"))
  # 16 x 128 tokens in 2.0 s (ours), 1.9 s (model-only) and 3.0 s (peer).
  pct = lambda s: f"{16 * 128 / s * tiny['flops_per_token'] / 100e9:.0%}"
  assert f"| 1,024 | 1,078 | +5.3% | 683 | 1.50x | {pct(2.0)} / {pct(3.0)} | 100 / 80 |" in row
  assert "| 0.12 / 0.12 |" in row
  assert tables in capsys.readouterr().out


# ----------------------------------------------------------------------------- separate processes, faked


def rnd(ours_s, peer_s):
  side = lambda s: {"step_s": s, "minor_faults_per_step": 10, "cpu_s_per_step": 2 * s,
                    "peak_rss_mb": 100.0, "times": [s]}
  return {"andrea_jax": side(ours_s), "peer": side(peer_s)}


class FakeLive:
  """A lockstep process without a process: each step takes ``s`` seconds."""
  log = []

  def __init__(self, name, s):
    self.name, self.s, self.steps, self.result = name, s, [], None

  def cpu_s(self):
    return 0.0

  def step(self):
    FakeLive.log.append(self.name)
    self.steps.append({"s": self.s, "faults": 10, "cpu_s": 2 * self.s})
    return self.steps[-1]

  def end(self):
    from benchmarks import timing  # pylint: disable=import-outside-toplevel
    self.result = self.result or timing.side_result(self.steps)
    return self.result


def test_allocators_alternate_in_one_run_and_each_gets_its_row(monkeypatch, tmp_path):
  lib = tmp_path / "libfake.so"
  lib.write_bytes(b"")
  seen = []

  def fake_child(side, shape, batch, seq, warmup, steps, preload="", settings="", *rest):
    seen.append((side, preload))
    return rnd(1.1 if preload == "" else 1.0, 1.0)[side]
  monkeypatch.setattr(sides, "run_child", fake_child)
  out = tmp_path / "sep.json"
  args = ["--shapes=tiny", "--rounds=2", "--nolimit", f"--out={out}", f"--allocators=system,{lib}"]
  assert run_main(args + ["--interleave=processes"], sleep=lambda s: None) == 0
  assert seen[:4] == [("andrea_jax", ""), ("peer", ""), ("andrea_jax", str(lib)), ("peer", str(lib))]
  assert seen[4] == ("peer", "")  # the second round starts one run later
  text = (tmp_path / "sep_tables.md").read_text()
  assert "| tiny | system | 16 x 128 |" in text and "| tiny | libfake.so | 16 x 128 |" in text
  assert ("our step in libfake.so against system, paired by round (above 1: faster): 1.10x "
          "[1.10, 1.10]; geometric mean 1.10x [95 % CI 1.10, 1.10]") in text
  # The same by step: each side's process under each allocator, stepping in turn.
  FakeLive.log = []

  def fake_live(argv, preload=""):
    side = next(a for a in argv if a.startswith("--child=")).split("=")[1]
    return FakeLive((side, preload), 1.1 if preload == "" and side == "andrea_jax" else 1.0)
  monkeypatch.setattr(rounds, "Live", fake_live)
  assert run_main(args + ["--steps=2", "--interleave=steps"], sleep=lambda s: None) == 0
  assert FakeLive.log[:5] == [("andrea_jax", ""), ("peer", ""), ("andrea_jax", str(lib)),
                              ("peer", str(lib)), ("peer", "")]  # the second step starts one later
  text = (tmp_path / "sep_tables.md").read_text()
  assert "Interleaved by step" in text and "| tiny | libfake.so | 16 x 128 |" in text
  assert "in libfake.so against system, paired by round (above 1: faster): 1.10x [1.10, 1.10]" in text
  # The limits are the shape's, measured once: one line however many allocators' rows.
  results = json.loads(out.read_text())
  assert len(results["code"]["commit"]) == 40 and f"Code: commit {results['code']['commit'][:12]}" in text
  for row in results["shapes"]:
    row["limits"] = {"flops_per_token_causal": 1e6, "ceiling_xla_flops_per_s": 2e9}
  assert results_lib.rounds_markdown(results).count("- tiny: weight-matmul ceiling") == 1


def test_an_allocator_that_is_not_there_is_one_line_naming_it():
  with pytest.raises(app.UsageError, match="'/no/such/libtcmalloc.so' is not installed.*apt-get install"):
    run_main(["--shapes=tiny", "--allocators=system,/no/such/libtcmalloc.so"])


def test_a_variant_of_ours_runs_beside_the_default_and_shares_its_peer(monkeypatch, tmp_path):
  made = []

  def fake_child(side, shape, batch, seq, warmup, steps, preload="", settings="", *rest):
    made.append((side, settings))
    return rnd(0.8 if "remat_policy=none" in settings else 1.0, 1.0)[side]
  monkeypatch.setattr(sides, "run_child", fake_child)
  out = tmp_path / "v.json"
  assert run_main(["--shapes=tiny", "--rounds=2", "--steps=2", "--nolimit", f"--out={out}",
                   "--settings=model.scan_unroll=1", "--variant=noremat:model.remat_policy=none"],
                  sleep=lambda s: None) == 0
  # Three processes a round: ours, the peer, ours without remat (the peer does not run twice).
  assert made[:3] == [("andrea_jax", "model.scan_unroll=1"), ("peer", "model.scan_unroll=1"),
                      ("andrea_jax", "model.scan_unroll=1,model.remat_policy=none")]
  rows = {r["arm"]: r for r in json.loads(out.read_text())["shapes"]}
  assert rows["system+noremat"]["peer"]["shared_with"] == "system"
  assert rows["system+noremat"]["ratio"] == pytest.approx(1.25)
  assert rows["system"]["ratio"] == pytest.approx(1.0)
  text = (tmp_path / "v_tables.md").read_text()
  assert "| tiny | system+noremat | 16 x 128 |" in text
  assert ("our step in system+noremat against system, paired by round (above 1: faster): "
          "1.25x [1.25, 1.25]") in text
  with pytest.raises(app.UsageError, match="'a:x=2'"):
    run_main(["--shapes=tiny", "--variant=a:x=1", "--variant=a:x=2"])


@pytest.mark.parametrize("measure", ["step", "parts"])
def test_ctrl_c_stops_the_run_in_one_line_and_writes_nothing(monkeypatch, tmp_path, capsys, measure):
  def interrupted(*a, **k):
    raise KeyboardInterrupt
  monkeypatch.setattr(sides, "run_child", interrupted)
  out = tmp_path / "x.json"
  assert run_main(["--shapes=tiny", "--nolimit", f"--measure={measure}", f"--out={out}"],
                  sleep=lambda s: None) == 130
  assert capsys.readouterr().err.startswith("interrupted: nothing written") and not out.exists()


def test_norm_variants_add_an_arm_per_norm_switch_beside_pre_ln():
  fv = step.flag_values(["--shapes=tiny", "--norm_variants", "--nolimit"])
  step.check(fv)  # every variant's config builds
  settings = rounds.variant_settings(step.variants(fv))
  assert list(settings) == ["", *step.NORM_VARIANTS]
  cfgs = {n: shapes.model_config(shapes.load_config("tiny", s), 1) for n, s in settings.items()}
  assert (cfgs[""].norm, cfgs[""].norm_type, cfgs[""].norm_depth_scaling) == ("pre", "layernorm", False)
  assert {cfgs[n].norm for n in ("post", "peri", "reordered", "deepnorm", "mix")} == \
      {"post", "peri", "reordered", "deepnorm", "mix"}
  assert cfgs["rmsnorm"].norm_type == "rmsnorm" and cfgs["lns"].norm_depth_scaling
  with pytest.raises(app.UsageError, match="--norm_variants arms the whole step"):
    step.check(step.flag_values(["--shapes=tiny", "--norm_variants", "--processes=one"]))


def test_the_results_name_the_instruction_set_class_they_ran_on(monkeypatch, tmp_path):
  # docs/performance.md quotes the step ratio per class: a result must say which one it measured.
  from benchmarks import results, timing  # pylint: disable=import-outside-toplevel
  cpuinfo = tmp_path / "cpuinfo"
  real_open = open

  def fake(path, *a, **kw):
    return real_open(cpuinfo if path == "/proc/cpuinfo" else path, *a, **kw)

  monkeypatch.setattr("builtins.open", fake)
  for flags, want in (("fpu sse2 avx avx2 fma", "AVX2"), ("avx2 avx512f avx512bw", "AVX-512")):
    cpuinfo.write_text(f"model name\t: Some CPU\nflags\t\t: {flags}\n")
    assert timing.cpu_class() == want
    record = results.run_record("benchmarks.step", [], 0.5)
    assert record["cpu_class"] == want and f"2 cores, {want})" in results.header_lines(
        {**record, "cores": 2})[0]
