"""Many models under vmap (andrea_jax/multi.py) against separate runs, divergence, and resume."""

import json
import os

import numpy as np
import pytest

from andrea_jax import errors
from andrea_jax import multi
from andrea_jax import train
from experiments.configs import common, tiny

SMALL = {"model.n_layer": 2, "model.d_model": 32, "model.n_head": 2, "model.block_size": 32,
         "model.vocab_size": 321, "data.max_docs": 40, "train.batch_size": 8, "train.steps": 8,
         "train.warmup_steps": 2, "train.log_every": 1, "train.eval_every": 4,
         "train.eval_batches": 2, "checkpoint.every": 4, "sample.num_samples": 0,
         "diagnostics.enabled": True, "diagnostics.every": 4, "diagnostics.early_steps": 2}
# The last member's rate overflows the parameters within a step or two: it must diverge,
# freeze, and leave the others exactly as they would have trained alone.
MEMBERS = [multi.Member("a", 1e-3, seed=0), multi.Member("b", 3e-3, seed=1),
           multi.Member("c", 1e-2, seed=2), multi.Member("boom", 1e30, seed=3)]


def config(cache, **overrides):
  return common.apply_overrides(tiny.get_config(), {**SMALL, "data.cache_dir": cache, **overrides})


def rows(workdir, key):
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    found = {}
    for line in f:
      r = json.loads(line)
      if key in r:
        found[r["step"]] = r[key]  # the newest row of a step wins, as for the readers
  return [found[s] for s in sorted(found)]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def vmapped(cache, tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("group"))
  return workdir, multi.train_members(config(cache), MEMBERS, workdir, member_axis="vmap")


def test_vmapped_members_match_separate_runs(vmapped, cache, tmp_path):
  workdir, summaries = vmapped
  assert [s["status"] for s in summaries] == ["completed"] * 3 + ["diverged"]
  for m, summary in [(MEMBERS[i], summaries[i]) for i in (0, 2)]:  # two separate runs suffice
    single = str(tmp_path / m.name)
    result = train.train_and_evaluate(
        config(cache, **{"train.learning_rate": m.learning_rate, "train.seed": m.seed}), single)
    member = os.path.join(workdir, m.name)
    np.testing.assert_allclose(rows(member, "loss"), rows(single, "loss"), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(rows(member, "lr"), rows(single, "lr"), rtol=1e-6)
    np.testing.assert_allclose(summary["final_val_loss"], result.summary["final_val_loss"], rtol=2e-5)
    assert summary["unigram_val_loss"] == pytest.approx(result.summary["unigram_val_loss"])
  # Different rates and seeds really do give different trajectories.
  assert len({round(s["final_val_loss"], 4) for s in summaries[:3]}) == 3


def test_members_write_the_files_of_a_run(vmapped):
  workdir, _ = vmapped
  member = os.path.join(workdir, "b")
  summary = json.load(open(os.path.join(member, "summary.json")))
  assert summary["learning_rate"] == 3e-3 and summary["seed"] == 1 and summary["steps"] == 8
  assert summary["initial_val_loss"] == pytest.approx(np.log(321), abs=0.05)
  diag = [json.loads(l) for l in open(os.path.join(member, "diagnostics.jsonl"))]
  assert diag[0]["step"] == 0 and len(diag[0]["grad_mlp"]) == 2 and len(diag[0]["residual_norm"]) == 3
  assert any("update_mlp" in r for r in diag) and diag[-1]["step"] == 8


def test_a_diverged_member_freezes_and_the_others_go_on(vmapped):
  # (That the others train as they would alone is checked against separate runs above.)
  workdir, summaries = vmapped
  boom = summaries[-1]
  assert boom["status"] == "diverged" and boom["steps"] < 8 and boom["final_val_loss"] is None
  assert boom["diverged_at_step"] == boom["steps"] + 1 and boom["exit_code"] == 3
  losses = rows(os.path.join(workdir, "boom"), "loss")
  assert len(losses) == boom["steps"] and np.all(np.isfinite(losses))  # no rows after divergence
  assert all(s["steps"] == 8 for s in summaries[:3])


def test_resume_after_a_crash_continues_identically(vmapped, cache, tmp_path):
  workdir, summaries = vmapped
  crashed = str(tmp_path / "crashed")
  # A crash at step 6 (as by kill -9): the newest checkpoint is step 4, rows 5-6 are written.
  with pytest.raises(multi.Crash):
    multi.train_members(config(cache), MEMBERS, crashed, member_axis="vmap", crash_after=6)
  assert not os.path.exists(os.path.join(crashed, "a", "summary.json"))
  resumed = multi.train_members(config(cache), MEMBERS, crashed, member_axis="vmap")
  assert [s["status"] for s in resumed] == [s["status"] for s in summaries]
  for m, before, after in zip(MEMBERS, summaries, resumed):
    assert after["steps"] == before["steps"]
    if before["final_val_loss"] is not None:
      assert after["final_val_loss"] == pytest.approx(before["final_val_loss"], rel=1e-6)
    np.testing.assert_allclose(rows(os.path.join(crashed, m.name), "loss"),
                               rows(os.path.join(workdir, m.name), "loss"), rtol=1e-6)


def test_lax_map_over_members_matches_vmap(vmapped, cache, tmp_path):
  # The CPU default steps the members in a compiled loop instead of batching them.
  workdir, summaries = vmapped
  mapped = multi.train_members(config(cache, **{"diagnostics.enabled": False}), MEMBERS,
                               str(tmp_path / "map"), member_axis="map")
  assert [s["status"] for s in mapped] == [s["status"] for s in summaries]
  for m, a, b in zip(MEMBERS[:3], summaries, mapped):
    assert b["final_val_loss"] == pytest.approx(a["final_val_loss"], rel=2e-5)
    np.testing.assert_allclose(rows(str(tmp_path / "map" / m.name), "loss"),
                               rows(os.path.join(workdir, m.name), "loss"), rtol=2e-5)
  with pytest.raises(errors.ConfigError, match="member_axis='pmap'"):
    multi.resolve_member_axis("pmap")


def test_a_resume_with_other_members_or_config_is_refused(vmapped, cache):
  workdir, _ = vmapped
  with pytest.raises(errors.CheckpointError, match="other members"):
    multi.train_members(config(cache), MEMBERS[:2], workdir)
  with pytest.raises(errors.CheckpointError, match="train.steps: 8 -> 9"):
    multi.train_members(config(cache, **{"train.steps": 9}), MEMBERS, workdir)
