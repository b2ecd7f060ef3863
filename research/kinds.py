"""The library of claim kinds a study chooses its claims from (``kinds.Contrast``, ...).

Each kind is a frozen record of its parameters: it turns a study's ``Data`` into a
``claims.Test`` and states its power ``plan`` (none for a ``"finding"``: ``Finding``, ``Choice``).
docs/study.md describes them. Each lives in the module of its family: ``kind_base`` (``Data``,
``Claim``, ``Section``, the p-value helpers), ``kind_contrast``, ``kind_ladder``, ``kind_choice``,
``kind_zloss``, ``kind_drift``, ``kind_runaway``, ``kind_norm_mlp`` and ``kind_recipe``.
"""

# Each definition is hashed in its own module (research/identity.py: FRAMEWORK_MODULES).
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
