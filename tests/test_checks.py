"""What a dry run refuses before any cell trains (research/checks.py): a misspelt override, a bad value, a claim parameter its kind does not read, a confirmatory study's reused seeds; each in one line naming it."""

import dataclasses

import pytest

from andrea_jax import errors
from research import checks
from research import kinds
from research import registry
from research.study import Arm

TEMPLATE = registry.study("template")


def refusal(call) -> str:
  with pytest.raises(errors.ConfigError) as e:
    call()
  text = str(e.value)
  assert "\n" not in text, text  # one line
  return text


def config_of(sweep):
  return lambda overrides: registry.group_config(sweep.base_config, overrides)


def with_arm(overrides):
  study = dataclasses.replace(TEMPLATE, arms=(*TEMPLATE.arms[:1], Arm("pre+qk", overrides)))
  return study.sweep("smoke")


def test_a_misspelt_override_is_refused_naming_it():
  sweep = with_arm({"model.activaton": "gelu"})
  text = refusal(lambda: checks.cell_configs(sweep.cells, config_of(sweep)))
  assert "model.activaton" in text and "did you mean 'activation'" in text and text.startswith("cell pre-qk")


def test_a_bad_value_is_refused_naming_it():
  sweep = with_arm({"model.activation": "SwiGLU"})
  text = refusal(lambda: checks.cell_configs(sweep.cells, config_of(sweep)))
  assert "activation='SwiGLU'" in text and "'swiglu'" in text
  good = registry.load("template", "smoke")
  checks.cell_configs(good.cells, config_of(good))  # the template's own cells build


def test_a_claim_parameter_its_kind_does_not_declare_is_refused():
  less = kinds.Contrast("qk lowers the loss", terms=kinds.pair("pre+qk", "pre"), predict="less")
  text = refusal(lambda: checks.claim_parameters(less))
  assert "predict='less' is not one of ['below', 'higher', 'lower', 'same']" in text and "qk lowers the loss" in text
  best = kinds.Contrast("qk lowers the loss", terms=kinds.pair("pre+qk", "pre"), quantity="best")
  assert "quantity='best' is not one of ['best_loss', 'learning_rates', 'log_optimum', 'rate_range', 'sensitivity']" in refusal(
      lambda: checks.claim_parameters(best))
  # Slope's rule has no words for "above" (a KeyError once judged): refused before it trains.
  above = kinds.Slope("flat", arm="pre", axis="model.d_model", predict="above")
  assert "predict='above' is not one of ['below', 'higher', 'lower', 'same']" in refusal(lambda: checks.claim_parameters(above))
  assert sorted(kinds.Slope.CHOICES["of"]) == ["basin", "bracketed", "fitted", "fixed_rate", "sensitivity"]
  checks.claim_parameters(kinds.Contrast("qk", terms=kinds.pair("pre+qk", "pre"), predict="higher"))
  checks.claim_parameters(kinds.Contrast("qk", terms=kinds.pair("pre+qk", "pre"), holm=""))  # the default passes
  for name in registry.names():  # every committed study's claims pass (registry.study checks them)
    if registry.is_file(name):
      registry.study(name)


def test_a_confirmatory_study_with_a_used_seed_is_refused():
  confirmatory = dataclasses.replace(TEMPLATE, design="Confirmatory: for the test.")
  text = refusal(lambda: checks.fresh_seeds(confirmatory, "cpu", {701, 5}))
  assert "seeds [701]" in text and "'template' is confirmatory" in text
  checks.fresh_seeds(confirmatory, "cpu", {5})  # none of its seeds used
  checks.fresh_seeds(TEMPLATE, "cpu", {701})  # exploratory: may reuse


def test_a_kind_that_misses_a_method_or_declares_a_parameter_it_lacks_fails_at_definition():
  with pytest.raises(TypeError) as e:

    @dataclasses.dataclass(frozen=True)
    class Half(kinds.Claim):  # pylint: disable=unused-variable
      def needs(self):
        return ()

      def unit(self):
        return kinds.LOSS

  text = str(e.value)
  assert "\n" not in text and text.startswith("claim kind Half: defines no quantity_text, rule, test")
  with pytest.raises(TypeError, match=r"claim kind Typo: CHOICES names \['predcit'\], which are not its fields"):

    class Typo(kinds.Contrast):  # pylint: disable=unused-variable
      CHOICES = {"predcit": ("higher",)}
