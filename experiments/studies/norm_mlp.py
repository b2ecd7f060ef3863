"""The norm x MLP study: pre- or post-LN with and without warmup over a rate grid; the MLP ratio at fixed d_model and at a matched parameter count, SwiGLU; per-layer profiles at init; depth.

  python -m experiments.sweep --sweep=norm_mlp --scale=cpu   # 108 models, then rounds of rates
  python -m experiments.sweep --sweep=norm_mlp --scale=gpu   # andrea120m, one model a program
  python -m experiments.report --sweep_dir=docs/results/norm_mlp-cpu

The arms' names are those its committed cells recorded (``norm:pre/long``, ``mlp_width:2``);
nothing parses them: each is an ``Arm`` whose overrides make it, and the claims name them.
The pre-LN long-warmup program is also the MLP ratio 4 of both MLP comparisons and the
GPT-2 init profile (``also``). Every claim is judged alone (``family=None``), as its rules were.
"""

import math

from research import curves
from research import kinds
from research import ladder
from research.study import Arm, Grid, PerArm, Study

ALONE = dict(family=None)
MATCHED = (1, 2, 8)  # the parameter-matched ratios a scale may train (4 is pre-LN's own)


def grid(layers, width, heads, block, batch, steps, warmup, evals, diags, logs, rates, narrow,
         matched, deep, deep_rates, probe_steps, extra=None, **kw) -> Grid:
  """A scale: its shape and schedule (pre-LN, GPT-2 init, GELU at ratio 4, the long warmup,
  probes on), the norm arms at ``rates``, the MLP arms at ``narrow`` ones, the xavier
  probes ``probe_steps`` long at the first rate, the depth arms ``deep`` layers deep (0: cut)."""
  shared = {"model.n_layer": layers, "model.d_model": width, "model.n_head": heads,
            "model.block_size": block, "train.batch_size": batch, "train.steps": steps,
            "train.eval_every": evals, "train.log_every": logs, "checkpoint.every": evals,
            "checkpoint.keep": 1, "diagnostics.enabled": True, "diagnostics.every": diags,
            "diagnostics.early_steps": 5, "sample.num_samples": 0, "model.norm": "pre",
            "model.init": "gpt2", "model.mlp_ratio": 4.0, "model.activation": "gelu_tanh",
            "train.warmup_steps": warmup, **(extra or {})}
  probe = PerArm(rates[:1], {k: probe_steps for k in ("train.steps", "train.eval_every",
                                                      "checkpoint.every", "diagnostics.every")})
  per_arm = {**{a: PerArm(narrow) for a in ("mlp_width:1", "mlp_width:2", "mlp_width:8", "swiglu")},
             **{f"mlp_matched:{r}": PerArm(narrow, {"model.d_model": ladder.matched_d_model(r, width, heads)})
                for r in matched},
             "init:xavier/pre": probe, "init:xavier/post": probe,
             **{f"depth:{n}": PerArm(deep_rates, {"model.n_layer": deep}) for n in ("pre", "post")}}
  cut = {f"mlp_matched:{r}" for r in MATCHED if r not in matched} | ({"depth:pre", "depth:post"} if not deep else set())
  return Grid(rates, (0, 1, 2), shared, refine=True, per_arm=per_arm,
              arms=tuple(a.name for a in ARMS if a.name not in cut), **kw)


ARMS = (
    Arm("norm:pre/none", {"train.warmup_steps": 0}, "pre-LN without warmup", "pre-none"),
    Arm("norm:pre/long", {}, "pre-LN, long warmup; also ratio 4 and GPT-2's init profile", "pre-long",
        also=("init:gpt2/pre", "mlp_width:4", "mlp_matched:4")),
    Arm("norm:post/none", {"model.norm": "post", "train.warmup_steps": 0}, "post-LN without warmup", "post-none"),
    Arm("norm:post/long", {"model.norm": "post"}, "post-LN, long warmup", "post-long", also=("init:gpt2/post",)),
    *(Arm(f"mlp_width:{r}", {"model.mlp_ratio": float(r)}, f"MLP ratio {r}", f"mlp{r}") for r in (1, 2, 8)),
    *(Arm(f"mlp_matched:{r}", {"model.mlp_ratio": float(r)}, f"ratio {r} at ratio 4's parameters", f"matched{r}")
      for r in MATCHED),
    Arm("swiglu", {"model.activation": "swiglu", "model.mlp_ratio": 8 / 3}, "SwiGLU at ratio 8/3"),
    Arm("init:xavier/pre", {"model.init": "xavier", "train.warmup_steps": 0}, "Xavier init", "xavier-pre", refine=False),
    Arm("depth:pre", {}, "pre-LN, deeper", "deep-pre"),
    Arm("init:xavier/post", {"model.norm": "post", "model.init": "xavier", "train.warmup_steps": 0},
        "post-LN, Xavier init", "xavier-post", refine=False),
    Arm("depth:post", {"model.norm": "post"}, "post-LN, deeper", "deep-post"),
)

