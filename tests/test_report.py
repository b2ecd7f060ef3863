"""The per-arm curve maths on synthetic results, and the report on partial files (the norm x MLP study's claims on synthetic results: tests/test_norm_mlp.py)."""

import json
import math
import os

import numpy as np
import pytest

from research import curves

from synthetic_runs import FLAT, LN_V, UNIGRAM, arm, bowl  # pylint: disable=unused-import


# ----------------------------------------------------------------------------- one arm


def test_optimum_is_the_vertex_of_a_parabola_in_log_rate():
  curve = {lr: (math.log(lr) - math.log(2e-3)) ** 2 for lr in (1e-3, 3e-3, 1e-2)}
  opt = curves.fit_optimum(curve)
  assert opt.bracketed and opt.grid_lr == 3e-3 and opt.lr == pytest.approx(2e-3, rel=1e-6)
  assert opt.loss == pytest.approx(0.0, abs=1e-9)
  edge = curves.fit_optimum({1e-3: 4.0, 3e-3: 4.5, 1e-2: 5.0})
  assert not edge.bracketed and edge.lr == 1e-3
  assert curves.fit_optimum({}) is None


def test_one_unstable_seed_moves_only_its_own_optimum():
  # Seeds 0 and 1 best near 1e-2; seed 2 blows up there (5.10): its optimum moves, theirs do not.
  runs = []
  for seed, at_hi in enumerate((4.56, 4.65, 5.10)):
    curve = {3e-4: 5.9, 1e-3: 5.1, 3e-3: 4.76, 1e-2: at_hi, 3e-2: 5.5}
    runs += [curves.Run(("a",), lr, seed, l, LN_V, unigram=UNIGRAM) for lr, l in curve.items()]
  opts = curves.optima(runs)
  assert opts[0].grid_lr == opts[1].grid_lr == 1e-2 and opts[2].grid_lr == 3e-3
  s = curves.summary(runs)
  assert 3e-3 < s["optimum_lr"] < 1e-2 and s["bracketed_seeds"] == 3 and s["learns"]
  lo, hi = s["optimum_lr_interval"]
  assert lo < 3e-3 and hi > 1e-2  # the seeds disagree: a wide interval, not a point


def test_refine_brackets_each_optimum_within_2x_and_extends_an_edge():
  base = (3e-4, 1e-3, 3e-3, 1e-2)
  inside = arm("a", bowl(4.7, 3e-3, rates=base))
  assert curves.refine_rates(inside) == [0.00173, 0.00548]
  edge = arm("a", bowl(4.7, 2e-2, rates=base))
  assert curves.refine_rates(edge) == [0.00548, 0.0333]
  # Once bracketed within 2x, nothing more.
  done = arm("a", bowl(4.7, 3e-3, rates=sorted(base + (0.00173, 0.00548))))
  assert curves.refine_rates(done) == []
  # An arm on the plateau at every rate has no optimum to bracket.
  assert curves.refine_rates(arm("a", {lr: FLAT[lr] for lr in base})) == []


def test_sensitivity_is_wortsman_et_al_per_seed_on_the_base_grid():
  runs = arm("a", {1e-4: 5.0, 1e-3: 4.0, 1e-2: 9.0}, seeds=1)  # 9.0 > ln V: clipped to ln V
  expected = np.mean([5.0, 4.0, LN_V]) - 4.0
  assert curves.sensitivity(runs) == pytest.approx({0: expected})
  div = arm("a", {1e-4: 5.0, 1e-3: 4.0, 1e-2: 4.5}, seeds=1, diverged=(1e-2,))
  assert curves.sensitivity(div) == pytest.approx({0: expected})
  # Rates added around the optimum (round 1) do not enter: the grid stays the same for all arms.
  added = [curves.Run(("a",), 2e-3, 0, 3.0, LN_V, round=1)]
  assert curves.sensitivity(runs + added) == pytest.approx({0: expected})
  assert curves.sensitivity(arm("a", {1e-3: 4.0})) == {}


# ----------------------------------------------------------------------------- the report on partial files


