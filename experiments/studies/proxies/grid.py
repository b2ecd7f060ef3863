"""The proxies study's grid: small-scale proxies across width, learning-rate sensitivity and rate transfer (issue 23).

  python -m experiments.sweep --sweep=proxies --scale=cpu     # see the budget below
  python -m experiments.sweep --sweep=proxies --scale=gpu     # the andrea120m depth family
  python -m experiments.report --sweep_dir=runs/sweeps/proxies-cpu --pack=results/proxies-cpu --out=docs/studies/proxies-cpu

Wortsman et al. 2023 judge an architecture by its final loss over a grid of learning rates
at each of several widths; Yang et al. 2022 ask whether the optimal rate moves with width.
A width ladder (``d_model`` only: depth, heads, context, batch, steps and data fixed, so
``d_head`` grows with the width, which muP's ``1 / d_head`` attention scale is about), each
width over one half-decade grid of peak rates that reaches instability at its top, and
three seeds (each sets the initialisation and the batch order, the same in every arm:
paired comparisons). Arms, each one change from ``pre``:

- ``pre``: pre-LN, the standard parametrisation (GPT-2's init), the reference;
- ``pre+qk``: with qk-LayerNorm (``model.qk_norm``);
- ``pre+z``: with PaLM's z-loss, 1e-4 (``train.z_loss``);
- ``post``: post-LN;
- ``pre+mup``: pre-LN under muP (``model.parametrization=mup``) with ``base_width`` the
  ladder's narrowest width: every other width is wider than the base, as in Yang et al.,
  every multiplier is at most 1, and at the base width the two parametrisations start from
  the same init and rates (only the attention scale differs), so the two lines of optimal
  rates against width start from one point.

One vmapped program per (arm, width): its members are the rates x seeds. Warmup is a tenth
of the steps, then the base config's cosine decay to a tenth of the peak. The rules are
``rules.py`` beside this file; no refinement rounds (``refinable=False``): the
half-decade grid brackets an optimum within 10x, what ``curves.fit_optimum`` fits over.
"""

from __future__ import annotations

from andrea_jax import errors
from research.ladder import (SECONDS_PER_GROUP_CPU, SECONDS_PER_MODEL_STEP_CPU, group_name,
                             ladder_overrides, minutes_cpu)
from research.sweep import Cell, Sweep, split_groups

ARMS = {
    "pre": {},
    "pre+qk": {"model.qk_norm": True},
    "pre+z": {"train.z_loss": 1e-4},
    "post": {"model.norm": "post"},
    # base_width: the scale's. The muP rules this study ran with, before they became fields
    # with other defaults (andrea_jax/mup.py): its cells stay the ones that trained its data.
    "pre+mup": {"model.parametrization": "mup", "model.mup_attention": "inverse",
                "model.mup_decay": "with_rate"},
}

HALF_DECADES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)

SCALES = {
    # 2 layers, 2 heads (d_head 8 to 64), context 64, 16 sequences per step, a 512-token
    # vocabulary trained on the built-in corpus. Widths 16 to 128 (8x): a d_model-256 rung
    # would add about 66 minutes (0.19 s per model-step), so the ladder stops at 128
    # (measured costs below).
    "cpu": dict(base="tiny", n_layer=2, n_head=2, block_size=64, batch_size=16, vocab=512,
                widths=(16, 32, 64, 128), steps=200, rates=HALF_DECADES, seeds=(0, 1, 2),
                eval_batches=16, log_every=25, extra={}),
    # The cpu grid's structure at toy size (three widths, three rates, two seeds, 20 steps):
    # proves the command end to end in a few minutes; says nothing about the literature.
    "smoke": dict(base="tiny", n_layer=2, n_head=2, block_size=32, batch_size=8, vocab=321,
                  widths=(16, 32, 64), steps=20, rates=(1e-3, 1e-2, 1e-1), seeds=(0, 1),
                  eval_batches=2, log_every=5, extra={"data.max_docs": 40}),
    # The andrea120m depth family on one GPU: 12 layers, 8 heads (so that every width is a
    # multiple), context 1024, 32 x 1024 tokens per step; andrea120m's width 768 lies inside
    # the ladder (d_head 96 there, andrea120m's is 64 with 12 heads). Defined, not run.
    "gpu": dict(base="andrea120m", n_layer=12, n_head=8, block_size=1024, batch_size=32,
                vocab=8449, widths=(128, 256, 512, 1024), steps=2000,
                rates=(1e-4,) + HALF_DECADES[:-1], seeds=(0, 1, 2), eval_batches=16,
                log_every=50, extra={"model.compute_dtype": "auto"}, members_per_program=6),
}

