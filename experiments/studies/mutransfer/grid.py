"""The muTransfer ladder's grid: sp and muP across widths on the tuned base, and qk-LayerNorm at the widest rungs (issue 29).

  python -m experiments.sweep --sweep=mup_base --scale=cpu      # first: the base stage, then commit its report
  python -m experiments.sweep --sweep=mutransfer --scale=cpu --dry_run
  python -m experiments.sweep --sweep=mutransfer --scale=cpu    # about 97 minutes planned, idle 2-core CPU
  python -m experiments.report --sweep_dir=runs/sweeps/mutransfer-cpu --pack=results/mutransfer-cpu --out=docs/studies/mutransfer-cpu

The proxies study's shape (2 layers, 2 heads so ``d_head`` grows with width, context 64,
16 sequences per step, 512-token vocabulary, 200 steps, warmup a tenth, cosine decay to a
tenth), widths 32, 64, 128, 256 (8x; muP's base width 32, the base stage's), one rate grid
for every arm and width, 3e-4 .. 3e-2 in half decades (the base optimum is 6.9e-3; the
proxies ladder's sp optima moved by about 2x per doubling, so sp's at d256 is expected near
1e-3; its 1e-1 and above were unstable), refined where a seed's optimum lies at an edge.
Every arm carries the base stage's readout and attention multipliers (muP's rules: attention
``sqrt(d_head_base) / d_head``, decay with ``lr x weight_decay`` constant across width):

- ``pre``: pre-LN, sp: the reference;
- ``pre+mup``: pre-LN, muP, ``base_width`` 32;
- ``pre+qk``: pre-LN, sp with qk-LayerNorm, at d128 only.

The seeds are the power plan's (``plan.py``, made before the run; ``tests/test_mutransfer.py``
recomputes it and checks these numbers): 9 for every sp and muP group (transfer, flat,
no_cost and wider powered at Holm's level over the four), and 5 for ``pre+qk`` at d128 (the qk
claim needs 36-42 there: not powered, reported beside ``pre``'s first 5 seeds, not judged).
Seeds from 300: none used before (0-2 by the norm x MLP and proxies studies, 100-118 by the
confirmatory norm x MLP study, 200-202 by the base stage). Not in the ladder: z-loss (the
committed study's log Z stayed between 5.7 and 6.9 at every rate and width with weight decay
0.1, so its rule needs a setting where log Z grows, found and checked first: not done, so not
judged here), and a second depth (the budget).
"""

from __future__ import annotations

import os

from andrea_jax import errors
from andrea_jax.files import read_json
from research.sweep import Cell, Sweep, split_groups
from research import ladder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BASE_RESULTS = os.path.join(ROOT, "results", "mup_base-cpu", "results.json")
REFERENCE, MUP, QK = "pre", "pre+mup", "pre+qk"
# Frozen from the power plan (plan.py; a test checks them against it).
RATES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
LADDER_SEEDS = tuple(range(300, 309))
QK_SEEDS = tuple(range(300, 305))

SCALES = {
    "cpu": dict(base="tiny", n_layer=2, n_head=2, block_size=64, batch_size=16, vocab=512,
                widths=(32, 64, 128, 256), wide=(128,), steps=200, rates=RATES,
                ladder_seeds=LADDER_SEEDS, qk_seeds=QK_SEEDS, eval_batches=16,
                log_every=25, extra={}, members_per_program=24),
    "smoke": dict(base="tiny", n_layer=1, n_head=2, block_size=32, batch_size=8, vocab=321,
                  widths=(32, 64), wide=(64,), steps=12, rates=(1e-3, 1e-2, 1e-1),
                  ladder_seeds=(300, 301, 302), qk_seeds=(300, 301), eval_batches=2,
                  log_every=4, extra={"data.max_docs": 40}, members_per_program=None),
}
def base_choice(path: str = BASE_RESULTS) -> dict:
  """The base stage's choice (its results.json ``choice``); an error says how to make it."""
  results = read_json(path)
  choice = (results or {}).get("choice")
  if not choice:
    raise errors.ConfigError(
        f"{path}: no base-stage choice{' (its rule chose none)' if results else ''}. Run the "
        f"base stage first: python -m experiments.sweep --sweep=mup_base --scale=cpu, then "
        f"python -m experiments.report --sweep_dir=runs/sweeps/mup_base-cpu "
        f"--pack=results/mup_base-cpu --out=docs/studies/mup_base-cpu, and commit it")
  return choice


