"""The library of claim kinds a study chooses its claims from (``kinds.Contrast``, ...).

Each kind is a frozen record of its parameters: it turns a study's ``Data`` into a
``claims.Test`` and states its power ``plan`` (none for a ``"finding"``: ``Finding``, ``Choice``).
What a kind must define, and the parameter values it declares (``CHOICES``), are ``Claim``'s.
docs/study.md describes them. Each lives in the module of its family: ``kind_base`` (``Data``,
``Claim``, ``Section``, the p-value helpers), ``kind_contrast``, ``kind_choice``,
``kind_zloss`` and ``kind_recipe``.
"""

# Each definition is hashed in its own module (research/identity.py: FRAMEWORK_MODULES).
# ruff: noqa: F401
from research.kind_base import (Data, at_text, se_of, Section, Claim, words, seed_slopes, point_optima, axis_optima,
                                local_slopes, LOSS, LOG_RATE, LOG_RATIO, per_doubling, ToTarget, TOKENS, SECONDS)
from research.kind_contrast import Probe, pair, Contrast, Alike, NotRun, TargetTable
from research.kind_zloss import (CANNOT_JUDGE, FOUND, NOT_FOUND, CHOSEN, models, median_of, model_learns, state,
                                 Finding, late_models, Runaway)
from research.kind_choice import Choice, RateTable, mean_profile, BestCurves
from research.kind_recipe import Slope, Leg, Prediction, Recipe, HeldOut
