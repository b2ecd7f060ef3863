"""Synthetic runs for the claim tests: an arm's runs from a loss-against-rate curve (tests/test_report.py, tests/test_norm_mlp.py)."""

import math

import numpy as np

from research import curves

RATES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
LN_V = math.log(2305)
UNIGRAM = 6.27


def arm(name, curve, seeds=3, spread=0.005, diverged=(), shift=0.0, **fields):
  """Runs of one arm: ``curve`` maps rate -> mean final loss; seeds add +-spread around it
  (rolled per rate, so each seed's curve has its own shape) and ``shift * seed`` (what a
  seed's initialisation and batch order do to every arm alike)."""
  runs = []
  offsets = np.linspace(-spread, spread, seeds) if seeds > 1 else [0.0]
  for i, (lr, mean) in enumerate(curve.items()):
    for seed, off in enumerate(np.roll(offsets, i)):
      div = (lr, seed) in diverged or lr in diverged
      runs.append(curves.Run((name,), lr, seed, float("nan") if div else mean + off + shift * seed, LN_V,
                             diverged=div, unigram=UNIGRAM, **fields))
  return runs


def bowl(best, lr_best, width=0.3, rates=RATES):
  """A loss-vs-rate curve with its minimum ``best`` at ``lr_best``."""
  return {lr: best + width * math.log10(lr / lr_best) ** 2 for lr in rates}


FLAT = {lr: 6.23 for lr in RATES}  # the unigram plateau at every rate: does not learn
