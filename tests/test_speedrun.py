"""benchmarks/speedrun.py: the reading (tokens and seconds to a target, interpolated between
evaluations), the recipes' pieces at a toy shape (ours through the engine, the peer on the same
batches and schedule), and the table and plot it writes."""

import json
import math
import os

import numpy as np
import pytest
from absl import app

from andrea_jax import metrics as metrics_lib
from benchmarks import speedrun

# The quick mode shrunk further: one small layer, a slice of the corpus, 12 steps.
TOY = ("n_layer=1,d_model=32,n_head=2,block_size=32,vocab_size=321,data.max_docs=40,"
       "train.steps=12,train.warmup_steps=2,train.eval_every=4,train.log_every=1,"
       "train.learning_rate=1e-2,checkpoint.every=12")


def curve(losses, tokens=None, seconds=None):
  tokens = tokens or [100 * i for i in range(len(losses))]
  seconds = seconds or [10.0 * i for i in range(len(losses))]
  return [{"tokens": t, "seconds": s, "val_loss": l} for t, s, l in zip(tokens, seconds, losses)]


def test_tokens_and_seconds_to_target_are_interpolated_between_evaluations():
  c = curve([6.0, 5.0, 4.0, 3.5], seconds=[0.0, 10.0, 30.0, 40.0])
  # 4.5 lies half way from 5.0 (100 tokens, 10 s) to 4.0 (200 tokens, 30 s).
  assert speedrun.to_target(c, 4.5) == {"tokens": 150.0, "seconds": 20.0}
  assert speedrun.to_target(c, 4.75) == {"tokens": 125.0, "seconds": 15.0}
  assert speedrun.to_target(c, 4.0) == {"tokens": 200.0, "seconds": 30.0}  # at an evaluation
  assert speedrun.to_target(c, 6.5) == {"tokens": 0.0, "seconds": 0.0}  # there from the start
  assert speedrun.to_target(c, 3.0) is None  # never
  # The first crossing counts, not a later one; a non-finite evaluation is passed over.
  assert speedrun.to_target(curve([6.0, 4.0, 5.0, 3.0]), 4.5)["tokens"] == 75.0
  assert speedrun.to_target(curve([6.0, float("nan"), 4.0]), 4.5)["tokens"] == 150.0
  assert speedrun.to_target(curve([6.0, float("nan")]), 4.5) is None


def test_bad_flags_are_one_line_before_anything_runs(data_cache):
  fv = speedrun.flag_values(["--recipes=nanogpt,nope"])
  with pytest.raises(app.UsageError, match="--recipes=nanogpt,nope: expected some of"):
    speedrun.check(fv)
  with pytest.raises(app.UsageError, match="--target=-1.0: expected a validation loss above 0"):
    speedrun.check(speedrun.flag_values(["--target=-1"]))
  # The peer mirrors GPT-2 under AdamW: a setting it cannot mirror is named, with the fix.
  fv = speedrun.flag_values(["--quick", "--nanogpt=position=rope", f"--cache_dir={data_cache}"])
  with pytest.raises(app.UsageError, match=r"cannot mirror model.position='rope': leave these out"):
    speedrun.check(fv)