def write_cell(root, path, arms, lr, seed, status="completed", final=4.6, diag=True):
  d = root / path
  d.mkdir(parents=True)
  (d / "cell.json").write_text(json.dumps({"name": path, "arms": arms, "seed": seed, "group": "",
                                           "overrides": {"train.learning_rate": lr, "model.norm": "post"}}))
  (d / "summary.json").write_text(json.dumps({
      "status": status, "steps": 10, "diverged_at_step": 4 if status == "diverged" else None,
      "final_val_loss": final if status == "completed" else None, "unigram_val_loss": 6.0,
      "n_params": 1000, "wall_time_s": 1.0}))
  if diag:
    (d / "diagnostics.jsonl").write_text(json.dumps({"step": 0, "loss": 7.7, "grad_attn": [1.0, 1.0],
                                                     "grad_mlp": [1.0, float("nan")],
                                                     "residual_norm": [1.0, 1.0, 1.0]}) + "\n")


def test_report_on_partial_and_diverged_cells(tmp_path):
  from experiments import report
  from research import report as reporting
  write_cell(tmp_path, "a/lr0.001-s0", ["norm:post/none"], 1e-3, 0)
  write_cell(tmp_path, "a/lr0.01-s0", ["norm:post/none"], 1e-2, 0, status="diverged")
  write_cell(tmp_path, "b/lr0.001-s0", ["norm:post/long"], 1e-3, 0, diag=False)
  write_cell(tmp_path, "c/lr0.001-s0", ["swiglu"], 1e-3, 0, status="running")  # unfinished: left out
  path = report.write_report(str(tmp_path), str(tmp_path / "out"))
  text = open(path).read()
  assert "3 models, 1 diverged" in text
  assert "Training time measured: 0 minutes in 3 programs" in text
  assert reporting.measured_time([{"name": "a", "group": "g", "wall_time_s": 600.0},
                                  {"name": "b", "group": "g", "wall_time_s": 600.0},
                                  {"name": "c", "wall_time_s": 300.0}]).startswith(
      "Training time measured: 15 minutes in 2 programs")
  assert "| norm:post/none | — | 0.001 | 4.600 | 0/1 | 1.550 | no | 1/2 |" in text  # 1 of its 2 diverged
  results = json.load(open(tmp_path / "results.json"))  # beside the cells; the report in out
  assert {c["name"] for c in results["cells"]} == {"a/lr0.001-s0", "a/lr0.01-s0", "b/lr0.001-s0"}
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(ValueError, match="holds no cells"):
    report.write_report(str(empty))


def test_the_command_packs_the_cells_and_puts_the_report_apart(tmp_path):
  # python -m experiments.report --pack: the data in one place, REPORT.md and plots in --out.
  import subprocess
  import sys
  sweep, data, docs = tmp_path / "runs" / "sweep", tmp_path / "results" / "s-cpu", tmp_path / "docs" / "s-cpu"
  write_cell(sweep, "a/lr0.001-s0", ["norm:post/none"], 1e-3, 0)
  write_cell(sweep, "a/lr0.01-s0", ["norm:post/none"], 1e-2, 0, status="diverged")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  done = subprocess.run([sys.executable, "-m", "experiments.report", f"--sweep_dir={sweep}", f"--pack={data}",
                         f"--out={docs}"], capture_output=True, text=True, timeout=300, cwd=root)
  assert done.returncode == 0, done.stderr[-2000:]
  assert sorted(os.listdir(data)) == ["cells.jsonl", "results.json"]
  assert "REPORT.md" in os.listdir(docs) and not {"cells.jsonl", "results.json"} & set(os.listdir(docs))
  text = (docs / "REPORT.md").read_text()
  assert f"--sweep_dir={sweep}" not in text  # a sweep directory the repository has not
  assert f"python -m experiments.report --sweep_dir={data} --out={docs}\n" in text  # regenerates it
  assert "Read from the 2 cells of cells.jsonl." in text and "2 models, 1 diverged" in text
  assert [c["name"] for c in json.load(open(data / "results.json"))["cells"]] == ["a/lr0.001-s0", "a/lr0.01-s0"]
  # The regenerate line rebuilds the same REPORT.md, the command that produced the data kept.
  from experiments import report
  os.remove(docs / "REPORT.md")
  assert open(report.write_report(str(data), str(docs))).read() == text


