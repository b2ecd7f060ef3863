"""The library of claim kinds a study chooses its claims from: each a frozen record of its parameters, its test and its power plan.

A study (``research/study.py``) lists claims such as ``Contrast("qk-norm lowers the best
loss", terms=pair("pre+qk", "pre"), predict="lower")``. Each kind turns a study's
``Data`` (its finished cells by arm and grid point) into a ``claims.Test``: the effect with
its interval, the p-value for the claim and against it, the guards that make it
inconclusive whatever the test says (an arm that does not learn, an optimum at the grid's
edge) and the seeds it used. The study decides each family of tests together under Holm
(``claims.decide_family``); what every kind shares (guards, the missing-runs verdict, the
decision) is in ``research/claims.py``, the maths in ``curves.py`` and ``stats.py``. Every
kind also states its plan (``plan``): the per-seed quantity, whether its test is directed or
an equivalence, and the effect it is sized for, from which ``research.power`` gives the seeds
it needs at its family's Holm level. A kind whose ``test_kind`` is ``"finding"`` (``Finding``,
``Choice``) has no power plan, no family and no leave-one-seed-out.

This module is where a study finds them (``kinds.Contrast``); each lives in the module of
its family:

- ``research/kind_base.py``: what every claim kind shares (``research/kinds.py`` lists the kinds): a study's ``Data``, the ``Claim`` base, a report ``Section``, the per-seed quantities, and the p-value helpers.
- ``research/kind_contrast.py``: ``Contrast``, the one kind of a signed sum of arms' per-seed quantity (a ``QUANTITIES`` name or a ``Probe``) and its decision (``decide``); ``Alike`` (arms the same, or no worse, pairwise or at every value of an axis) and ``NotRun``.
- ``research/kind_zloss.py``: the z-loss studies' kinds: where a probe (the output's log Z) sits against ``log V`` at the end of training.
- ``research/kind_drift.py``: the z-loss drift studies' kinds: a probe's track over training, its drift over the second half and its late window.
- ``research/kind_runaway.py``: ``Runaway``: on the seeds where a reference arm's log Z ran away, whether an arm holds it or lowers the final loss.
- ``research/kind_choice.py``: a choice among arms (``Choice``, a finding with no power plan) and the report items that tabulate and draw arms: ``RateTable``, ``BestCurves`` and the per-layer profile figure.
- ``research/kind_ladder.py``: claims along an axis: each seed's optimum per value (``point_optima``, ``axis_optima``), ``Slope`` (a per-seed slope against log2 of the axis: of the optimum, the sensitivity, the loss at a fixed rate), ``SensitivityGap`` and the rate lines ``Rates`` of ``RateAt``.
- ``research/kind_norm_mlp.py``: the norm x MLP study's kinds, each decided alone with Holm over its own parts, as its rules were: ``ProfilePair``, ``Diminishing``.
- ``research/kind_recipe.py``: the rate recipe's kinds.
"""

# A kind's definitions are hashed where they live (research/identity.py: FRAMEWORK_MODULES); a
# committed study whose kinds were re-expressed since its run says so in its report, with the
# verdicts its recorded rules gave (verdicts_before.json; tests/test_report.py re-judges them).
# ruff: noqa: F401
from research.kind_base import (
    NAN, Data, QUANTITIES, at_text, se_of, p_beyond, p_outside, Section, Claim, slope, named, in_order, words, span, seed_slopes, not_located, _missing, lowest, highest,
    probe_ratio)
from research.kind_contrast import (
    Probe, decide, outcome_ps, pair, ratio_text, on_shared_rates, per_rate_text, signed, Contrast, Alike, NotRun)
from research.kind_zloss import (
    CANNOT_JUDGE, FOUND, NOT_FOUND, CHOSEN, Model, models, by_rate, state, median_excess, ExcessTable)
from research.kind_drift import (
    model_learns, Track, tracks, tracks_by_rate, drift_state, median_of, DriftTable, Finding, late_mean, late_models)
from research.kind_runaway import overshoot, runaway, Pairs, Runaway
from research.kind_choice import Setting, Choice, RateTable, mean_profile, plot_profiles, BestCurves
from research.kind_ladder import (
    LEARNS, FITS, point_optima, axis_optima, local_slopes, Reading, Slope, SensitivityGap, RateAt, Rates)
from research.kind_norm_mlp import (
    ProfilePair, Diminishing)
from research.kind_recipe import (
    Leg, Prediction, Recipe, HeldOut)
