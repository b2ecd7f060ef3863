"""The proxies study's rules on synthetic results: each comes out every way; edge cases."""

import math

import pytest

from research.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from research.curves import Run
from experiments.studies.proxies import rules as pv

RATES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
WIDTHS = (32, 64, 128, 256)
LN_V = math.log(512)  # 6.24: the loss at initialisation
UNIGRAM = 5.9
NAN = float("nan")


def bowl(best, lr_best, c=0.3):
  """A loss-vs-rate curve with its minimum ``best`` at ``lr_best`` and curvature ``c``."""
  return {lr: best + c * math.log10(lr / lr_best) ** 2 for lr in RATES}


def jitter(curve, seed, phase=0, amp=0.003):
  """A seed's own small wiggle on every rate (each seed's and arm's curve a shape of its own)."""
  return {lr: l + amp * (((seed * 7 + i * 3 + phase) % 5) - 2) for i, (lr, l) in enumerate(curve.items())}


def rows(arm, width, curves):
  """Rows of one arm at one width; ``curves[seed]`` maps rate -> final loss (nan: diverged)."""
  out = []
  for seed, curve in enumerate(curves):
    for lr, loss in curve.items():
      div = not math.isfinite(loss)
      out.append(pv.Row(Run((arm,), lr, seed, NAN if div else loss, LN_V, diverged=div,
                            unigram=UNIGRAM), arm, width))
  return out


def ladder(arm, curve_at, seeds=3):
  """An arm over the widths: ``curve_at(width, seed)`` -> that seed's curve (jittered)."""
  return [r for w in WIDTHS for r in rows(arm, w, [jitter(curve_at(w, s), s, len(arm))
                                                   for s in range(seeds)])]


def step(w):
  """Doublings above the narrowest width."""
  return math.log2(w / WIDTHS[0])


# Sensitivity grows with width (curvature 0.2 -> 0.5), or stays flat at 0.2.
GROWING = lambda w, s: bowl(4.6, 1e-2, 0.2 + 0.1 * step(w))
FLAT_C = lambda w, s: bowl(4.6, 1e-2, 0.2)


def test_a_diverged_model_counts_at_its_initial_loss():
  curve = {**bowl(4.6, 1e-2), 3e-1: NAN}
  rs = [r.run for r in rows("pre", 32, [curve])]
  points = list(bowl(4.6, 1e-2).values())[:-1] + [LN_V]
  assert pv.width_sensitivity(rs)[0] == pytest.approx(sum(points) / len(points) - min(points))


# ----------------------------------------------------------------------------- qk-norm, z-loss


def test_qk_norm_claim_reproduced():
  runs = ladder("pre", GROWING) + ladder("pre+qk", FLAT_C)
  verdict = pv.claim_qk_norm(runs)
  assert verdict.verdict == REPRODUCED
  assert verdict.effect.lo > 0 and verdict.effect_name.endswith("d256")


def test_qk_norm_claim_not_reproduced_when_higher_or_the_same():
  assert pv.claim_qk_norm(ladder("pre", FLAT_C) + ladder("pre+qk", GROWING)).verdict == NOT_REPRODUCED
  same = pv.claim_qk_norm(ladder("pre", FLAT_C) + ladder("pre+qk", FLAT_C))
  assert same.verdict == NOT_REPRODUCED and "(same)" in same.lines[0]


def test_qk_norm_claim_inconclusive_when_seeds_disagree():
  # At d256 the seeds' qk curvatures straddle pre's: a mean gap of zero with a wide spread.
  split = lambda w, s: bowl(4.6, 1e-2, 0.5 + (0.3 * (s - 1) if w == 256 else 0.0))
  verdict = pv.claim_qk_norm(ladder("pre", lambda w, s: bowl(4.6, 1e-2, 0.5)) + ladder("pre+qk", split))
  assert verdict.verdict == INCONCLUSIVE and verdict.effect.lo < 0 < verdict.effect.hi


def test_a_flat_arm_is_not_insensitive():
  # qk-norm on the unigram plateau at every rate of d256: sensitivity near zero, but it
  # never trained, so the gap says nothing.
  plateau = lambda w, s: {lr: UNIGRAM + 0.01 for lr in RATES} if w == 256 else FLAT_C(w, s)
  verdict = pv.claim_qk_norm(ladder("pre", GROWING) + ladder("pre+qk", plateau))
  assert verdict.verdict == INCONCLUSIVE and any("pre+qk does not learn" in l for l in verdict.lines)


def test_intervention_needs_the_largest_width():
  runs = ladder("pre", GROWING) + [r for r in ladder("pre+z", FLAT_C) if r.width < 256]
  assert pv.claim_z_loss(runs).verdict == INCONCLUSIVE
  assert pv.claim_z_loss(ladder("pre", GROWING) + ladder("pre+z", FLAT_C)).verdict == REPRODUCED


# ----------------------------------------------------------------------------- growth with width


