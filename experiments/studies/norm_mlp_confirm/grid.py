"""The confirmatory norm x MLP study's grid, frozen before its run: one learning-rate grid for both norms, unseen seeds, seeds per arm from the power plan.

  python -m experiments.sweep --sweep=norm_mlp_confirm --scale=cpu --dry_run   # the plan
  python -m experiments.sweep --sweep=norm_mlp_confirm --scale=cpu             # ~2 hours
  python -m experiments.report --sweep_dir=runs/sweeps/norm_mlp_confirm-cpu \\
      --out=docs/results/norm_mlp_confirm-cpu --copy_cells

The model is the exploratory study's cpu shape (6 layers, d_model 64, 450 steps; its
``experiments/studies/norm_mlp/grid.py``). What is fixed here, before the run, and why:

- **One rate grid, the same for both norm arms**, half-decade steps 1e-4 ... 3e-2, chosen from
  the exploratory curves (``docs/results/norm_mlp-cpu``): at 1e-4 both norms are
  under-trained (the 300- and 450-step studies: 6.6+ nats, above the 6.27 unigram plateau);
  at the top both are unstable (post-LN sits on the unigram plateau from 3e-3, 6.23-6.29;
  pre-LN's loss rises from its 5.5e-3 optimum, 4.68, to 5.54 at 3.3e-2, and its seeds split at
  1e-2, std 0.29). No rates are added after the run (no refinement rounds): the grid is
  the design.
- **SwiGLU and the parameter-matched arms on rates they share with GELU r = 4** (the
  ``pre-long`` arm): 1e-3 ... 3e-2 of the same grid (the exploratory optima of those arms lie
  at 4e-3 ... 8e-3), so they are compared paired by seed at each shared rate as well as at
  optima fitted over the same rates.
- **Seeds no earlier study used**: from ``SEED_BASE`` up (every committed study in
  ``docs/results/`` used 0, 1, 2; tests/test_norm_mlp_confirm.py checks them all).
- **Seeds per arm** from the power plan (``plan.py``; ``tests/test_norm_mlp_confirm.py``
  recomputes it and checks these numbers), the claims the plan cannot power are named in
  ``rules.NOT_POWERED``.
- Xavier-initialised pre-/post-LN for Xiong et al.'s claims at initialisation: a few steps
  each (only the step-0 probe is used: ``andrea_jax/diagnostics.py`` records each layer's
  MLP and attention gradient norms and the residual norm after every block on the
  initial parameters).
- Depth (12 layers) is out: the plan states its cost.
"""

from __future__ import annotations

from andrea_jax import errors
from research.sweep import Cell, Sweep
from research import ladder

# The first seed of this study; earlier studies used 0, 1, 2.
SEED_BASE = 100
# One grid for both norm arms (half-decade steps), and the rates of it the MLP arms share with GELU r = 4.
RATES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
SHARED_RATES = (1e-3, 3e-3, 1e-2, 3e-2)
# Seeds per group, from the power plan (plan.py; checked by the tests), frozen before the run.
SEEDS = {"post-none": 8, "post-long": 8, "pre-none": 8, "pre-long": 8, "xavier-post": 9,
         "xavier-pre": 19, "swiglu": 3, "matched2": 3, "matched8": 3}
# Depth is out (plan.py: its cost); its shape, for the plan's figure.
DEEP_LAYERS = 12

SCALES = {
    "cpu": dict(base="tiny", n_layer=6, d_model=64, n_head=2, block_size=64, batch_size=16,
                steps=450, warmup=90, eval_every=90, diag_every=150, log_every=15,
                init_steps=2, seeds=SEEDS, rates=RATES, shared=SHARED_RATES),
    # The cpu grid's structure at toy size (2 layers, 20 steps, 2 seeds a group): proves the
    # command end to end; its numbers mean nothing.
    "smoke": dict(base="tiny", n_layer=2, d_model=32, n_head=2, block_size=32, batch_size=8,
                  steps=20, warmup=6, eval_every=10, diag_every=10, log_every=5, init_steps=2,
                  seeds={k: 2 for k in SEEDS}, rates=(1e-3, 1e-2, 1e-1), shared=(1e-2, 1e-1),
                  extra={"model.vocab_size": 321, "data.max_docs": 40, "train.eval_batches": 2}),
}


def matched_d_model(ratio: float, d_model: int = 64, n_head: int = 2) -> int:
  return ladder.matched_d_model(ratio, d_model, n_head)


# The exploratory study's base overrides, as its package (experiments/studies/norm_mlp/, now
# one file) defined them.
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


def relative_cost(o: dict) -> float:
  """A model-step's cost in base-shape (6 x 64, r = 4) model-steps: layers x width^2, the MLP half a block."""
  return ((o.get("model.n_layer", 6) / 6) * (o.get("model.d_model", 64) / 64) ** 2
          * (1 + 0.5 * (o.get("model.mlp_ratio", 4.0) - 4) / 6))


