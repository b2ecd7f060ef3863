"""The proxies report on a synthetic sweep directory: REPORT.md, results.json, the figures."""

import json
import math
import os
import subprocess
import sys

import pytest

from research import cells
from experiments import report
from research import identity
from experiments.studies.proxies import rules as pv

# Its tests share module-scoped fixtures: on one xdist worker they are computed once
# (pyproject.toml: --dist=loadgroup).
pytestmark = pytest.mark.xdist_group("test_proxy_report")

RATES = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
WIDTHS = (32, 64, 128, 256)
VOCAB, BLOCK = 512, 64


def final_loss(arm, width, lr, seed):
  """Bowls in log(rate): sp's optimum halves per doubling of width, muP's stays; qk-norm and
  z-loss flatter than pre, whose curvature grows with width; None = diverged."""
  k = math.log2(width / 32)
  lr_best = 1e-2 if arm == "pre+mup" else 3e-2 * 0.5 ** k
  c = {"pre": 0.2 + 0.1 * k, "post": 0.3 + 0.1 * k}.get(arm, 0.2)
  loss = 4.6 - 0.1 * k + c * math.log10(lr / lr_best) ** 2 + 0.002 * ((seed * 7 + len(arm)) % 3)
  return None if (arm == "post" and lr == 3e-1) else loss


def write_cell(root, arm, width, lr, seed):
  group = f"{arm.replace('+', '-')}-d{width}"
  d = root / group / f"lr{lr:g}-s{seed}"
  d.mkdir(parents=True)
  final = final_loss(arm, width, lr, seed)
  overrides = {"model.d_model": width, "model.vocab_size": VOCAB, "model.block_size": BLOCK,
               "train.learning_rate": lr, "train.seed": seed, "train.steps": 10}
  if arm == "pre+mup":
    overrides |= {"model.parametrization": "mup", "model.base_width": 32}
  (d / "cell.json").write_text(json.dumps({"name": f"{group}-{lr:g}-{seed}", "arms": [arm],
                                           "seed": seed, "group": group, "overrides": overrides}))
  (d / "summary.json").write_text(json.dumps({
      "status": "diverged" if final is None else "completed", "steps": 10,
      "final_val_loss": final, "initial_val_loss": math.log(VOCAB), "unigram_val_loss": 5.9,
      "n_params": 12 * 2 * width ** 2 + (VOCAB + BLOCK) * width, "wall_time_s": 2.0}))
  logit = 5.0 * (1 + 20 * lr) * width / 32 if arm != "pre+qk" else 4.0
  probe = lambda step, x: json.dumps({"step": step, "loss": 6.2, "residual_norm": [1.0, 1.0, 1.0],
                                      "attn_logit_max": [x, 0.5 * x], "log_z": 3.0})
  (d / "diagnostics.jsonl").write_text(probe(0, 1.0) + "\n" + probe(10, logit) + "\n")


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("proxies-cpu")
  for arm in pv.ARMS:
    for width in WIDTHS:
      for lr in RATES:
        for seed in range(3):
          write_cell(root, arm, width, lr, seed)
  (root / "sweep.json").write_text(json.dumps({
      "name": "proxies", "scale": "cpu", "base_config": "tiny", "description": "A synthetic ladder.",
      "rules": identity.rules_version("proxies"), "cells": []}))
  return root


def test_report_of_a_synthetic_ladder(sweep_dir, tmp_path, capsys):
  out, packed = tmp_path / "out", tmp_path / "results"
  path = report.write_report(str(sweep_dir), str(out), pack=str(packed))  # dispatched on sweep.json's name
  text = open(path).read()
  assert "A synthetic ladder." in text and "360 models, 12 diverged" in text
  assert "judged with the rules fixed before the run" in text and "unchanged since" in text
  for claim in ("qk-LayerNorm lowers", "z-loss lowers", "without qk-norm, the learning-rate sensitivity grows", "under muP the optimal"):
    assert f"### {claim}" in text
  assert "**Reproduced.** |slope sp| - |slope muP|" in text
  assert "**Reproduced.** Sensitivity pre - pre+qk at d256" in text
  assert "## Predicted learning rates for andrea120m" in text
  assert "- standard parametrisation, arm `pre`: 0.0013 (95 % t interval over seeds" in text
  assert "`model.base_width=32`" in text
  assert "| pre | 256 | " in text and "| post | 32 | " in text and "| 3/18 | yes |" in text
  for png in ("lr_curves.png", "sensitivity.png", "attn_logits.png", "optimum_vs_width.png"):
    assert (out / png).stat().st_size > 1000 and f"![{png}]({png})" in text
  printed = capsys.readouterr().out
  assert "- standard parametrisation, arm `pre`: 0.0013" in printed and "- muP" in printed
  results = json.load(open(packed / "results.json"))
  assert len(results["table"]) == 20 and len(results["verdicts"]) == 4
  sp = next(p for p in results["predictions"] if p["arm"] == "pre")
  assert sp["lr"] == pytest.approx(3e-2 * 32 / 768, rel=0.05) and sp["seeds"] == 3
  row = next(t for t in results["table"] if t["arm"] == "pre" and t["width"] == 256)
  assert row["attn_logit_max"] == pytest.approx(5.0 * 7 * 8) and row["non_embedding_params"] == 24 * 256 ** 2
  assert (packed / "sweep.json").exists() and len((packed / "cells.jsonl").read_text().splitlines()) == 360


def test_report_says_when_the_rules_changed_since_the_run(sweep_dir, tmp_path):
  index = json.loads((sweep_dir / "sweep.json").read_text())
  changed = tmp_path / "changed"
  cells.pack(str(sweep_dir), str(changed))
  (changed / "sweep.json").write_text(json.dumps({**index, "rules": {
      "sha256": "0" * 16, "commit": "abc123", "uncommitted_changes": False}}))
  text = open(report.write_report(str(changed))).read()
  assert "re-judged with rules changed since the run" in text
  assert "commit abc123 is not in this repository's history" in text


def test_the_command_line_reaches_the_proxies_report(sweep_dir, tmp_path):
  # python -m experiments.report dispatches on sweep.json's name to the proxies study's page.
  done = subprocess.run([sys.executable, "-m", "experiments.report", f"--sweep_dir={sweep_dir}",
                         f"--out={tmp_path}"], capture_output=True, text=True, timeout=300,
                        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert done.returncode == 0, done.stderr[-2000:]
  assert "- standard parametrisation, arm `pre`: 0.0013" in done.stdout
  assert "## Predicted learning rates for andrea120m" in (tmp_path / "REPORT.md").read_text()
