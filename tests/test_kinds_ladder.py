"""The width ladder's claims (research/kinds.py: Slope of the optimum, flat or moving less,
Alike below a margin at every width, Slope of the loss at a fixed rate, a sensitivity gap (Contrast over widths), Slope of
the sensitivity) and its rate section
(RateAt, experiments/readings/rates.py) on synthetic ladders: each kind reproduced, not reproduced and inconclusive; edge
cases; the framework's per-arm grids and not-powered claims (research/study.py)."""

import dataclasses
import math

import pytest

from experiments.readings import rates as rates_lib
from research import claims as claims_lib
from research import curves
from research import kinds
from research import study as study_lib
from research.kind_base import p_beyond
from research.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from research.curves import Run
from research.study import Arm, Grid, Study

W = "model.d_model"
RATES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
WIDTHS = (32, 64, 128, 256)
LN_V = math.log(512)  # 6.24: the loss at initialisation
UNIGRAM = 5.9
NAN = float("nan")


def bowl(best, lr_best, c=0.3):
  """A loss-vs-rate curve with its minimum ``best`` at ``lr_best`` and curvature ``c``."""
  return {lr: best + c * math.log10(lr / lr_best) ** 2 for lr in RATES}


def jitter(curve, seed, phase=0, amp=0.003):
  """A seed's own small wiggle on every rate."""
  return {lr: l + amp * (((seed * 7 + i * 3 + phase) % 5) - 2) for i, (lr, l) in enumerate(curve.items())}


def ladder(arm, curve_at, seeds=3, widths=WIDTHS):
  """Rows of an arm over the widths: ``curve_at(width, seed)`` -> that seed's curve (nan: diverged)."""
  out = []
  for w in widths:
    for s in range(seeds):
      for lr, loss in jitter(curve_at(w, s), s, len(arm)).items():
        div = not math.isfinite(loss)
        run = Run((arm,), lr, s, NAN if div else loss, LN_V, diverged=div, unigram=UNIGRAM)
        out.append((arm, ((W, w),), run, {"seed": s}))
  return out


def data(*ladders):
  return kinds.Data(tuple(r for lad in ladders for r in lad))


def verdict(claim, d):
  """A claim decided alone (a family of one), as a study with that claim would."""
  (_, v), = claims_lib.decide_family([claim.test(d)])
  return v


def step(w):
  return math.log2(w / WIDTHS[0])


GROWING = lambda w, s: bowl(4.6, 1e-2, 0.2 + 0.1 * step(w))
FLAT_C = lambda w, s: bowl(4.6, 1e-2, 0.2)


def moving(lr0, per_doubling, spread=0.05):
  """Optimum ``lr0 * per_doubling ** doublings``, each seed's a few percent apart."""
  return lambda w, s: bowl(4.6, lr0 * per_doubling ** step(w) * (1 + spread * (s - 1)))


# ----------------------------------------------------------------------------- a sensitivity gap over the widths

QK = kinds.Contrast("qk lowers the sensitivity", family=None, terms=kinds.pair("pre", "pre+qk"), quantity="sensitivity",
                    over=W, holm="first", margin=curves.SENSITIVITY_MARGIN, edge=False)


def test_sensitivity_gap_every_way():
  v = verdict(QK, data(ladder("pre", GROWING), ladder("pre+qk", FLAT_C)))
  assert v.verdict == REPRODUCED and v.effect.lo > 0 and v.effect_name.endswith("256")
  assert verdict(QK, data(ladder("pre", FLAT_C), ladder("pre+qk", GROWING))).verdict == NOT_REPRODUCED
  same = verdict(QK, data(ladder("pre", FLAT_C), ladder("pre+qk", FLAT_C)))
  assert same.verdict == NOT_REPRODUCED and "(same)" in " ".join(same.lines)
  # At d256 the seeds' qk curvatures straddle pre's: a mean gap of zero, a wide spread.
  split = lambda w, s: bowl(4.6, 1e-2, 0.5 + (0.3 * (s - 1) if w == 256 else 0.0))
  v = verdict(QK, data(ladder("pre", lambda w, s: bowl(4.6, 1e-2, 0.5)), ladder("pre+qk", split)))
  assert v.verdict == INCONCLUSIVE and v.effect.lo < 0 < v.effect.hi