def test_growth_claim_every_way():
  assert pv.claim_growth(ladder("pre", GROWING)).verdict == REPRODUCED
  flat = pv.claim_growth(ladder("pre", FLAT_C))
  assert flat.verdict == NOT_REPRODUCED and flat.effect.p_same < 0.05
  shrinking = lambda w, s: bowl(4.6, 1e-2, 0.5 - 0.1 * step(w))
  assert pv.claim_growth(ladder("pre", shrinking)).verdict == NOT_REPRODUCED
  # One seed grows, one shrinks, one is flat.
  mixed = lambda w, s: bowl(4.6, 1e-2, 0.35 + 0.1 * (s - 1) * step(w))
  assert pv.claim_growth(ladder("pre", mixed)).verdict == INCONCLUSIVE


def test_growth_leaves_out_a_width_where_every_seed_diverged():
  gone = lambda w, s: {lr: NAN for lr in RATES} if w == 64 else GROWING(w, s)
  verdict = pv.claim_growth(ladder("pre", gone))
  assert verdict.verdict == REPRODUCED and any("d64: pre does not learn" in l for l in verdict.lines)
  # With two widths left no seed has a slope.
  gone2 = lambda w, s: {lr: NAN for lr in RATES} if w in (64, 128) else GROWING(w, s)
  assert pv.claim_growth(ladder("pre", gone2)).verdict == INCONCLUSIVE


# ----------------------------------------------------------------------------- rate transfer


def moving(lr0, per_doubling, spread=0.05):
  """Optimum ``lr0 * per_doubling ** doublings``, each seed's a few percent apart."""
  return lambda w, s: bowl(4.6, lr0 * per_doubling ** step(w) * (1 + spread * (s - 1)))


def test_transfer_claim_reproduced_and_the_slopes_recovered():
  runs = ladder("pre", moving(3e-2, 0.5)) + ladder("pre+mup", moving(1e-2, 1.0))
  verdict = pv.claim_transfer(runs)
  assert verdict.verdict == REPRODUCED
  assert verdict.effect.diff == pytest.approx(math.log(2), abs=0.03)
  sp = pv.optimum_fits(runs, "pre")[0]
  assert all(f.slope == pytest.approx(-math.log(2), abs=0.03) for f in sp.values())


def test_transfer_claim_not_reproduced_when_both_move_alike_or_mup_more():
  alike = ladder("pre", moving(3e-2, 0.5)) + ladder("pre+mup", moving(3e-2, 0.5, spread=0.08))
  assert pv.claim_transfer(alike).verdict == NOT_REPRODUCED
  more = ladder("pre", moving(1e-2, 1.0)) + ladder("pre+mup", moving(3e-2, 0.5))
  assert pv.claim_transfer(more).verdict == NOT_REPRODUCED


def test_transfer_claim_inconclusive_when_an_optimum_is_at_the_grid_edge():
  # sp's optimum falls to the grid's smallest rate at d256: not located, not fitted.
  runs = ladder("pre", moving(1e-2, 0.35)) + ladder("pre+mup", moving(1e-2, 1.0))
  verdict = pv.claim_transfer(runs)
  assert verdict.verdict == INCONCLUSIVE
  assert any("d256 seed 0: pre's optimum at the grid's edge" in l for l in verdict.lines)
  fits, missing = pv.optimum_fits(runs, "pre")
  assert all(f.widths == (32, 64, 128) for f in fits.values()) and len(missing) == 3


def test_transfer_claim_inconclusive_when_seeds_disagree():
  sp = lambda w, s: bowl(4.6, 3e-2 * (0.5, 1.0, 0.35)[s] ** step(w))
  verdict = pv.claim_transfer(ladder("pre", sp) + ladder("pre+mup", moving(1e-2, 0.8)))
  assert verdict.verdict == INCONCLUSIVE and verdict.effect.lo < 0 < verdict.effect.hi


# ----------------------------------------------------------------------------- the prediction


def test_prediction_extrapolates_each_seed_to_the_target_width():
  runs = ladder("pre", moving(3e-2, 0.5)) + ladder("pre+mup", moving(1e-2, 1.0))
  sp, mup = pv.predict(runs, "pre"), pv.predict(runs, "pre+mup")
  assert sp.lr == pytest.approx(3e-2 * 32 / 768, rel=0.1) and sp.seeds == 3
  assert sp.interval[0] < sp.lr < sp.interval[1] and sp.widest == 256
  assert mup.lr == pytest.approx(1e-2, rel=0.1)
  assert "extrapolated x3.0 beyond d256" in sp.text()
  edge = pv.predict(ladder("pre", moving(1e-2, 0.35)), "pre")
  assert edge.missing and "grid's edge" in edge.text()
  none = pv.predict([], "pre")
  assert none.lr is None and "no prediction" in none.text()


# ----------------------------------------------------------------------------- partial data


@pytest.mark.parametrize("runs", [
    [],
    rows("pre", 32, [bowl(4.6, 1e-2)]),
    rows("pre", 32, [{lr: NAN for lr in RATES}] * 3) + rows("pre+qk", 32, [{lr: NAN for lr in RATES}] * 3),
    ladder("pre", GROWING, seeds=1) + ladder("pre+mup", GROWING, seeds=1),
], ids=["empty", "one-width-one-seed", "all-diverged", "one-seed"])
def test_partial_results_do_not_crash(runs):
  for verdict in pv.judge(runs):
    assert verdict.verdict in (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
    assert verdict.markdown()[0].startswith("**")
  for arm in ("pre", "pre+mup"):
    assert pv.predict(runs, arm).text()