def test_no_parabola_over_a_wide_bracket():
  # A neighbour 1e33 times away (a diverged rate) would fit a parabola far below every point.
  opt = curves.fit_optimum({1e-3: 5.5, 1e-2: 4.6, 1e30: 7.7})
  assert opt.bracketed and opt.lr == 1e-2 and opt.loss == 4.6


def test_a_committed_report_regenerates_byte_for_byte_and_writes_nothing_into_results(tmp_path):
  # The command a committed report prints, pointed at another --out, gives the same REPORT.md
  # and leaves results/ as committed; --pack onto a copy of the data rewrites the same
  # results.json (floats rounded: report.DIGITS).
  import hashlib
  import shutil
  from research import report as reporting
  study = "zloss_drift_long-cpu"
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  data, docs = os.path.join(root, "results", study), os.path.join(root, "docs", "studies", study)
  digest = lambda d: {f: hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest()
                      for f in sorted(os.listdir(d))}
  written = lambda d: {f: os.stat(os.path.join(d, f)).st_mtime_ns for f in sorted(os.listdir(d))}
  stamps = written(data)
  before = digest(data)
  committed = open(os.path.join(docs, "REPORT.md"), encoding="utf-8").read()
  regenerate = f"python -m experiments.report --sweep_dir=results/{study} --out=docs/studies/{study}"
  assert regenerate + "\n" in committed and "runs/sweeps" not in committed
  out = tmp_path / "out"
  cwd = os.getcwd()
  os.chdir(root)  # the printed command runs from the repository's root
  try:
    text = open(reporting.write_report(study.split("-")[0], f"results/{study}", str(out))).read()
  finally:
    os.chdir(cwd)
  assert text == committed.replace(f"--out=docs/studies/{study}", f"--out={out}")
  assert digest(data) == before and written(data) == stamps  # nothing written into results/
  copy = tmp_path / study
  shutil.copytree(data, copy)
  reporting.write_report(study.split("-")[0], str(copy), str(tmp_path / "out2"), pack=str(copy))
  assert digest(copy) == before  # the committed results.json is what the code writes


def test_every_committed_report_opens_with_its_question_abstract_and_claims_table():
  # A reader's two minutes: the question as the title, the design and the answer, one table of
  # the claims, the main figure and the limitations before the appendix; no prose line over
  # 300 characters; names as written in code.
  from research import registry
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  for study in sorted(os.listdir(os.path.join(root, "docs", "studies"))):
    if not os.path.isdir(os.path.join(root, "docs", "studies", study)):
      continue  # a line of work's narrative (docs/studies/<line>.md) beside the reports
    text = open(os.path.join(root, "docs", "studies", study, "REPORT.md"), encoding="utf-8").read()
    lines = text.splitlines()
    name = study.rsplit("-", 1)[0]
    from research import report  # pylint: disable=import-outside-toplevel
    question = registry.study(name).question
    assert lines[0] == f"# {report.title_of(question)}" and (lines[0] == f"# {question}") == (len(question) <= 298), study
    assert question in " ".join(lines), study  # a question cut in the title is whole in the appendix
    lines = [l for l in lines if not l.startswith("> **Superseded.**") and not l.startswith("> ")]  # a superseded page's note
    lines = lines[:1] + [l for i, l in enumerate(lines[1:], 1) if l or lines[i - 1]]  # the note's blank line
    assert lines[2].startswith(f"Study `{name}` at scale ") and ("exploratory" in lines[2] or "confirmatory" in lines[2])
    assert text.index("| claim (its threshold) | verdict | estimate [95 % CI] |") < text.index("## Limitations") \
        < text.index("## Appendix"), study
    assert not [l for l in lines if len(l) > 300 and not l.startswith("|")], study
    assert "model.d model" not in text and "train.batch size" not in text, study


