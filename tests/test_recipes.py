"""Named recipes (andrea_jax/recipes.py): the docs table lists exactly their fields and values,
``recipe=`` applies them before the other variants, and each builds a valid model."""

import os
import re

import pytest

from andrea_jax import errors
from andrea_jax import recipes
from andrea_jax.model import ModelConfig
from experiments.configs import tiny

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "model.md")


def docs_rows() -> set[tuple[str, str, str]]:
  text = open(DOCS).read()
  table = text.split("<!-- recipes table: generated from andrea_jax/recipes.py -->")[1]
  table = table.split("<!-- end recipes table -->")[0]
  return {m.groups() for m in re.finditer(r"^\| `([^`]+)` \| `([^`]+)` \| `([^`]+)` \|", table, re.M)}


def test_the_docs_table_lists_exactly_the_recipes_fields_and_values():
  want = {(name, field, recipes.shown(f.value))
          for name, fields in recipes.RECIPES.items() for field, f in fields.items()}
  assert docs_rows() == want


def test_every_field_has_a_source_and_names_a_model_field():
  model_fields = set(ModelConfig.__dataclass_fields__)
  for name, fields in recipes.RECIPES.items():
    for field, f in fields.items():
      assert field in model_fields, (name, field)
      assert len(f.source) > 10, (name, field)


@pytest.mark.parametrize("name", recipes.NAMES)
def test_each_recipe_builds_its_model(name):
  m = tiny.get_config(f"recipe={name}").model
  cfg = ModelConfig(**m)
  for field, f in recipes.RECIPES[name].items():
    value = f.value(m) if isinstance(f.value, recipes.Derived) else f.value
    assert getattr(cfg, field) == pytest.approx(value) if isinstance(value, float) else getattr(cfg, field) == value


def test_other_variants_override_the_recipe_and_derived_fields_follow_them():
  m = tiny.get_config("recipe=periln_olmo,embedding_norm=False,train.steps=7")
  assert m.model.norm == "peri" and m.model.embedding_norm is False and m.train.steps == 7
  g = tiny.get_config("recipe=gemma2,d_model=64").model
  assert g.embedding_multiplier == pytest.approx(8.0)  # sqrt of the variant's d_model
  assert tiny.get_config("recipe=gemma2,embedding_multiplier=2.0").model.embedding_multiplier == 2.0
  assert tiny.get_config("recipe=deepnet").model.init == "xavier"


def test_an_unknown_recipe_is_one_line_listing_the_names():
  with pytest.raises(errors.ConfigError, match=r"recipe='olmo9': expected one of \('periln'") as info:
    tiny.get_config("recipe=olmo9")
  assert "\n" not in str(info.value)
