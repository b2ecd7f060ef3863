"""The norm x MLP study: pre- or post-LN with and without warmup; the MLP ratio; SwiGLU; init profiles; depth.

``python -m experiments.sweep --sweep=norm_mlp --scale=cpu`` (108 models, then rounds of rates).
Arms keep the names its committed cells recorded; nothing parses them (``also``: pre-LN's
program is also ratio 4 and GPT-2's init profile).
"""

import math

from experiments.readings.norm_mlp import InitProfiles
from research import curves, kinds
from research.study import Arm, Grid, Study

NORM = ("norm:pre/none", "norm:pre/long", "norm:post/none", "norm:post/long")
WIDTH = tuple(f"mlp_width:{r}" for r in (1, 2, 4, 8))
MATCHED = tuple(f"mlp_matched:{r}" for r in (1, 2, 4, 8))  # 4: the pre-LN arm itself
DEPTH = ("depth:pre", "depth:post")


def matched_d_model(ratio: float, d_model: int, n_head: int, reference: float = 4.0) -> int:
  """The width at which MLP ratio ``ratio`` keeps a block's non-embedding parameter count,
  ``(4 + 2 r) d^2``, that of ``reference`` at ``d_model`` (Kaplan et al. 2020's comparison
  of shapes), a multiple of ``n_head``."""
  d = d_model * math.sqrt((4.0 + 2.0 * reference) / (4.0 + 2.0 * ratio))
  return max(n_head, int(round(d / n_head)) * n_head)


def grid(layers, width, heads, block, batch, steps, warmup, evals, diags, logs, rates, narrow,
         matched, deep, deep_rates, probe_steps, extra=None, **kw) -> Grid:
  """A scale: pre-LN, GPT-2 init, GELU at ratio 4, long warmup; depth ``deep`` 0: the depth arms cut."""
  shared = {"model.n_layer": layers, "model.d_model": width, "model.n_head": heads, "model.block_size": block,
            "train.batch_size": batch, "train.steps": steps, "train.eval_every": evals, "train.log_every": logs,
            "checkpoint.every": evals, "checkpoint.keep": 1, "diagnostics.enabled": True,
            "diagnostics.every": diags, "diagnostics.early_steps": 5, "sample.num_samples": 0,
            "model.norm": "pre", "model.init": "gpt2", "model.mlp_ratio": 4.0,
            "model.activation": "gelu_tanh", "train.warmup_steps": warmup, **(extra or {})}
  short = ("train.steps", "train.eval_every", "checkpoint.every", "diagnostics.every")
  rates_of = {**dict.fromkeys(WIDTH[:2] + WIDTH[3:] + ("swiglu",) + tuple(f"mlp_matched:{r}" for r in matched), narrow),
              **dict.fromkeys(("init:xavier/pre", "init:xavier/post"), rates[:1]), **dict.fromkeys(DEPTH, deep_rates)}
  overrides_of = {**{f"mlp_matched:{r}": {"model.d_model": matched_d_model(r, width, heads)} for r in matched},
                  **dict.fromkeys(("init:xavier/pre", "init:xavier/post"), dict.fromkeys(short, probe_steps)),
                  **dict.fromkeys(DEPTH, {"model.n_layer": deep})}
  cut = {f"mlp_matched:{r}" for r in (1, 2, 8) if r not in matched} | (set() if deep else set(DEPTH))
  return Grid(rates, (0, 1, 2), shared, refine=True, arm_rates=rates_of, arm_overrides=overrides_of,
              arms=tuple(a.name for a in ARMS if a.name not in cut), **kw)


XAVIER = {"model.init": "xavier", "train.warmup_steps": 0}
def alone(claim, *arms, **kw):
  """A contrast decided alone (Holm over its own parts) as its rules were: ``a - b`` or ``(a - b) - (c - d)``,
  a part decisively within ``margin`` never for it, Welch where two arms share fewer than two seeds."""
  return kinds.Contrast(claim, family=None, terms=tuple(zip(arms, (1, -1, -1, 1))), holm="every",
                        welch=True, **kw)


ARMS = (
    Arm(NORM[0], {"train.warmup_steps": 0}, "pre-LN without warmup", "pre-none"),
    Arm(NORM[1], {}, "pre-LN, long warmup", "pre-long", also=("init:gpt2/pre", WIDTH[2], MATCHED[2])),
    Arm(NORM[2], {"model.norm": "post", "train.warmup_steps": 0}, "post-LN without warmup", "post-none"),
    Arm(NORM[3], {"model.norm": "post"}, "post-LN, long warmup", "post-long", also=("init:gpt2/post",)),
    *(Arm(f"mlp_width:{r}", {"model.mlp_ratio": float(r)}, f"MLP ratio {r}", f"mlp{r}") for r in (1, 2, 8)),
    *(Arm(f"mlp_matched:{r}", {"model.mlp_ratio": float(r)}, f"ratio {r} at 4's size", f"matched{r}")
      for r in (1, 2, 8)),
    Arm("swiglu", {"model.activation": "swiglu", "model.mlp_ratio": 8 / 3}, "SwiGLU at ratio 8/3"),
    Arm("init:xavier/pre", XAVIER, "Xavier init", "xavier-pre", refine=False),
    Arm(DEPTH[0], {}, "pre-LN, deeper", "deep-pre"),
    Arm("init:xavier/post", {**XAVIER, "model.norm": "post"}, "post-LN, Xavier", "xavier-post",
        refine=False),
    Arm(DEPTH[1], {"model.norm": "post"}, "post-LN, deeper", "deep-post"),
)

