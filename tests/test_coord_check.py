"""The coordinate check: sp grows with width, muP stays flat, and a muP that forgets any
one of its rules (init, learning rate, attention 1/d_head, readout multiplier) grows."""

import math
import os

import pytest

from andrea_jax import coord_check
from andrea_jax import mup
from experiments.configs import common

WIDTHS = (32, 64, 128)
LADDER = coord_check.Ladder(n_layer=1, n_head=4, vocab_size=64, block_size=16)


def settings():
  t = common.train_group()
  t.update(steps=int(os.environ.get("CC_STEPS", 3)), learning_rate=float(os.environ.get("CC_LR", 1e-2)), batch_size=8)
  return t


def check(parametrization):
  return coord_check.coord_check(WIDTHS, parametrization, settings(), ladder=LADDER)


def test_sp_grows_and_mup_stays_flat():
  sp, mu = check("sp"), check("mup")
  assert coord_check.verdict(sp) == "grows", sp["slopes"]
  assert coord_check.verdict(mu) == "flat", mu["slopes"]
  # What grows under sp: what Adam's updates did to the stream, and the logits.
  assert sp["slopes"]["stream.0.mlp@delta"] > coord_check.GROWS, sp["slopes"]
  assert sp["slopes"]["logits@delta"] > coord_check.GROWS, sp["slopes"]


# Each rule swapped back to the standard parametrisation's, one at a time (the model and
# the optimizer read them from andrea_jax/mup.py while tracing), and the quantity that
# must show it.
FORGOTTEN = {
    "init": ("hidden_init_scale", lambda cfg: 1.0, "branch.0.attn@0"),
    "learning_rate": ("hidden_lr_scale", lambda cfg: 1.0, "stream.0.mlp@delta"),
    "attention_1/d": ("attention_scale", lambda cfg: 1 / math.sqrt(cfg.head_dim), "attn_logits.0@delta"),
    "readout_multiplier": ("readout_multiplier", lambda cfg: 1.0, "logits@delta"),
}


@pytest.mark.parametrize("forgotten", FORGOTTEN)
def test_a_mup_that_forgets_one_rule_is_not_flat(forgotten, monkeypatch):
  name, standard_rule, shows = FORGOTTEN[forgotten]
  monkeypatch.setattr(mup, name, standard_rule)
  result = check("mup")
  assert coord_check.verdict(result) != "flat", result["slopes"]
  assert result["slopes"][shows] > coord_check.FLAT, result["slopes"]