# Per group of the cpu scale: (rates, overrides that set its cost).
def _shapes() -> dict[str, tuple[tuple[float, ...], dict]]:
  base = {"model.n_layer": 6, "model.d_model": 64, "model.mlp_ratio": 4.0}
  out = {g: (RATES, base) for g in ("post-none", "post-long", "pre-none", "pre-long")}
  out["swiglu"] = (SHARED_RATES, {**base, "model.mlp_ratio": 8 / 3})
  for r in (2, 8):
    out[f"matched{r}"] = (SHARED_RATES, {**base, "model.mlp_ratio": float(r),
                                         "model.d_model": matched_d_model(r)})
  for n in ("post", "pre"):
    out[f"deep-{n}"] = (RATES, {**base, "model.n_layer": DEEP_LAYERS})
  return out


def minutes_per_seed(seconds_per_model_step: float, seconds_per_init_member: float) -> dict[str, float]:
  """Per group, what one more seed costs at the cpu scale (minutes)."""
  steps = SCALES["cpu"]["steps"]
  out = {g: len(rates) * steps * relative_cost(o) * seconds_per_model_step / 60
         for g, (rates, o) in _shapes().items()}
  out["xavier-post"] = out["xavier-pre"] = seconds_per_init_member / 60
  return out


def seeds(group: str, s: dict) -> tuple[int, ...]:
  return tuple(range(SEED_BASE, SEED_BASE + s["seeds"].get(group, 0)))


def get_sweep(scale: str = "cpu") -> Sweep:
  if scale not in SCALES:
    raise errors.ConfigError(f"--scale={scale!r}: expected one of {sorted(SCALES)}")
  s = SCALES[scale]
  common = base_overrides(s, s["warmup"])
  cells: list[Cell] = []

  def add(group: str, arms: tuple[str, ...], rates, **o):
    for lr in rates:
      for seed in seeds(group, s):
        cells.append(Cell(f"{group}-lr{lr:g}-seed{seed}",
                          {**common, **o, "train.learning_rate": lr, "train.seed": seed},
                          arms, seed, group, 0, refinable=False))

  for norm in ("pre", "post"):
    for warm, steps in (("none", 0), ("long", s["warmup"])):
      arms = (f"norm:{norm}/{warm}",)
      if warm == "long":
        arms += (f"init:gpt2/{norm}",) + (("mlp:gelu4",) if norm == "pre" else ())
      add(f"{norm}-{warm}", arms, s["rates"], **{"model.norm": norm, "train.warmup_steps": steps})
  add("swiglu", ("swiglu",), s["shared"], **{"model.activation": "swiglu", "model.mlp_ratio": 8 / 3})
  for r in (2, 8):
    add(f"matched{r}", (f"mlp_matched:{r}",), s["shared"], **{
        "model.mlp_ratio": float(r), "model.d_model": matched_d_model(r, s["d_model"], s["n_head"])})
  for norm in ("pre", "post"):
    add(f"xavier-{norm}", (f"init:xavier/{norm}",), s["rates"][:1], **{
        "model.norm": norm, "model.init": "xavier", "train.steps": s["init_steps"],
        "train.warmup_steps": 0, "train.eval_every": s["init_steps"],
        "checkpoint.every": s["init_steps"], "diagnostics.every": s["init_steps"]})
  return Sweep("norm_mlp_confirm", scale, s["base"], cells, description=describe(s, cells, scale))


def describe(s: dict, cells: list[Cell], scale: str) -> str:
  groups = sorted({c.group for c in cells})
  text = (f"**Confirmatory study: grid, seeds and rules frozen and committed before its run.** "
          f"Base config `{s['base']}` with {s['n_layer']} layers, d_model {s['d_model']}, "
          f"{s['n_head']} heads, context {s['block_size']}, batch {s['batch_size']}, "
          f"{s['steps']} steps, AdamW, cosine decay to 10 % of the peak rate; 'with warmup' "
          f"is the long linear warmup ({s['warmup']} steps), 'without' none. One rate grid for "
          f"both norms, with and without warmup: {list(s['rates'])}; SwiGLU (r = 8/3) and the "
          f"parameter-matched r = 2, 8 on the rates of it they share with GELU r = 4 "
          f"(the pre-LN long-warmup arm): {list(s['shared'])}; Xavier-initialised pre-/post-LN "
          f"for {s['init_steps']} steps (their step-0 probe). No rates added after the run. "
          f"Seeds from {SEED_BASE} (no earlier study used them), per group: "
          + ", ".join(f"{g} {len(seeds(g, s))}" for g in groups)
          + f". A seed sets the initialisation and the batch order, the same in every arm. "
          f"{len(cells)} models in {len(groups)} groups; depth (12 layers) out (the plan's cost).")
  if scale == "smoke":
    text = ("**Smoke scale: toy models that prove the pipeline end to end; their numbers and "
            "verdicts say nothing about the literature.** " + text)
  return text


def plan_lines(scale: str = "cpu") -> list[str]:
  """What ``--dry_run`` prints after the cells: the power plan (cpu scale's)."""
  from experiments.studies.norm_mlp_confirm import plan  # pylint: disable=import-outside-toplevel
  return plan.lines(plan.compute())