STUDY = Study(
    name="norm_mlp",
    question=("Does post-LN need warmup and a smaller rate, and is it more sensitive to the rate, than "
              "pre-LN (Xiong et al. 2020, Liu et al. 2020, Wortsman et al. 2023)? Do wider MLPs help, with "
              "diminishing returns; do shapes of one size perform alike (Kaplan et al. 2020); does SwiGLU "
              "beat GELU (Shazeer 2020)?"),
    design=("Exploratory study. Its rules were revised after its data, so its verdicts are hypotheses, not "
            "tests: the confirmatory study (`norm_mlp_confirm`: unseen seeds, one rate grid, rules and "
            "power plan committed before its run) tests them."),
    arms=ARMS,
    scales={  # grid(layers, width, heads, context, batch, steps, warmup, eval/probe/log every, rates,
              #      MLP rates, matched ratios, depth, depth rates, xavier steps, extra overrides)
        "cpu": grid(6, 64, 2, 64, 16, 450, 90, 90, 150, 15, (3e-4, 1e-3, 3e-3, 1e-2),
                    (2e-3, 4e-3, 8e-3), (2, 8), 0, (), 10, seconds_per_model_step=0.067),
        "smoke": grid(2, 32, 2, 32, 8, 30, 9, 15, 15, 5, (1e-3, 1e-2, 1e-1), (3e-3, 1e-2, 3e-2), (2, 8), 4,
                      (1e-3, 1e-2, 1e-1), 2, {"model.vocab_size": 321, "data.max_docs": 40, "train.eval_batches": 2},
                      smoke=True),
        "gpu": grid(  # one andrea120m at batch 64 x 1024 fills an H200: one model per program
                    12, 768, 12, 1024, 64, 4000, 800, 500, 1000, 50, (1e-4, 3e-4, 1e-3, 3e-3, 1e-2),
                    (5e-4, 1e-3, 2e-3), (1, 2, 8), 24, (1e-4, 3e-4, 1e-3), 10, base_config="andrea120m",
                    members_per_program=1),
    },
    claims=(  # each judged alone, Holm over its own parts, as its rules were
        alone("post-LN needs warmup; pre-LN does not", *NORM[2:], *NORM[:2], margin=0.05,
              also=(kinds.pair(*NORM[2:]),), learners=(NORM[3], NORM[1])),
        alone("post-LN needs a smaller learning rate", NORM[3], NORM[1], predict="lower", quantity="log_optimum",
              margin=math.log(curves.RATE_FACTOR)),
        alone("post-LN is more sensitive to the learning rate", NORM[3], NORM[1], quantity="sensitivity",
              margin=curves.SENSITIVITY_MARGIN, edge=False),
        # Xiong et al. 2020: post-LN's gradients grow toward the output, pre-LN's do not.
        kinds.Contrast("at init post-LN's gradients grow toward the output; pre-LN's are flat", family=None,
                       terms=(("init:xavier/post", 1),), flat=("init:xavier/pre",), bound=math.log(1.5),
                       quantity=kinds.Probe("grad_mlp", "init", 0), report=("init:gpt2/post", "init:gpt2/pre"),
                       learners=(), edge=False),
        kinds.Contrast("pre-LN's residual stream grows with depth", family=None, terms=((NORM[1], 1),),
                       quantity=kinds.Probe("residual_norm", "end", 1), bound=math.log(1.5), learners=(), edge=False,
                       beside=(NORM[3],)),
        alone("post-LN's trouble grows with depth", DEPTH[1], NORM[3], DEPTH[0], NORM[1], margin=0.05, learners=()),
        # Kaplan et al. 2020, Fig. 5: at one parameter count the shape moves the loss "a few percent".
        kinds.Alike("parameter-matched MLP ratios perform alike", family=None, arms=MATCHED, reference=MATCHED[2],
                    pairs="every", margin=0.02, relative=True),
        # Each step and each later gain against the first (steps: wider minus narrower).
        kinds.Contrast("wider MLPs are better, with diminishing returns", family=None, terms=kinds.pair(*WIDTH[1::-1]),
                       predict="lower", holm="first", learners=(), welch=True,
                       also=(kinds.pair(*WIDTH[2:0:-1]), kinds.pair(*WIDTH[:1:-1]),
                             *(((a, 1), (b, -1), (WIDTH[0], -1), (WIDTH[1], 1)) for a, b in zip(WIDTH[1:], WIDTH[2:])))),
        alone("SwiGLU beats GELU at equal size", "swiglu", WIDTH[2], predict="lower", against=-0.02, learners=(),
              effect=0.04, source="Shazeer 2020: about 0.04 nats"),
    ),
    reports=(InitProfiles(("init:xavier/post", "init:xavier/pre", "init:gpt2/post", "init:gpt2/pre")),
             kinds.RateTable((("norm", "Norm placement x warmup", NORM, ()),
                              ("mlp_width", "MLP ratio at fixed width (and SwiGLU)", WIDTH + ("swiglu",), ()),
                              ("mlp_matched", "MLP ratio, parameter-matched", MATCHED, ()),
                              ("depth", "Deeper models", DEPTH, (NORM[1], NORM[3])))),
             kinds.BestCurves(NORM)),
)