STUDY = Study(
    name="norm_mlp",
    question=("Does post-LN need warmup and a smaller rate, and is it more sensitive to the rate, "
              "than pre-LN (Xiong et al. 2020; Liu et al. 2020; Wortsman et al. 2023)? Do wider "
              "MLPs help with diminishing returns, do shapes at a matched parameter count perform "
              "alike (Kaplan et al. 2020), does SwiGLU beat GELU (Shazeer 2020)?"),
    design=("Exploratory study. Its rules were revised after its data, so its verdicts are hypotheses, "
            "not tests: the confirmatory study (`norm_mlp_confirm`: unseen seeds, one rate grid, rules "
            "and power plan committed before its run) tests them."),
    arms=ARMS,
    scales={
        "cpu": grid(6, 64, 2, 64, 16, 450, 90, 90, 150, 15, (3e-4, 1e-3, 3e-3, 1e-2), (2e-3, 4e-3, 8e-3),
                    (2, 8), 0, (), 10, seconds_per_model_step=0.067),
        "smoke": grid(2, 32, 2, 32, 8, 30, 9, 15, 15, 5, (1e-3, 1e-2, 1e-1), (3e-3, 1e-2, 3e-2), (2, 8), 4,
                      (1e-3, 1e-2, 1e-1), 2, smoke=True,
                      extra={"model.vocab_size": 321, "data.max_docs": 40, "train.eval_batches": 2}),
        "gpu": grid(12, 768, 12, 1024, 64, 4000, 800, 500, 1000, 50, (1e-4, 3e-4, 1e-3, 3e-3, 1e-2),
                    (5e-4, 1e-3, 2e-3), MATCHED, 24, (1e-4, 3e-4, 1e-3), 10, base_config="andrea120m",
                    members_per_program=1),  # one andrea120m at batch 64 x 1024 fills an H200
    },
    claims=(
        kinds.Interaction("post-LN needs warmup; pre-LN does not", **ALONE, arms=(
            "norm:post/none", "norm:post/long", "norm:pre/none", "norm:pre/long"), margin=0.05, and_first=True,
            learn=("norm:post/long", "norm:pre/long"), source="Xiong et al. 2020; 0.05 nats: about 1 % of the loss"),
        kinds.Contrast("post-LN needs a smaller learning rate", **ALONE, arm="norm:post/long",
                       reference="norm:pre/long", quantity="log_optimum", margin=math.log(curves.RATE_FACTOR)),
        kinds.Contrast("post-LN is more sensitive to the learning rate", **ALONE, arm="norm:post/long",
                       reference="norm:pre/long", predict="higher", quantity="sensitivity",
                       margin=curves.SENSITIVITY_MARGIN, guard=("learns",)),
        kinds.ProfilePair("at init post-LN's gradients grow toward the output; pre-LN's are flat", **ALONE,
                          grows="init:xavier/post", flat="init:xavier/pre",
                          reported=(("init:gpt2/post", "init:gpt2/pre"),)),
        kinds.EndProbe("pre-LN's residual stream grows with depth", **ALONE, arm="norm:pre/long"),
        kinds.Interaction("post-LN's trouble grows with depth", **ALONE, arms=(
            "depth:post", "norm:post/long", "depth:pre", "norm:pre/long"), margin=0.05, source="Liu et al. 2020"),
        kinds.AllEquivalent("parameter-matched MLP ratios perform alike", **ALONE, arms=tuple(
            f"mlp_matched:{r}" for r in (1, 2, 4, 8)), reference="mlp_matched:4", margin=0.02,
            source="Kaplan et al. 2020, Fig. 5: a few percent"),
        kinds.Diminishing("wider MLPs are better, with diminishing returns", **ALONE,
                          arms=tuple(f"mlp_width:{r}" for r in (1, 2, 4, 8))),
        kinds.Contrast("SwiGLU beats GELU at equal size", **ALONE, arm="swiglu", reference="mlp_width:4",
                       against=-0.02, guard=("edge",), source="Shazeer 2020: about 0.04 nats; half of it"),
    ),
)