def cells_of(s: dict) -> list[Cell]:
  common = ladder_overrides(s)
  cells = []
  for arm, changes in ARMS.items():
    for width in s["widths"]:
      o = {**common, **changes, "model.d_model": width}
      if arm == "pre+mup":
        o["model.base_width"] = s["widths"][0]
      group = group_name(arm, width)
      cells += [Cell(f"{group}-lr{lr:g}-seed{seed}",
                     {**o, "train.learning_rate": lr, "train.seed": seed},
                     (arm,), seed, group, 0, False)
                for lr in s["rates"] for seed in s["seeds"]]
  return cells


def get_sweep(scale: str = "cpu") -> Sweep:
  if scale not in SCALES:
    raise errors.ConfigError(f"--scale={scale!r}: expected one of {sorted(SCALES)}")
  s = SCALES[scale]
  cells = split_groups(cells_of(s), s.get("members_per_program"))
  return Sweep("proxies", scale, s["base"], cells, description=describe(s, cells, scale))


def describe(s: dict, cells: list[Cell], scale: str) -> str:
  w = s["widths"]
  text = (f"Base config `{s['base']}` with {s['n_layer']} layers, {s['n_head']} heads at every "
          f"width (d_head grows with d_model), context {s['block_size']}, batch "
          f"{s['batch_size']}, vocabulary {s['vocab']}, {s['steps']} steps, AdamW with "
          f"warmup over {s['steps'] // 10} steps (a tenth) and cosine decay to 10 % of the peak. "
          f"Widths d_model {', '.join(map(str, w))}; arms {', '.join(ARMS)} (z-loss 1e-4; "
          f"muP's base width {w[0]}, the narrowest); peak rates {', '.join(f'{r:g}' for r in s['rates'])} "
          f"at every width; seeds {', '.join(map(str, s['seeds']))} everywhere (a seed sets "
          f"the initialisation and the batch order, the same in every arm). One program per "
          f"(arm, width) with the rates x seeds as its members; {len(cells)} models in "
          f"{len({c.group for c in cells})} programs; no refinement rounds. Probes at step 0 "
          f"and at the last step (attention-logit maxima per layer, log Z).")
  if scale == "smoke":
    text = ("**Smoke scale: toy models (2 layers, 20 steps, three widths, three rates, two "
            "seeds) that prove the pipeline end to end; their numbers and verdicts say "
            "nothing about the literature.** " + text)
  if scale == "cpu":
    text += (" Budget: " + ", ".join(f"d{k} {SECONDS_PER_MODEL_STEP_CPU[k]:.3f}" for k in w)
             + f" s per model-step and {SECONDS_PER_GROUP_CPU:.0f} s fixed per program on the "
             f"2-core CPU (measured in this scale's run, the machine shared with other jobs), "
             f"about {minutes_cpu(cells):.0f} minutes in all (the run took 44). Cut to fit about "
             f"50 minutes: the ladder stops at d_model 128 (a 256 rung measured "
             f"{SECONDS_PER_MODEL_STEP_CPU[256]} s per model-step: about "
             f"{5 * 21 * s['steps'] * SECONDS_PER_MODEL_STEP_CPU[256] / 60:.0f} more minutes), "
             f"2 layers, 200 steps, no refinement rounds.")
  if scale == "gpu":
    text += (" Defined, not run: six members per program (one H200). andrea120m's own "
             "depth, context and vocabulary, so the predicted rate at d_model 768 can be "
             "checked against the ladder's own 512 and 1024.")
  return text
