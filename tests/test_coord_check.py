"""The coordinate check: sp grows with width, muP stays flat, and a muP that forgets any
one of its rules (init, learning rate, attention 1/d_head, readout multiplier) does not.

Three widths, one layer, three steps; a rule that shows at initialisation is checked
there alone (the full check holds the same ``@0`` sizes): 9 trained rungs and 9 forward
passes, compiling dominates."""

import math

import numpy as np
import pytest

from andrea_jax.tools import coord_check
from andrea_jax import configdict
from andrea_jax import mup
from andrea_jax import step as step_lib

WIDTHS = (32, 64, 128)
LADDER = coord_check.Ladder(n_layer=1, n_head=4, vocab_size=64, block_size=16)


def settings(steps):
  t = configdict.group(step_lib.TrainConfig)
  t.update(steps=steps, learning_rate=1e-2, batch_size=8)
  return t


def check(parametrization, steps=3):
  return coord_check.coord_check(WIDTHS, parametrization, settings(steps), ladder=LADDER)


def test_sp_grows_and_mup_stays_flat():
  sp, mu = check("sp"), check("mup")
  assert coord_check.verdict(sp) == "grows", sp["slopes"]
  assert coord_check.verdict(mu) == "flat", mu["slopes"]
  # What grows under sp: what Adam's updates did to the stream, and the logits.
  assert coord_check.excess(sp)["stream.0.mlp@delta"] > coord_check.GROWS, sp["slopes"]
  assert coord_check.excess(sp)["logits@delta"] > coord_check.GROWS, sp["slopes"]


# Each rule swapped back to the standard parametrisation's, one at a time (the model and
# the optimizer read them from andrea_jax/mup.py while tracing), the quantity that must
# show it, and the steps that takes (0: it shows at initialisation).
FORGOTTEN = {
    "init": ("hidden_init_scale", lambda cfg: 1.0, "branch.0.attn@0", 0),
    "learning_rate": ("hidden_lr_scale", lambda cfg: 1.0, "stream.0.mlp@delta", 3),
    "attention_1/d": ("attention_scale", lambda cfg: 1 / math.sqrt(cfg.head_dim), "attn_logits.0@0", 0),
    "readout_multiplier": ("readout_multiplier", lambda cfg: 1.0, "logits@0", 0),
}


@pytest.mark.parametrize("forgotten", FORGOTTEN)
def test_a_mup_that_forgets_one_rule_is_not_flat(forgotten, monkeypatch):
  name, standard_rule, shows, steps = FORGOTTEN[forgotten]
  monkeypatch.setattr(mup, name, standard_rule)
  result = check("mup", steps)
  assert coord_check.verdict(result) != "flat", result["slopes"]
  assert coord_check.excess(result)[shows] > coord_check.FLAT, result["slopes"]


def test_the_command_prints_slopes_predictions_and_the_verdict():
  from experiments import coord_check as command  # pylint: disable=import-outside-toplevel
  result = {"widths": [32, 64], "sizes": {"logits@0": [0.2, 0.1], "stream.0.mlp@delta": [1.0, 2.0]},
            "slopes": {"logits@0": -1.0, "stream.0.mlp@delta": 1.0}}
  lines = command.table("sp", result).splitlines()
  assert lines[0] == "sp: grows"
  assert lines[2].split() == ["logits@0", "0.2", "0.1", "-1.00", "-0.5"]
  assert lines[3].split() == ["stream.0.mlp@delta", "1", "2", "+1.00", "+0.0"]
  with pytest.raises(ValueError, match="--widths=32,x: expected positive integers"):
    command.parse_widths(["32", "x"])
  with pytest.raises(ValueError, match="at least two different widths"):
    command.parse_widths(["32", "32"])


def test_the_command_defaults_to_the_base_stages_multipliers(tmp_path):
  from experiments import coord_check as command  # pylint: disable=import-outside-toplevel
  committed = command.base_multipliers(None, None)
  assert committed == {"readout_multiplier": 8.0, "attention_multiplier": 1.0}  # results/mup_base-cpu
  assert command.base_multipliers(2.0, None) == {"readout_multiplier": 2.0, "attention_multiplier": 1.0}
  choice = tmp_path / "results.json"
  choice.write_text('{"choice": {"readout_multiplier": 4, "attention_multiplier": 0.5}}')
  assert command.base_multipliers(None, None, str(choice)) == {"readout_multiplier": 4.0,
                                                                "attention_multiplier": 0.5}
  assert command.base_multipliers(None, 3.0, str(tmp_path / "none.json")) == {
      "readout_multiplier": 1.0, "attention_multiplier": 3.0}


def test_the_base_multipliers_reach_every_rung():
  # At init the output logits are linear in the readout multiplier, at every width.
  t = configdict.group(step_lib.TrainConfig)
  t.update(steps=0, learning_rate=1e-2, batch_size=2, seed=0)
  ladder = coord_check.Ladder(n_layer=1, n_head=2, vocab_size=32, block_size=8)
  plain = coord_check.coord_check((16, 32), "mup", t, ladder=ladder)
  tuned = coord_check.coord_check((16, 32), "mup", t, ladder=ladder, readout_multiplier=4.0)
  np.testing.assert_allclose(tuned["sizes"]["logits@0"], 4 * np.asarray(plain["sizes"]["logits@0"]),
                             rtol=1e-5)