def cells_of(s: dict, choice: dict) -> list[Cell]:
  base_width = s["widths"][0]
  common = {**ladder.ladder_overrides(s),
            "model.readout_multiplier": float(choice["readout_multiplier"]),
            "model.attention_multiplier": float(choice["attention_multiplier"])}
  arms = {REFERENCE: {}, MUP: {"model.parametrization": "mup", "model.base_width": base_width,
                               "model.mup_attention": "base", "model.mup_decay": "constant"},
          QK: {"model.qk_norm": True}}
  cells = []
  for arm, changes in arms.items():
    for width in s["widths"]:
      wide = width in s["wide"]
      if arm == QK and not wide:
        continue
      seeds = s["qk_seeds"] if arm == QK else s["ladder_seeds"]
      o = {**common, **changes, "model.d_model": width}
      group = ladder.group_name(arm, width)
      cells += [Cell(f"{group}-lr{lr:g}-seed{seed}", {**o, "train.learning_rate": lr, "train.seed": seed},
                     (arm,), seed, group, 0, True)
                for lr in s["rates"] for seed in seeds]
  return cells


def scale_and_choice(scales: dict, scale: str, choice: dict | None) -> tuple[dict, dict]:
  """``scales[scale]`` and the base multipliers a study on the tuned base trains with:
  ``choice``, else the base stage's (multipliers 1 at the smoke scale)."""
  if scale not in scales:
    raise errors.ConfigError(f"--scale={scale!r}: expected one of {sorted(scales)}")
  if choice is None:
    choice = ({"readout_multiplier": 1.0, "attention_multiplier": 1.0} if scale == "smoke"
              else base_choice())
  return scales[scale], choice


def get_sweep(scale: str = "cpu", choice: dict | None = None) -> Sweep:
  s, choice = scale_and_choice(SCALES, scale, choice)
  cells = split_groups(cells_of(s, choice), s["members_per_program"])
  text = (f"The muTransfer ladder: widths {', '.join(map(str, s['widths']))} ({s['n_layer']} layers, "
          f"{s['n_head']} heads, context {s['block_size']}, batch {s['batch_size']}, vocabulary "
          f"{s['vocab']}, {s['steps']} steps, warmup a tenth, cosine decay to 10 %); arms "
          f"{REFERENCE} (sp), {MUP} (base width {s['widths'][0]}) and {QK} (at "
          f"{', '.join(map(str, s['wide']))}); the base stage's readout multiplier "
          f"{choice['readout_multiplier']:g} and attention multiplier "
          f"{choice['attention_multiplier']:g} in every arm; rates "
          f"{', '.join(f'{r:g}' for r in s['rates'])} (refined at an edge optimum); seeds "
          f"{s['ladder_seeds'][0]}..{s['ladder_seeds'][-1]} for {REFERENCE} and {MUP}, "
          f"{s['qk_seeds'][0]}..{s['qk_seeds'][-1]} for {QK} (not powered: reported, not judged); "
          f"{len(cells)} models in {len({c.group for c in cells})} programs")
  if scale == "cpu":
    text += f", about {ladder.minutes_cpu(cells):.0f} minutes on the 2-core CPU before refinement."
  else:
    text = "**Smoke scale: toy models that prove the pipeline; they mean nothing.** " + text + "."
  return Sweep("mutransfer", scale, s["base"], cells, description=text)