def test_a_flat_arm_is_not_insensitive_and_the_largest_width_is_needed():
  plateau = lambda w, s: {lr: UNIGRAM + 0.01 for lr in RATES} if w == 256 else FLAT_C(w, s)
  v = verdict(QK, data(ladder("pre", GROWING), ladder("pre+qk", plateau)))
  assert v.verdict == INCONCLUSIVE and "Does not learn: pre+qk" in " ".join(v.lines)
  narrow = data(ladder("pre", GROWING), ladder("pre+qk", FLAT_C, widths=WIDTHS[:-1]))
  assert verdict(QK, narrow).verdict == INCONCLUSIVE and verdict(QK, narrow).effect is None
  # Without Holm: the largest width both have, alone.
  shared = dataclasses.replace(QK, holm="")
  assert verdict(shared, narrow).verdict == REPRODUCED and verdict(shared, narrow).effect_name.endswith("128")


# ----------------------------------------------------------------------------- a slope of the sensitivity

GROWTH = kinds.Slope("sensitivity grows", arm="pre", axis=W, of="sensitivity", predict="higher",
                     margin=curves.SENSITIVITY_MARGIN, per_span=True, same_first=True, family=None)


def test_sensitivity_slope_every_way():
  assert verdict(GROWTH, data(ladder("pre", GROWING))).verdict == REPRODUCED
  flat = verdict(GROWTH, data(ladder("pre", FLAT_C)))
  assert flat.verdict == NOT_REPRODUCED and flat.effect.p_same < 0.05
  shrinking = lambda w, s: bowl(4.6, 1e-2, 0.5 - 0.1 * step(w))
  assert verdict(GROWTH, data(ladder("pre", shrinking))).verdict == NOT_REPRODUCED
  mixed = lambda w, s: bowl(4.6, 1e-2, 0.35 + 0.1 * (s - 1) * step(w))
  assert verdict(GROWTH, data(ladder("pre", mixed))).verdict == INCONCLUSIVE


def test_sensitivity_slope_leaves_out_a_width_where_every_seed_diverged():
  gone = lambda w, s: {lr: NAN for lr in RATES} if w == 64 else GROWING(w, s)
  v = verdict(GROWTH, data(ladder("pre", gone)))
  assert v.verdict == REPRODUCED and "d_model 64: pre does not learn" in " ".join(v.lines)
  gone2 = lambda w, s: {lr: NAN for lr in RATES} if w in (64, 128) else GROWING(w, s)
  assert verdict(GROWTH, data(ladder("pre", gone2))).verdict == INCONCLUSIVE


# ----------------------------------------------------------------------------- a slope gap of the optimum

TRANSFER = kinds.Slope("muP's optimum moves less", arm="pre+mup", reference="pre", axis=W, predict="higher",
                       margin=math.log(curves.RATE_FACTOR), per_span=True, same_first=True, family=None)


def test_optimum_slope_gap_every_way():
  v = verdict(TRANSFER, data(ladder("pre", moving(3e-2, 0.5)), ladder("pre+mup", moving(1e-2, 1.0))))
  assert v.verdict == REPRODUCED and v.effect.diff == pytest.approx(math.log(2), abs=0.03)
  alike = data(ladder("pre", moving(3e-2, 0.5)), ladder("pre+mup", moving(3e-2, 0.5, spread=0.08)))
  assert verdict(TRANSFER, alike).verdict == NOT_REPRODUCED
  more = data(ladder("pre", moving(1e-2, 1.0)), ladder("pre+mup", moving(3e-2, 0.5)))
  assert verdict(TRANSFER, more).verdict == NOT_REPRODUCED
  sp = lambda w, s: bowl(4.6, 3e-2 * (0.5, 1.0, 0.35)[s] ** step(w))
  v = verdict(TRANSFER, data(ladder("pre", sp), ladder("pre+mup", moving(1e-2, 0.8))))
  assert v.verdict == INCONCLUSIVE and v.effect.lo < 0 < v.effect.hi