def test_a_wrapped_line_never_opens_a_list_heading_or_quote():
  from research import report as reporting
  lines = [" ".join([w * k, m] * 200) for k in range(1, 9) for w, m in (("a", "-"), ("b", "#"), ("c", "1."))]
  out = reporting.wrapped([*lines, "| a table row " + "x " * 200, "> " + lines[0]])  # every other word a marker
  assert all(len(l) <= 300 for l in out if not l.startswith("|")) and len(out) > 3
  for l in out[1:]:
    assert l.startswith(("|", "> ")) or l.split(" ", 1)[0] not in ("-", "#", ">", "1."), l


ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKS_WITH_BEFORE = sorted(d for d in os.listdir(os.path.join(ROOT_DIR, "results"))
                           if os.path.exists(os.path.join(ROOT_DIR, "results", d, "verdicts_before.json")))


@pytest.mark.parametrize("pack", [p for p in PACKS_WITH_BEFORE if not p.endswith("-smoke")])
def test_re_judging_every_committed_pack_gives_the_verdicts_recorded_before(pack):
  """Each committed pack records the verdicts its rules gave (verdicts_before.json): re-judging
  its cells with the rules now gives them, to the printed digits, so a re-expression of the
  claim kinds that keeps the verdicts says so, and one that does not is caught here."""
  from research import cells as cells_lib  # pylint: disable=import-outside-toplevel
  from research import registry  # pylint: disable=import-outside-toplevel
  from research import report  # pylint: disable=import-outside-toplevel
  index, cells, _ = cells_lib.load(os.path.join(ROOT_DIR, "results", pack))
  before = json.load(open(os.path.join(ROOT_DIR, "results", pack, report.BEFORE)))
  verdicts = registry.study(registry.study_of(index)).judge(cells, robust=False)
  assert [report._figures(v) for v in verdicts] == [report._figures(v) for v in before["verdicts"]]


def test_packing_a_study_records_its_verdicts_once(tmp_path):
  from research import claims  # pylint: disable=import-outside-toplevel
  from research import report  # pylint: disable=import-outside-toplevel
  from research import stats  # pylint: disable=import-outside-toplevel
  v = claims.Verdict("c", "Reproduced", [], "rule", stats.one_sample([0.1, 0.2, 0.3]))
  path = report.record_verdicts("muon", {"rules": {"commit": "abc"}}, [v], str(tmp_path))
  body = json.load(open(path))
  assert body["commit"] == "abc" and body["rules"] == "experiments/studies/muon.py"
  assert report._figures(body["verdicts"][0]) == ("c", "Reproduced", (0.2, round(v.effect.lo, 3), round(v.effect.hi, 3)))
  # A record already there is the one to keep: a later pack does not overwrite it.
  assert report.record_verdicts("muon", {"rules": {"commit": "def"}}, [], str(tmp_path)) is None
  assert json.load(open(path))["commit"] == "abc"


def test_the_abstract_answers_with_the_decided_claims_and_their_intervals():
  """The abstract's answer is the claims the data decided, each with its estimate and interval
  (reproduced first, at most three), then what was left undecided; the committed norms report
  opens so."""
  from research import claims  # pylint: disable=import-outside-toplevel
  from research import report  # pylint: disable=import-outside-toplevel
  from research import stats  # pylint: disable=import-outside-toplevel
  e = stats.one_sample([0.1, 0.12, 0.11])
  v = lambda c, word: claims.Verdict(c, word, [], "", e, unit="nats")
  got = report.answer([v("a", "Inconclusive"), v("b", "Not reproduced"), v("c", "Reproduced")], {"b": "b (margin 1)"})
  assert got.startswith("**Answer:** c: reproduced, +0.110 nats [") and "; b (margin 1): not reproduced, +0.110" in got
  assert got.endswith("; also 1 inconclusive (the table).")
  assert report.answer([v("a", "Inconclusive")], {}) == "**Answer:** 1 inconclusive (the table)."
  with pytest.raises(ValueError, match="has an effect but no unit"):  # no silent default unit
    report.answer([claims.Verdict("a", "Reproduced", [], "", e)], {})
  found = claims.Verdict("where", "Found", ["x, rate 0.3: moved.", "Found: x from rate 0.3."], "")
  assert report.answer([found], {}) == "**Answer:** where: Found: x from rate 0.3 (the table)."
  text = open(os.path.join(ROOT_DIR, "docs", "studies", "norms-cpu", "REPORT.md"), encoding="utf-8").read()
  head = " ".join(text.splitlines()[:12])  # under the superseded note's lines
  assert "less sensitive to the learning rate than pre-LN (margin 0.05): reproduced, -0.252 nats [-0.277, -0.227]" in head
  assert "also 4 inconclusive, 1 not powered (the table)." in head


