"""The guards on what a report may say (research/guards.py): each comes out both ways, and the committed studies read as their figures say."""

import os

from research import cells as cells_lib
from research import claims
from research import guards
from research import kinds
from research import registry
from research.claims import Verdict

from test_study import basin, record

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def verdict(claim, word="Not reproduced"):
  return Verdict(claim.claim, word, ["figures."], "rule")


def judged(claim, cells, word="Not reproduced"):
  data = kinds.Data.of(cells, ("model.d_model",), cells_lib.to_run)
  study = type("S", (), {"claims": (claim,)})()
  return guards.apply(study, data, [verdict(claim, word)])


def test_a_claim_whose_models_do_not_learn_cannot_be_judged():
  claim = kinds.Contrast("b is lower than a", terms=kinds.pair("b", "a"), predict="lower")
  wrecked = [record(a, lr, s, 7.0) for a in "ab" for lr in (1e-2, 1e-1) for s in (0, 1)]  # above the unigram
  (v,), changed = judged(claim, wrecked)
  assert v.verdict == kinds.CANNOT_JUDGE and changed == [(claim.claim, "Not reproduced", kinds.CANNOT_JUDGE)]
  assert v.lines[0].startswith("Under the frozen rules: Not reproduced.") and "0 of 8 models" in v.lines[0]
  diverged = [{**c, "status": "diverged", "final_val_loss": None} for c in wrecked]
  assert judged(claim, diverged, "Inconclusive")[0][0].verdict == kinds.CANNOT_JUDGE
  learning = basin("a", (0, 1)) + basin("b", (0, 1), offset=-0.1)  # 4.0 nats against a 5.5 unigram
  (v,), changed = judged(claim, learning)
  assert v.verdict == "Not reproduced" and not changed
  # A claim at one rate reads that rate's models only; one declared not powered is left as it is.
  at_rate = kinds.Contrast("b is lower than a", terms=kinds.pair("b", "a"), predict="lower")
  object.__setattr__(at_rate, "rate", 1e-1)
  mixed = [record(a, 1e-2, s, 4.0) for a in "ab" for s in (0, 1)] + [record(a, 1e-1, s, 7.0) for a in "ab" for s in (0, 1)]
  assert judged(at_rate, mixed)[0][0].verdict == kinds.CANNOT_JUDGE
  assert judged(claim, mixed)[0][0].verdict == "Not reproduced"
  assert judged(claim, wrecked, "Not powered")[0][0].verdict == "Not powered"


def test_a_claims_title_states_its_threshold():
  wide = kinds.Contrast("b is within a margin of a", terms=kinds.pair("b", "a"), predict="same", margin=0.08)
  assert guards.title(wide) == "b is within a margin of a (margin 0.08)"
  stated = kinds.Contrast("b is within 0.08 nats of a", terms=kinds.pair("b", "a"), predict="same", margin=0.08)
  assert guards.title(stated) == stated.claim
  assert guards.title(kinds.Contrast("b is lower than a", terms=kinds.pair("b", "a"), predict="lower")) == "b is lower than a"
  probe = registry.study("norm_mlp").claims[4]  # a probe's growth beyond log 1.5
  assert guards.title(probe) == "pre-LN's residual stream grows with depth (bound 0.405 = log 1.5)"
  assert guards.title(kinds.Contrast("b is 0.005 alike", terms=kinds.pair("b", "a"), predict="same",
                                     margin=0.05)).endswith("(margin 0.05)")


def test_inside_the_interval_is_said_only_of_what_is_inside():
  from experiments.readings.recipe import placement  # pylint: disable=import-outside-toplevel
  # recipe-cpu's muP held-out rung: x1.41 [1.25, 1.59] the prediction 0.00192 [0.000712, 0.00519].
  p = 0.00192
  off = placement(1.41 * p, (1.25 * p, 1.59 * p), 0.000712, 0.00519, p)
  assert "excludes the prediction" in off and not off.endswith("inside the predicted interval.")
  assert "covers the prediction" in placement(p, (0.9 * p, 1.1 * p), 0.000712, 0.00519, p)
  assert "crosses an edge" in placement(0.005, (0.004, 0.006), 0.000712, 0.00519, p)
  assert "outside" in placement(0.01, (0.008, 0.012), 0.000712, 0.00519, p)


def test_confirmatory_only_when_nothing_in_the_headline_saw_the_data():
  design = "**Confirmatory: seeds and rules committed before the run.**"
  assert guards.header(design, (), []) == design
  saw = guards.header(design, ("the estimator was written after a first run",), [])
  assert saw.startswith("**Exploratory.** Declared confirmatory") and "estimator was written after" in saw
  assert "1 verdict changed under guards added after the data" in guards.header(design, (), [("c", "Found", kinds.CANNOT_JUDGE)])
  assert registry.outside("recipe", "SAW_DATA") and not registry.outside("zloss", "SAW_DATA")


def test_the_committed_reports_read_as_their_figures_say():
  def report(study):
    return open(os.path.join(ROOT, "docs", "studies", study, "REPORT.md"), encoding="utf-8").read()
  recipe = report("recipe-cpu")
  assert ", exploratory:" in recipe.splitlines()[2] and "\n**Exploratory.** Declared confirmatory" in recipe
  top = "\n".join(recipe.splitlines()[:10])  # the answer: the literature's rate, the estimate beside it
  assert "`python -m experiments.run --config=andrea120m --config.train.learning_rate=6e-4`" in top
  assert "Table 2.1" in top and "sp 0.0144 [0.000789, 0.261]" in top and "could not fail" in top
  assert "x1.41 [1.25, 1.59] the prediction: inside the predicted interval." not in recipe
  zloss = report("zloss-cpu").split("\n### ")
  at_03 = [s for s in zloss if "(rate 0.3)" in s.splitlines()[0]]
  assert len(at_03) == 2 and all(s.split("\n")[2].startswith("**Cannot be judged.** ") for s in at_03)
  assert all("Under the frozen rules:" in s for s in at_03)
  assert "**Cannot be judged.** Under the frozen rules: Found." in report("zloss_probe-cpu")
  assert "### pre-LN's residual stream grows with depth (bound 0.405 = log 1.5)" in report("norm_mlp-cpu")


def test_the_guard_rejudges_zloss_probes_finding_on_its_cells():
  study = registry.study("zloss_probe")
  index, cells, _ = cells_lib.load(os.path.join(ROOT, "results", "zloss_probe-cpu"))
  frozen = study.judge(cells, robust=False)
  guarded, changed = guards.apply(study, study.data(cells), frozen)
  assert [v.verdict for v in frozen] == ["Found"] and [v.verdict for v in guarded] == [kinds.CANNOT_JUDGE]
  assert changed == [(study.claims[0].claim, "Found", kinds.CANNOT_JUDGE)]
  assert claims.INCONCLUSIVE != kinds.CANNOT_JUDGE
