"""The muP base stage (issue 29): the base model's readout and attention multipliers, tuned at the base width with the learning rate.

  python -m experiments.sweep --sweep=mup_base --scale=cpu --dry_run
  python -m experiments.sweep --sweep=mup_base --scale=cpu      # about 20 minutes, idle 2-core CPU
  python -m experiments.report --sweep_dir=runs/sweeps/mup_base-cpu --pack=results/mup_base-cpu --out=docs/studies/mup_base-cpu

μTransfer (Yang et al. 2022, section 3) tunes the base model's multipliers at the base width,
then carries them unchanged to every width. The width ladder's shape (``research/ladder.py``)
at d_model = base_width = 32 under muP, which at its base width is the sp model with the same
multipliers to the bit, so the choice is the tuned sp base model's. Readout multiplier 1-16
(factor-2 steps; the reference implementation found 8 at base 16), attention multiplier 0.5,
1, 2 (the embedding multiplier stays 1: under Adam the input layer's updates are of order the
rate at any width), each over the rates 1e-3 .. 1e-1, seeds 200-202; refinable: a seed whose
optimum is at the rate grid's edge gets the next rate beyond it before anything is chosen.
results.json's ``choice`` is what the muTransfer ladder, the z-loss studies and
``experiments/coord_check.py`` read (``research.ladder.base_choice``).
"""

from experiments.readings.mup_base import ChoiceGrid
from research import kinds
from research import ladder
from research.study import Arm, Grid, Study

CPU, SMOKE = ladder.CPU, ladder.SMOKE
MUP = {"model.d_model": 32, "model.parametrization": "mup", "model.base_width": 32,
       "model.mup_attention": "base", "model.mup_decay": "constant"}
BY = ("model.readout_multiplier", "model.attention_multiplier")
PAIRS = [(r, a) for r in (1.0, 2.0, 4.0, 8.0, 16.0) for a in (0.5, 1.0, 2.0)]
ARMS = tuple(Arm(f"readout={r:g},attention={a:g}", dict(zip(BY, (r, a))),
                 group=f"readout{r:g}-attention{a:g}") for r, a in PAIRS)
CHOICE = kinds.Choice("The base multipliers the ladder carries", arms=tuple(a.name for a in ARMS),
                      by=BY, default=(1.0, 1.0), tie=0.02, carried="The width ladder")

STUDY = Study(
    name="mup_base",
    question=("Which readout and attention multipliers, and which base rate, should the width "
              "ladder carry from the base width (muP's base model, tuned first)?"),
    design=("Exploratory: a tuning stage. Its grid, seeds (none an earlier study used) and choice "
            "rule were committed before it ran; its output is a choice, not a verdict on the "
            "literature: the chosen setting's difference from the default is measured on the "
            "seeds it was chosen on (optimistic), and the ladder that uses it runs on other seeds."),
    arms=ARMS,
    scales={
        "cpu": Grid(rates=(1e-3, 3e-3, 1e-2, 3e-2, 1e-1), seeds=(200, 201, 202), refine=True,
                    shared={**ladder.ladder_overrides(CPU), **MUP},
                    seconds_per_model_step=ladder.SECONDS_PER_MODEL_STEP_CPU[32],
                    seconds_per_program=ladder.SECONDS_PER_GROUP_CPU),
        "smoke": Grid(rates=(1e-3, 1e-2, 1e-1), seeds=(200, 201), refine=True, smoke=True,
                      shared={**ladder.ladder_overrides(SMOKE), **MUP},
                      arms=("readout=1,attention=1", "readout=4,attention=1")),
    },
    claims=(CHOICE,),
    reports=(ChoiceGrid(CHOICE),),
)