def test_no_table_cell_of_a_committed_report_holds_a_bare_pipe():
  """A ``|`` inside a cell (``|log(x)|``) splits a markdown table's row: every row of every
  committed report has its header's number of cells."""
  import glob  # pylint: disable=import-outside-toplevel
  for path in glob.glob(os.path.join(ROOT_DIR, "docs", "studies", "*", "REPORT.md")):
    cells = None
    for line in open(path, encoding="utf-8").read().splitlines():
      if not line.startswith("|"):
        cells = None
        continue
      n = line.replace("\\|", "").count("|")
      cells = n if cells is None else cells
      assert n == cells, f"{path}: {line[:120]}"


ESTIMATE = r"([+-]\d+\.\d+) ([^\[\]]+?) (?:\[|\(n = \d+: no interval\))"  # a number, its unit, its interval


def unit_errors(text: str, study) -> list[str]:
  """Where a committed report prints a claim's estimate in a unit other than its claim's ``unit()``: the
  claims table's estimate, the head of the claim's verdict, and a contrast's per-arm quantity."""
  import re  # pylint: disable=import-outside-toplevel
  from research import guards  # pylint: disable=import-outside-toplevel
  from research import kinds  # pylint: disable=import-outside-toplevel
  from research.kind_base import QUANTITIES  # pylint: disable=import-outside-toplevel
  rows = {}
  table = "| claim (its threshold) | verdict | estimate [95 % CI] |\n|---|---|---|\n"
  for line in text.split(table, 1)[1].splitlines():
    if not line.startswith("|"):
      break
    title, _, estimate = line[2:-2].rsplit(" | ", 2)
    rows[title] = estimate
  errors = []
  for c in study.claims:
    title, unit = guards.title(c), c.unit()
    found = re.match(ESTIMATE, rows[title])
    if not found:  # no effect ("—", "no data"): nothing printed in a unit
      continue
    errors += [f"{title}: table prints {found[2]!r}, its unit is {unit!r}"] if found[2] != unit else []
    verdict = " ".join(text.split(f"\n### {title}\n\n", 1)[1].split("\n\nRule: ", 1)[0].splitlines())
    head = re.search(": " + ESTIMATE, verdict)
    errors += [f"{title}: verdict prints {head[2]!r}, its unit is {unit!r}"] if head[2] != unit else []
    if isinstance(c, kinds.Contrast) and isinstance(c.quantity, str):
      errors += [f"{title}: {c.quantity} in {u!r}" for u in re.findall(f"; {c.quantity} {ESTIMATE}", verdict)
                 if u[1] != QUANTITIES[c.quantity].unit]
  return errors


def test_every_committed_estimate_carries_its_quantitys_unit():
  """Issues 69 and 71: an estimate is printed in its quantity's unit (research/kind_base.py: nats for a
  loss, ln(rate), ln(ratio), per doubling), never "nats" beside a log ratio or a log rate. Each committed
  report's claims table, each verdict's head and each contrast's per-arm quantity carry the claim's unit;
  the norms page with its log ratio printed in nats (as it was committed before) is caught."""
  from research import registry  # pylint: disable=import-outside-toplevel
  pages = sorted(d for d in os.listdir(os.path.join(ROOT_DIR, "docs", "studies"))
                 if os.path.isdir(os.path.join(ROOT_DIR, "docs", "studies", d)))
  assert len(pages) >= 17
  for page in pages:
    text = open(os.path.join(ROOT_DIR, "docs", "studies", page, "REPORT.md"), encoding="utf-8").read()
    assert unit_errors(text, registry.study(page.rsplit("-", 1)[0])) == [], page
  norms = open(os.path.join(ROOT_DIR, "docs", "studies", "norms-cpu", "REPORT.md"), encoding="utf-8").read()
  assert "+0.875 ln(ratio) [" in norms
  old = unit_errors(norms.replace(" ln(ratio) [", " nats ["), registry.study("norms"))
  assert len(old) == 2 and all("'nats', its unit is 'ln(ratio)'" in e for e in old), old
