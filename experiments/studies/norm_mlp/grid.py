"""The norm x MLP study's grid: norm placement x warmup over a learning-rate grid; the MLP ratio; init and depth checks.

  python -m experiments.sweep --sweep=norm_mlp --scale=cpu     # see CPU_BUDGET below
  python -m experiments.sweep --sweep=norm_mlp --scale=gpu     # andrea120m shape
  python -m experiments.report --sweep_dir=runs/sweeps/norm_mlp-cpu

Every group below is one vmapped program (andrea_jax/multi.py) whose members are the
learning rates x seeds of one arm; seeds set both the initialisation and the batch order.
Arms:
- ``norm:{pre,post}/{none,short,long}``: pre- or post-LN, no warmup or a short or a long
  linear warmup; the full rate grid and three seeds (the questions are here).
- ``mlp_width:{1,2,4,8}``: pre-LN, long warmup, mlp_ratio r at fixed d_model; ``mlp_matched:r``:
  d_model chosen so the non-embedding parameter count stays that of r = 4 (Kaplan et al.);
  ``swiglu``: SwiGLU at r = 8/3 (GELU-4's count). A narrower rate grid around pre-LN's
  optimum and two seeds; r = 4 is the ``norm:pre/long`` group itself.
- ``init:{gpt2,xavier}/{pre,post}``: the per-layer gradient profile at initialisation
  under GPT-2's and Xavier's initialisation (Xiong et al. analysed Xavier); the gpt2
  profiles come from the norm arms, the xavier ones from short runs of their own.
- ``depth:{pre,post}``: twice the layers, long warmup, a few rates around the base
  arms' optima, two seeds (Liu et al.: post-LN's trouble grows with depth).
"""

from __future__ import annotations

import math

from andrea_jax import errors
from research.sweep import Cell, Sweep, split_groups

SCALES = {
    # A small ANDREA on the built-in corpus (vocabulary 2305): 6 layers, d_model 64 (2 heads:
    # parameter-matched widths need only be even), 64-token context, 16 sequences per step,
    # 450 steps. The norm arms' base grid (3x steps) starts where the 300-step and 450-step
    # studies saw learning (1e-4 taught nothing: 6.6+ nats for both norms); each learning
    # arm's optimum is then bracketed at most 2x wide by the rounds of experiments.sweep.
    # The MLP arms start on a 2x grid around the optima the 450-step study found.
    "cpu": dict(base="tiny", n_layer=6, d_model=64, n_head=2, block_size=64, batch_size=16,
                steps=450, warmup={"none": 0, "long": 90}, eval_every=90,
                diag_every=150, log_every=15, rates=(3e-4, 1e-3, 3e-3, 1e-2), seeds=(0, 1, 2),
                narrow_rates=(2e-3, 4e-3, 8e-3), matched=(2, 8), deep_layers=0, init_steps=10),
    # The cpu grid's structure at toy size, a few minutes: proves the command end to end.
    "smoke": dict(base="tiny", n_layer=2, d_model=32, n_head=2, block_size=32, batch_size=8,
                  steps=30, warmup={"none": 0, "long": 9}, eval_every=15,
                  diag_every=15, log_every=5, rates=(1e-3, 1e-2, 1e-1), seeds=(0, 1, 2),
                  narrow_rates=(3e-3, 1e-2, 3e-2), matched=(2, 8), deep_layers=4,
                  deep_rates=(1e-3, 1e-2, 1e-1), init_steps=2,
                  extra={"model.vocab_size": 321, "data.max_docs": 40, "train.eval_batches": 2}),
    # The andrea120m shape on one GPU.
    "gpu": dict(base="andrea120m", n_layer=12, d_model=768, n_head=12, block_size=1024,
                batch_size=64, steps=4000, warmup={"none": 0, "long": 800},
                eval_every=500, diag_every=1000, log_every=50,
                rates=(1e-4, 3e-4, 1e-3, 3e-3, 1e-2), seeds=(0, 1, 2),
                narrow_rates=(5e-4, 1e-3, 2e-3), matched=(1, 2, 8),
                deep_layers=24, deep_rates=(1e-4, 3e-4, 1e-3), init_steps=10,
                # One andrea120m at batch 64 x 1024 fills an H200's memory: one model per
                # program, the programs spread over the GPUs with --parallel/--gpus.
                members_per_program=1),
}