def test_an_optimum_at_the_grid_edge_is_not_located():
  d = data(ladder("pre", moving(1e-2, 0.35)), ladder("pre+mup", moving(1e-2, 1.0)))
  v = verdict(TRANSFER, d)
  assert v.verdict == INCONCLUSIVE and "d_model 256 seed 0: pre's optimum at the grid's edge" in " ".join(v.lines)
  points, missing = kinds.axis_optima(d, "pre", W)
  assert all(tuple(p) == (32, 64, 128) for p in points.values()) and len(missing) == 3


# ----------------------------------------------------------------------------- the muTransfer family

FLAT = kinds.Slope("flat", arm="pre+mup", axis=W, predict="same", margin=math.log(2.0), times_span=True)
COST = kinds.Alike("no cost", arms=("pre+mup",), reference="pre", predict="below", over=W, margin=0.08,
                   learners=None, edge=False)
WIDER = kinds.Slope("wider", arm="pre+mup", axis=W, of="fixed_rate", predict="below", margin=0.01)
FAMILY = (TRANSFER, FLAT, COST, WIDER)


def mutransfer(seeds=6, mup_opt=lambda w: 1e-2, mup_cost=0.0, mup_wider=-0.1, noise=0.0):
  """sp's optimum falls 2x per doubling, muP's follows ``mup_opt``; the best loss falls 0.1
  nats per doubling (muP's by ``-mup_wider``) and muP's lies ``mup_cost`` above sp's; with
  ``noise``, the seeds' muP costs and slopes spread by that much."""
  sp = lambda w, s: bowl(4.6 - 0.1 * step(w), 3e-2 * 0.5 ** step(w) * (1 + 0.04 * (s - 2)))
  sign = lambda s: 2 * (s % 2) - 1
  mup = lambda w, s: bowl(4.6 + (mup_wider + noise * sign(s)) * step(w) + mup_cost + noise * sign(s),
                          mup_opt(w) * (1 + 0.04 * (s - 2)) * math.exp(3 * noise * sign(s) * step(w)))
  return data(ladder("pre", sp, seeds), ladder("pre+mup", mup, seeds))


def family(d, claims=FAMILY, **kw):
  study = Study("t", "q", "exploratory", (Arm("pre"), Arm("pre+mup"), Arm("pre+qk")),
                {"cpu": Grid((1e-2,), (0,))}, tuple(dataclasses.replace(c, family="main") for c in claims), **kw)
  return [v.verdict for v in study_lib.judge(study, d, robust=False)]


def test_the_mutransfer_kinds_every_way():
  assert family(mutransfer()) == [REPRODUCED] * 4
  moves = mutransfer(mup_opt=lambda w: 3e-2 * 0.5 ** step(w), mup_cost=0.3, mup_wider=0.1)
  assert family(moves, (FLAT, COST, WIDER)) == [NOT_REPRODUCED] * 3
  few = mutransfer(seeds=2, mup_opt=lambda w: 1e-2 * 0.85 ** step(w), mup_cost=0.08, mup_wider=0.01,
                   noise=0.1)
  assert family(few, (FLAT, COST, WIDER)) == [INCONCLUSIVE] * 3


def test_fixed_rate_slope_takes_the_rate_nearest_the_base_optimum():
  t = WIDER.test(mutransfer())
  assert t.lines[0] == "At rate 0.01." and t.effect.diff == pytest.approx(-0.1, abs=0.01)


