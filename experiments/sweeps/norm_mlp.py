"""Norm placement x warmup over a learning-rate grid; the MLP ratio; init and depth checks.

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
from experiments.sweeps.base import Cell, Sweep

SCALES = {
    # A small ANDREA on the built-in corpus (vocabulary 2305): 6 layers, d_model 64 (2 heads:
    # parameter-matched widths need only be even), 64-token
    # context, 16 sequences per step. Width and context are half of the 300-step study's
    # (6 x 128, context 128): a model-step costs about a fifth, which buys the rate grid,
    # three seeds and 1.5 x the steps within the budget (see CPU_SECONDS_PER_MODEL_STEP).
    "cpu": dict(base="tiny", n_layer=6, d_model=64, n_head=2, block_size=64, batch_size=16,
                steps=450, warmup={"none": 0, "short": 20, "long": 90}, eval_every=90,
                diag_every=150, log_every=15,
                rates=(1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2), seeds=(0, 1, 2),
                narrow_rates=(1e-3, 3e-3, 1e-2), narrow_seeds=(0, 1), deep_layers=12,
                # Around where the 300-step study saw each learn (post-LN at 3e-4, not 1e-3).
                deep_rates={"pre": (1e-3, 3e-3), "post": (3e-4, 1e-3)}, init_steps=10),
    # The cpu grid's structure at toy size, a few minutes: proves the command end to end.
    "smoke": dict(base="tiny", n_layer=2, d_model=32, n_head=2, block_size=32, batch_size=8,
                  steps=30, warmup={"none": 0, "short": 3, "long": 9}, eval_every=15,
                  diag_every=15, log_every=5, rates=(1e-3, 1e-2, 1e-1), seeds=(0, 1, 2),
                  narrow_rates=(1e-3, 1e-2), narrow_seeds=(0, 1), deep_layers=4,
                  deep_rates={"pre": (1e-3, 1e-2), "post": (1e-3, 1e-2)}, init_steps=2,
                  extra={"model.vocab_size": 321, "data.max_docs": 40, "train.eval_batches": 2}),
    # The andrea120m shape on one GPU.
    "gpu": dict(base="andrea120m", n_layer=12, d_model=768, n_head=12, block_size=1024,
                batch_size=64, steps=4000, warmup={"none": 0, "short": 100, "long": 800},
                eval_every=500, diag_every=1000, log_every=50,
                rates=(1e-4, 3e-4, 1e-3, 3e-3, 1e-2), seeds=(0, 1, 2),
                narrow_rates=(3e-4, 1e-3, 3e-3), narrow_seeds=(0, 1),
                deep_layers=24, deep_rates={"pre": (3e-4, 1e-3), "post": (1e-4, 3e-4)},
                init_steps=10,
                # One andrea120m at batch 64 x 1024 fills an H200's memory: one model per
                # program, the programs spread over the GPUs with --parallel/--gpus.
                members_per_program=1),
}

# One base-shape model-step of the cpu scale on a 2-core CPU, everything included
# (compiles, evaluations, probes), measured: the committed study (docs/results/norm_mlp-cpu,
# 75,679 base-shape model-steps) took 93 minutes, about 84 of them on an idle machine
# (its first three groups shared the machine), i.e. 0.067 s. The members of a group step in
# a compiled loop (multi's lax.map on CPUs), measured idle at 1.27x the speed of one by one
# (python -m benchmarks.vmap_members).
SECONDS_PER_MODEL_STEP_CPU = 0.067


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


def split_groups(cells: list[Cell], size: int | None) -> list[Cell]:
  """Groups of at most ``size`` members (``<group>.<i>``), for models too big to stack many."""
  if not size:
    return cells
  count: dict[str, int] = {}
  out = []
  for c in cells:
    i = count.get(c.group, 0)
    count[c.group] = i + 1
    out.append(Cell(c.name, c.overrides, c.arms, c.seed, f"{c.group}.{i // size}"))
  return out


def get_sweep(scale: str = "cpu") -> Sweep:
  if scale not in SCALES:
    raise errors.ConfigError(f"--scale={scale!r}: expected one of {sorted(SCALES)}")
  s = SCALES[scale]
  common = {"model.n_layer": s["n_layer"], "model.d_model": s["d_model"],
            "model.n_head": s["n_head"], "model.block_size": s["block_size"],
            "train.batch_size": s["batch_size"], "train.steps": s["steps"],
            "train.eval_every": s["eval_every"], "train.log_every": s["log_every"],
            "checkpoint.every": s["eval_every"], "checkpoint.keep": 1,
            "diagnostics.enabled": True, "diagnostics.every": s["diag_every"],
            "diagnostics.early_steps": 5, "sample.num_samples": 0,
            "model.norm": "pre", "model.init": "gpt2", "model.mlp_ratio": 4.0,
            "model.activation": "gelu_tanh", "train.warmup_steps": s["warmup"]["long"],
            **s.get("extra", {})}
  cells: dict[tuple, Cell] = {}

  def add(group: str, arm: str, rates, seeds, **o):
    for lr in rates:
      for seed in seeds:
        key = (group, lr, seed)
        if key in cells:  # a cell in several arms (pre-LN, long warmup, r = 4)
          old = cells[key]
          cells[key] = Cell(old.name, old.overrides, old.arms + (arm,), seed, group)
          continue
        cells[key] = Cell(f"{group}-lr{lr:g}-seed{seed}",
                          {**common, **o, "train.learning_rate": lr, "train.seed": seed},
                          (arm,), seed, group)

  for norm in ("pre", "post"):
    for warm, steps in s["warmup"].items():
      add(f"{norm}-{warm}", f"norm:{norm}/{warm}", s["rates"], s["seeds"],
          **{"model.norm": norm, "train.warmup_steps": steps})
  narrow = (s["narrow_rates"], s["narrow_seeds"])
  for r in (1, 2, 4, 8):
    if r == 4:
      add("pre-long", "mlp_width:4", *narrow)
      add("pre-long", "mlp_matched:4", *narrow)
      continue
    add(f"mlp{r}", f"mlp_width:{r}", *narrow, **{"model.mlp_ratio": float(r)})
    add(f"matched{r}", f"mlp_matched:{r}", *narrow, **{
        "model.mlp_ratio": float(r), "model.d_model": matched_d_model(r, s["d_model"], s["n_head"])})
  add("swiglu", "swiglu", *narrow, **{"model.activation": "swiglu", "model.mlp_ratio": 8 / 3})
  for norm in ("pre", "post"):
    add(f"xavier-{norm}", f"init:xavier/{norm}", s["narrow_rates"][:1], s["seeds"], **{
        "model.norm": norm, "model.init": "xavier", "train.steps": s["init_steps"],
        "train.warmup_steps": 0, "train.eval_every": s["init_steps"],
        "checkpoint.every": s["init_steps"], "diagnostics.every": s["init_steps"]})
    add(f"deep-{norm}", f"depth:{norm}", s["deep_rates"][norm], s["narrow_seeds"], **{
        "model.norm": norm, "model.n_layer": s["deep_layers"]})
  # The gpt2 init profiles: the norm arms' cells also stand for init:gpt2/{pre,post}.
  out = []
  for cell in cells.values():
    if cell.group in ("pre-long", "post-long"):
      cell = Cell(cell.name, cell.overrides, cell.arms + (f"init:gpt2/{cell.overrides['model.norm']}",),
                  cell.seed, cell.group)
    out.append(cell)
  out = split_groups(out, s.get("members_per_program"))
  cost = model_steps(out, s)
  return Sweep("norm_mlp", scale, s["base"], out, description=describe(s, out, cost, scale))


def describe(s: dict, cells: list[Cell], cost: float, scale: str) -> str:
  groups = len({c.group for c in cells})
  text = (f"Base config `{s['base']}` with {s['n_layer']} layers, d_model {s['d_model']}, "
          f"{s['n_head']} heads, context {s['block_size']}, batch {s['batch_size']}, "
          f"{s['steps']} steps, AdamW with warmup (none 0, short {s['warmup']['short']}, long "
          f"{s['warmup']['long']} steps) and cosine decay to 10 % of the peak rate. Norm arms: "
          f"rates {list(s['rates'])}, seeds {list(s['seeds'])}; MLP, SwiGLU arms: rates "
          f"{list(s['narrow_rates'])}, seeds {list(s['narrow_seeds'])}; depth arms: "
          f"{s['deep_layers']} layers at rates {s['deep_rates']}; xavier init arms: "
          f"{s['init_steps']} steps (only their step-0 gradient profile is used). A seed sets "
          f"the initialisation and the batch order. {len(cells)} models in {groups} groups (one program each), "
          f"{cost:,.0f} base-shape model-steps.")
  if scale == "smoke":
    text = ("**Smoke scale: toy models (2 layers, 30 steps) that prove the pipeline end to end; "
            "their numbers and verdicts say nothing about the literature.** " + text)
  if scale == "cpu":
    text += (f" Budget: at {SECONDS_PER_MODEL_STEP_CPU} s per base-shape model-step on an "
             f"idle 2-core CPU (measured, compiles, evaluations and probes included), about "
             f"{cost * SECONDS_PER_MODEL_STEP_CPU / 60:.0f} minutes. Cut to fit: width "
             f"and context halved against the 300-step study (6 x 128, context 128) and 450 "
             f"steps; the MLP and SwiGLU arms on three rates and two seeds; the depth check "
             f"on two rates per norm, two seeds.")
  return text