# One base-shape model-step of the cpu scale on a 2-core CPU, everything included
# (compiles, evaluations, probes), measured: the 450-step study of 75,679 base-shape
# model-steps took 93 minutes, about 84 of them on an idle machine, i.e. 0.067 s. The
# members of a group step in a compiled loop (multi's lax.map on CPUs).
SECONDS_PER_MODEL_STEP_CPU = 0.067
# The rounds of added rates (experiments.sweep) are not in the definition: their cost is
# estimated as this fraction of the norm arms' base grid (about two rates per learning arm).
REFINE_SHARE = 0.5


def matched_d_model(ratio: float, d_model: int, n_head: int) -> int:
  """d_model with ``(4 + 2 r) d^2`` equal to that of r = 4 at ``d_model``, a multiple of n_head."""
  d = d_model * math.sqrt(12.0 / (4.0 + 2.0 * ratio))
  return max(n_head, int(round(d / n_head)) * n_head)


def model_steps(cells: list[Cell], s: dict) -> float:
  """Model-steps of the sweep in units of one base-shape model (cost ~ layers x width^2)."""
  total = 0.0
  for c in cells:
    o = c.overrides
    rel = (o["model.n_layer"] / s["n_layer"]) * (o["model.d_model"] / s["d_model"]) ** 2
    rel *= 1 + 0.5 * (o["model.mlp_ratio"] - 4) / 6  # the MLP is about half a block's FLOPs
    total += o["train.steps"] * rel
  return total


def base_overrides(s: dict, warmup_steps: int) -> dict:
  """What every cell of a norm x MLP study at scale ``s`` starts from: its shape and
  schedule, pre-LN, GPT-2 init, GELU at r = 4, the diagnostics on (the arms change the rest)."""
  return {"model.n_layer": s["n_layer"], "model.d_model": s["d_model"],
          "model.n_head": s["n_head"], "model.block_size": s["block_size"],
          "train.batch_size": s["batch_size"], "train.steps": s["steps"],
          "train.eval_every": s["eval_every"], "train.log_every": s["log_every"],
          "checkpoint.every": s["eval_every"], "checkpoint.keep": 1,
          "diagnostics.enabled": True, "diagnostics.every": s["diag_every"],
          "diagnostics.early_steps": 5, "sample.num_samples": 0,
          "model.norm": "pre", "model.init": "gpt2", "model.mlp_ratio": 4.0,
          "model.activation": "gelu_tanh", "train.warmup_steps": warmup_steps,
          **s.get("extra", {})}


