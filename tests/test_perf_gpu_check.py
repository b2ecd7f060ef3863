"""benchmarks/gpu_check.py: every path it takes on a GPU runs here, at a tiny shape (--smoke)."""

import json

from absl import flags

from benchmarks import gpu_check
from benchmarks import peer as peer_lib
from benchmarks import shapes


def run(*args):
  fv = flags.FlagValues()
  gpu_check.define_flags(fv)
  fv(["gpu_check", *args])
  return gpu_check.main(["gpu_check"], fv)


def test_smoke_runs_every_path_and_reports_each(tmp_path, capsys, monkeypatch):
  # A fixed peak: the MFU path runs without measuring this CPU's.
  monkeypatch.setattr(gpu_check.metrics, "peak_flops", lambda device, dtype: 1e12)
  out = tmp_path / "gpu_check.json"
  assert run("--smoke", f"--out={out}") == 0
  text = capsys.readouterr().out
  results = json.loads(out.read_text())
  assert [(r["attention_impl"], r["remat_policy"]) for r in results["variants"]] == \
      gpu_check.VARIANTS
  for row in results["variants"]:
    assert "error" not in row, row
    assert row["tokens_per_s"] > 0 and row["compile_s"] > 0 and 0 < row["mfu"] < 1
    assert len(row["times"]) == gpu_check.SMOKE["steps"]  # the step benchmark's timing
    # No GPU here: cuDNN's kernel is replaced by the XLA flash kernel, and a note says so.
    assert row["ran_as"] == ("xla_flash" if row["attention_impl"] == "cudnn" else row["attention_impl"])
  assert "xla_flash stands in" in text
  # The stand-in's program is xla_flash's: measured once, reported in both rows.
  by = {(r["attention_impl"], r["remat_policy"]): r for r in results["variants"]}
  for remat in ("none", "dots_saveable"):
    assert by[("cudnn", remat)]["step_s"] == by[("xla_flash", remat)]["step_s"]
  agreement = results["agreement"]
  assert len(agreement["bfloat16"]["losses"]) == gpu_check.SMOKE["agree_steps"]
  assert agreement["max_abs_diff"] < gpu_check.AGREEMENT_NATS and ": agree" in text
  peer = results["peer"]
  if peer_lib.peer_available() is None:
    assert peer["tokens_per_s"] > 0 and peer["backend"] == "eager", peer
    assert len(peer["times"]) == gpu_check.SMOKE["peer_steps"] and peer["warmup_s"] > 0
  else:  # without torch the check still runs, and says why the peer is missing
    assert "not installed" in peer["skipped"]
  assert "peer (torch.compile + SDPA, bf16):" in text


def test_without_a_gpu_the_full_check_refuses_and_says_what_to_do(capsys):
  assert run() == 2
  assert "--smoke" in capsys.readouterr().err


def test_cudnn_is_kept_on_a_gpu():
  assert gpu_check.kernel_for_platform("cudnn", "gpu") == "cudnn"
  assert gpu_check.kernel_for_platform("xla_flash", "cpu") == "xla_flash"


def test_a_variants_settings_give_the_model_the_gpu_check_describes():
  config = shapes.load_config("andrea120m")
  for impl, remat in gpu_check.VARIANTS:
    got = shapes.model_config(shapes.load_config("andrea120m", gpu_check.settings(impl, remat, "bfloat16")),
                              1024, platform="gpu")
    assert got == gpu_check.model_cfg(config, 1024, impl, remat, "bfloat16")