def test_a_slope_is_decided_as_a_contrast_is():
  # Per seed a slope beyond the margin (log 2): "decisively beyond" by the doubled one-sided p of
  # every kind's decide (stats' two-sided level), as a Contrast predicting "same" would judge them.
  slopes = lambda w, s: bowl(4.6, 1e-3 * (2.2, 3.2, 1.7)[s] ** step(w))
  t = dataclasses.replace(FLAT, times_span=False).test(data(ladder("pre+mup", slopes)))
  e = t.effect
  assert e.diff > math.log(2.0) and t.p_for == e.p_same
  assert 0 < t.p_against < 1 and t.p_against == pytest.approx(p_beyond(e, math.log(2.0), "above"))


def test_a_claim_declared_not_powered_is_reported_not_judged():
  got = family(mutransfer(), not_powered=("no cost",))
  assert got == [REPRODUCED, REPRODUCED, "Not powered", REPRODUCED]
  with pytest.raises(Exception, match="not_powered"):
    family(mutransfer(), not_powered=("no such claim",))


# ----------------------------------------------------------------------------- RateAt


def test_rates_extrapolate_each_seed_or_take_the_mean():
  d = data(ladder("pre", moving(3e-2, 0.5)), ladder("pre+mup", moving(1e-2, 1.0)))
  sp = rates_lib.RateAt("pre", W, 768, holdout=True).result(d)
  assert sp["lr"] == pytest.approx(3e-2 * 32 / 768, rel=0.1) and sp["seeds"] == 3 and sp["widest"] == 256
  assert sp["interval"][0] < sp["lr"] < sp["interval"][1] and "x1.0" in sp["check"]
  assert "extrapolated x3.0 beyond 256" in rates_lib.RateAt("pre", W, 768).text(d)
  mup = rates_lib.RateAt("pre+mup", W, 768, method="mean").result(d)
  assert mup["lr"] == pytest.approx(1e-2, rel=0.1)
  assert "no prediction" in rates_lib.RateAt("pre", W, 768).text(data())


@pytest.mark.parametrize("rows", [
    (), ladder("pre", FLAT_C, seeds=1, widths=(32,)),
    ladder("pre", lambda w, s: {lr: NAN for lr in RATES}) + ladder("pre+qk", lambda w, s: {lr: NAN for lr in RATES}),
    ladder("pre", GROWING, seeds=1) + ladder("pre+mup", GROWING, seeds=1),
], ids=["empty", "one-width-one-seed", "all-diverged", "one-seed"])
def test_partial_results_do_not_crash(rows):
  d = data(rows)
  claims = (QK, GROWTH, TRANSFER, FLAT, COST, WIDER, dataclasses.replace(QK, holm=""))
  for v in family(d, claims):
    assert v in (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
  assert rates_lib.RateAt("pre", W, 768).text(d) and rates_lib.RateAt("pre", W, 768, method="mean").text(d)


# ----------------------------------------------------------------------------- per-arm grids


def test_an_arm_with_its_own_seeds_and_widths_and_the_axis_name():
  study = Study("t", "q", "exploratory", (Arm("pre"), Arm("pre+qk", {"model.qk_norm": True})),
                {"cpu": Grid((1e-3, 1e-2), (0, 1, 2), axes={W: (32, 64)},
                             arm_seeds={"pre+qk": (0, 1)}, arm_axes={"pre+qk": {W: (64,)}},
                             arm_overrides={"pre+qk": {"model.base_width": 8}})}, (), tags={W: "d"})
  cells = study.sweep("cpu").cells
  assert sorted({c.group for c in cells}) == ["pre-d32", "pre-d64", "pre-qk-d64"]
  qk = [c for c in cells if c.arms == ("pre+qk",)]
  assert len(qk) == 4 and {c.seed for c in qk} == {0, 1} and qk[0].name == "pre-qk-d64-lr0.001-seed0"
  assert all(c.overrides["model.base_width"] == 8 and c.overrides["model.qk_norm"] for c in qk)
  assert len(cells) == 2 * 2 * 3 + 4
