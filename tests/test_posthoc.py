"""Post-hoc readings (research/posthoc.py): the divergence recount, and the committed reports' post-hoc sections against their committed cells."""

import os
import shutil

import pytest

from research import cells as cells_lib
from research import posthoc
from research import report as reporting

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cell(final, initial=9.0, status="completed"):
  return {"status": status, "final_val_loss": final, "initial_val_loss": initial, "overrides": {}}


def test_a_model_that_ends_above_its_initial_loss_diverged():
  assert cells_lib.diverged(cell(15.5))  # completed, 6.5 nats above where it started
  assert not cells_lib.diverged(cell(5.8))  # blew up, came back below its start: not diverged
  assert cells_lib.diverged(cell(None, status="diverged"))  # the guard stopped it
  assert reporting.diverged_text([cell(15.5), cell(5.8), cell(None, status="diverged")]) == (
      "3 models, 2 diverged (1 completed with a final loss above their loss at initialisation; the "
      "divergence guard stopped 1).")
  assert reporting.diverged_text([cell(5.8), cell(None, status="diverged")]) == "2 models, 1 diverged."


@pytest.fixture(scope="module", params=["mutransfer", "zloss", "zloss_probe", "norm_mlp_confirm"])
def committed(request):
  """``(study, readings, REPORT.md)`` of a committed study, the readings recomputed from its cells."""
  name = request.param
  _, cells, _ = cells_lib.load(os.path.join(ROOT, "results", f"{name}-cpu"))
  readings = posthoc.read(name, cells)
  with open(os.path.join(ROOT, "docs", "studies", f"{name}-cpu", "REPORT.md"), encoding="utf-8") as f:
    return name, readings, f.read()


def test_the_committed_page_prints_what_its_cells_give(committed):
  name, readings, text = committed
  assert readings, f"{name} has no post-hoc readings"
  # The report wraps long prose lines (reporting.wrapped): compared with whitespace and quote
  # continuations folded.
  flat = lambda t: " ".join(t.split()).replace("> ", "")
  section = "\n".join(posthoc.section_lines(readings))
  assert flat(section) in flat(text), f"docs/studies/{name}-cpu/REPORT.md is stale: regenerate it (docs/study.md)"
  # Each pointer sits under the verdict (or section) it qualifies, before the next heading.
  for key, notes in posthoc.pointers(readings).items():
    # A claim's heading may add the threshold its title omits (research/guards.py's title).
    heading = f"### {key}" if f"### {key}\n" in text or f"### {key} (" in text else f"## {key}\n"
    start = text.index("\n", text.index(heading)) + 1
    end = text.index("\n#", start)
    assert all(flat(n) in flat(text[start:end]) for n in notes), (name, key)
  assert text.index(f"## {posthoc.TITLE}") > text.index("## Verdicts")


def test_the_referee_figures(committed):
  name, readings, _ = committed
  r = {x.title: x.results for x in readings}
  if name == "mutransfer":
    gaps = r["The sign of muP - sp at each width"]
    assert [round(gaps["128"][k], 3) for k in ("diff", "lo", "hi")] == [0.016, 0.007, 0.026]
    assert [round(gaps["256"][k], 3) for k in ("diff", "lo", "hi")] == [0.045, 0.029, 0.062]
    assert r["What the margin decides"] == {"0.08": "Reproduced", "0.05": "Inconclusive"}
    assert r["The optimum where the basin is flat"]["pre+mup, d_model 256"]["flat"] == [0.0052, 0.01]
    assert (0.0052, 0.00548, 2, 1) in r["Near-duplicate rates in the grid"]["d_model 256"]
    assert [round(x, 2) for x in r["The extrapolated line's held-out check"]["ratio"]] == [0.75, 0.61, 0.94]
  elif name == "norm_mlp_confirm":
    near = r["Sensitivity over the rates near the optima"]["0.001..0.03"]
    assert [round(near[k], 2) for k in ("diff", "lo", "hi")] == [0.27, 0.17, 0.38]
    post = r["The optimum where the basin is flat"]["norm:post/long"]
    assert post["between"] == (0.0003, 0.003) and not post["resolved"] and post["same_point"]
  else:  # zloss, zloss_probe: every model at 0.3 rose above its initial loss; none learns
    at = [f for k, f in next(iter(r.values())).items() if k.endswith("rate 0.3")]
    assert all(f["rose"] == f["models"] and f["learn"] == 0 for f in at)
    assert sum(f["diverged"] for f in at) == (30 if name == "zloss" else 4)


def test_the_report_renders_the_readings_after_the_verdicts(tmp_path):
  # The z-loss study's committed page, regenerated from a copy of its data: the same from
  # "Read from" on (the recounted model line, the pointers, the post-hoc section).
  data = shutil.copytree(os.path.join(ROOT, "results", "zloss-cpu"), tmp_path / "data")
  text = open(reporting.write_report("zloss", str(data), str(tmp_path / "out")), encoding="utf-8").read()
  with open(os.path.join(ROOT, "docs", "studies", "zloss-cpu", "REPORT.md"), encoding="utf-8") as f:
    committed = f.read()
  assert "60 models, 30 diverged (30 completed with a final loss above" in text
  assert text[text.index("Read from"):] == committed[committed.index("Read from"):]