def get_sweep(scale: str = "cpu") -> Sweep:
  if scale not in SCALES:
    raise errors.ConfigError(f"--scale={scale!r}: expected one of {sorted(SCALES)}")
  s = SCALES[scale]
  common = base_overrides(s, s["warmup"]["long"])
  cells: list[Cell] = []

  def add(group: str, arms: tuple[str, ...], rates, refinable=True, **o):
    for lr in rates:
      for seed in s["seeds"]:
        cells.append(Cell(f"{group}-lr{lr:g}-seed{seed}",
                          {**common, **o, "train.learning_rate": lr, "train.seed": seed},
                          arms, seed, group, 0, refinable))

  for norm in ("pre", "post"):
    for warm, steps in s["warmup"].items():
      arms = (f"norm:{norm}/{warm}",)
      if warm == "long":  # the base arm of the MLP comparisons and the gpt2 init profiles
        arms += (f"init:gpt2/{norm}",) + (("mlp_width:4", "mlp_matched:4") if norm == "pre" else ())
      add(f"{norm}-{warm}", arms, s["rates"], **{"model.norm": norm, "train.warmup_steps": steps})
  for r in (1, 2, 8):
    add(f"mlp{r}", (f"mlp_width:{r}",), s["narrow_rates"], **{"model.mlp_ratio": float(r)})
  for r in s["matched"]:
    add(f"matched{r}", (f"mlp_matched:{r}",), s["narrow_rates"], **{
        "model.mlp_ratio": float(r), "model.d_model": matched_d_model(r, s["d_model"], s["n_head"])})
  add("swiglu", ("swiglu",), s["narrow_rates"], **{"model.activation": "swiglu", "model.mlp_ratio": 8 / 3})
  for norm in ("pre", "post"):
    add(f"xavier-{norm}", (f"init:xavier/{norm}",), s["rates"][:1], refinable=False, **{
        "model.norm": norm, "model.init": "xavier", "train.steps": s["init_steps"],
        "train.warmup_steps": 0, "train.eval_every": s["init_steps"],
        "checkpoint.every": s["init_steps"], "diagnostics.every": s["init_steps"]})
    if s["deep_layers"]:
      add(f"deep-{norm}", (f"depth:{norm}",), s["deep_rates"], **{
          "model.norm": norm, "model.n_layer": s["deep_layers"]})
  out = split_groups(cells, s.get("members_per_program"))
  cost = model_steps(out, s)
  return Sweep("norm_mlp", scale, s["base"], out, description=describe(s, out, cost, scale))


def describe(s: dict, cells: list[Cell], cost: float, scale: str) -> str:
  groups = len({c.group for c in cells})
  refine = REFINE_SHARE * sum(model_steps([c], s) for c in cells if c.group.split("-")[0] in ("pre", "post"))
  text = (f"Base config `{s['base']}` with {s['n_layer']} layers, d_model {s['d_model']}, "
          f"{s['n_head']} heads, context {s['block_size']}, batch {s['batch_size']}, "
          f"{s['steps']} steps, AdamW with warmup (none 0, long {s['warmup']['long']} steps: "
          f"'with warmup' is the long one, fixed before the run) and cosine decay to 10 % of "
          f"the peak rate. Norm arms: base grid {list(s['rates'])}; MLP and SwiGLU arms: "
          f"{list(s['narrow_rates'])} (r = 4 is the pre-LN long-warmup arm); seeds "
          f"{list(s['seeds'])} everywhere; then up to two rounds of rates added where a "
          f"learning arm's optimum was not bracketed within 2x (experiments/sweep.py); "
          + (f"depth arms: {s['deep_layers']} layers at {list(s['deep_rates'])}; "
             if s["deep_layers"] else "no depth arms (cut); ")
          + f"xavier init arms: {s['init_steps']} steps (only their step-0 gradient profile "
          f"is used). A seed sets the initialisation and the batch order, the same in every "
          f"arm. {len(cells)} models in {groups} groups before the added rounds, "
          f"{cost:,.0f} base-shape model-steps (plus about {refine:,.0f} for the rounds).")
  if scale == "smoke":
    text = ("**Smoke scale: toy models (2 layers, 30 steps) that prove the pipeline end to end; "
            "their numbers and verdicts say nothing about the literature.** " + text)
  if scale == "cpu":
    text += (f" Budget: at {SECONDS_PER_MODEL_STEP_CPU} s per base-shape model-step on an "
             f"idle 2-core CPU (measured, compiles, evaluations and probes included), about "
             f"{(cost + refine) * SECONDS_PER_MODEL_STEP_CPU / 60:.0f} minutes. Cut to fit "
             f"(against the 164-model study): the short warmup (the rule fixes the long one), "
             f"the rate 1e-4 and 3e-2 from the base grid (3e-2 returns as an added rate where "
             f"an optimum sits at 1e-2), the depth arms, and the parameter-matched r = 1 arm "
             f"(the costliest at twice the base width); every arm a verdict uses has 3 seeds.")
  return text