def test_the_pieces_run_and_write_their_table_and_plot(data_cache, tmp_path, monkeypatch):
  """The command's run at a toy shape with the children in this process (ours through the
  engine, the peer through peer.py): the same batches and schedule on both sides, the reading,
  the summary beside the peer, and the JSON, table and plot written."""
  out = tmp_path / "bench" / "speedrun.json"
  fv = speedrun.flag_values(["--quick", f"--settings={TOY}", f"--cache_dir={data_cache}",
                             "--recipes=nanogpt,peer", "--rounds=2", "--target=5.6",
                             f"--out={out}", "--allocator=system"])
  configs = speedrun.check(fv)
  plans = {}

  def in_process(name, plan_path, workdir, preload):
    assert preload == ""  # --allocator=system
    if name in plans:  # round 2: the same curve, on a machine 1.5x slower (one compile a side)
      return {**plans[name], "curve": [{**p, "seconds": 1.5 * p["seconds"]}
                                       for p in plans[name]["curve"]]}
    with open(plan_path, encoding="utf-8") as f:
      plans["plan"] = json.load(f)
    if name == "peer":
      plans[name] = {**speedrun.peer_curve(configs["peer"], plans["plan"]), "process_s": 1.0}
    else:
      plans[name] = {**speedrun.ours_curve(configs[name], workdir), "process_s": 2.0}
      plans["ours_lr"] = [r["lr"] for r in metrics_lib.read_metrics(workdir) if "lr" in r]
    return plans[name]

  runs = []
  monkeypatch.setattr(speedrun, "run_child", lambda *a: runs.append(a[0]) or in_process(*a))
  results = speedrun.measure(fv, configs, sleep=lambda s: None)
  assert runs == ["nanogpt", "peer", "peer", "nanogpt"]  # the order alternates by round
  # The peer steps at our schedule's rate at every update.
  np.testing.assert_allclose(plans["plan"]["lrs"], plans["ours_lr"], rtol=1e-6)
  for name in ("nanogpt", "peer"):
    c = results["per_round"][0][name]["curve"]
    assert [p["step"] for p in c] == [0, 4, 8, 12]
    assert [p["tokens"] for p in c] == [0, 4 * 256, 8 * 256, 12 * 256]  # 8 sequences of 32
    assert c[0]["seconds"] == 0 and all(a["seconds"] < b["seconds"] for a, b in zip(c, c[1:]))
    # Both start from the uniform guess over 321 tokens and learn on the same stream.
    assert abs(c[0]["val_loss"] - math.log(321)) < 0.1 and c[-1]["val_loss"] < c[0]["val_loss"] - 0.3
  s = results["recipes"]
  for name in ("nanogpt", "peer"):
    reached = [speedrun.to_target(r[name]["curve"], 5.6) for r in results["per_round"]]
    assert s[name]["round_seconds"] == [x["seconds"] for x in reached]
  paired = [speedrun.to_target(r["nanogpt"]["curve"], 5.6)["seconds"]
            / speedrun.to_target(r["peer"]["curve"], 5.6)["seconds"] for r in results["per_round"]]
  assert s["nanogpt"]["seconds_ratio"] == pytest.approx(np.median(paired))
  assert s["nanogpt"]["spread"] == pytest.approx(0.5 / 1.25) and not s["nanogpt"]["agrees"]
  written = json.loads(out.read_text())
  assert written["target"] == 5.6 and written["uptime"] and written["cpu"]
  table = (tmp_path / "bench" / "speedrun_tables.md").read_text()
  assert table.startswith("Load: `") and "| nanogpt | nanoGPT's: AdamW" in table
  assert f"{s['nanogpt']['seconds_ratio']:.2f}x [" in table
  assert (tmp_path / "bench" / "speedrun.png").stat().st_size > 10_000


def test_a_recipe_that_never_reaches_the_target_says_so():
  rnd = {"nanogpt": {"curve": curve([6.0, 5.0]), "process_s": 3.0},
         "modern": {"curve": curve([6.0, 4.0]), "process_s": 3.0},
         "peer": {"curve": curve([6.0, 4.5]), "process_s": 3.0}}
  s = speedrun.summarise([rnd], target=4.8)
  # 4.8 lies 0.6 of the way from 6.0 to 4.0 (modern: 6 s, 60 tokens), 0.8 to 4.5 (the peer).
  assert s["modern"]["seconds"] == pytest.approx(6.0) and s["peer"]["seconds"] == pytest.approx(8.0)
  assert s["modern"]["seconds_ratio"] == pytest.approx(0.75)
  assert s["modern"]["tokens_ratio"] == pytest.approx(0.75)
  assert s["nanogpt"]["reached"] == 0 and "seconds" not in s["nanogpt"]
  assert "seconds_ratio" not in s["nanogpt"] and s["nanogpt"]["best_loss"] == 5.0
  text = speedrun.markdown({"recipes": s, "target": 4.8, "rounds": 1, "uptime": "up", "cpu": "c",
                            "cores": 2, "versions": "v", "command": "x", "date": "d",
                            "load_at_start": 0.1})
  assert "| nanogpt | nanoGPT's: AdamW, cosine, learned positions, GELU | not reached | n/a |" in text
  assert "| 6.0 [6.0, 6.0] (0 %) | 60 | 0.75x [0.75, 0.75] | 0.75x | 0.75x | 4.000 | 3 |" in text


def test_the_peer_steps_at_the_rates_it_is_given():
  from andrea_jax import model_config  # pylint: disable=import-outside-toplevel
  from andrea_jax import step as step_lib  # pylint: disable=import-outside-toplevel
  from benchmarks import peer  # pylint: disable=import-outside-toplevel
  cfg = model_config.resolve_auto(model_config.ModelConfig(
      vocab_size=64, block_size=16, d_model=16, n_layer=1, n_head=2), "cpu", verbose=False)
  t = step_lib.TrainConfig(seed=0, steps=6, batch_size=4, grad_accum_steps=1, learning_rate=1e-2,
                           warmup_steps=0, min_lr_ratio=0.1, b1=0.9, b2=0.95, eps=1e-8,
                           weight_decay=0.1, grad_clip=1.0, z_loss=0.0, log_every=1, eval_every=3,
                           eval_batches=1)
  ids = np.random.default_rng(0).integers(0, 8, (8, 4, 17))  # 8 of the 64 ids: learnable
  run = lambda lrs: peer.peer_train(cfg, t, iter(ids), ids[:1], lrs)
  still, moving = run([0.0] * 6), run([1e-2] * 6)
  assert [p["step"] for p in moving] == [0, 3, 6] and [p["tokens"] for p in moving] == [0, 192, 384]
  assert len({p["val_loss"] for p in still}) == 1  # at rate 0 nothing moves, decay included
  assert moving[-1]["val_loss"] < moving[0]["val_loss"] - 0.05
