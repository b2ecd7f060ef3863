"""The experiment's side of the boundary: the ``ml_collections`` ConfigDict, built from the
schema and changed by overrides and variants.

``default_config(**model)`` is a whole config at the schema's defaults (``config.py``: each
group's dataclass, each field with its default and doc), the model's shape given. A named
config (``experiments/configs/*.py``) sets only what differs from it and ends with
``apply_variants(config, arg)``, so ``--config=andrea120m:norm=post,mlp_ratio=2`` works for
every config the same way; ``apply_overrides`` sets ``{"group.field": value}`` (what the
research framework and the tests use), refusing an unknown field or a value of the wrong
type in one line. ``RunConfig.from_configdict`` turns the result into the frozen tree the
library reads; this module and ``config.py`` are the only ones that touch a ConfigDict.
"""

from __future__ import annotations

import ast
import dataclasses
import re

import ml_collections

from andrea_jax import config as config_lib
from andrea_jax import errors
from andrea_jax import recipes


def group(cls: type, **values) -> ml_collections.ConfigDict:
  """The ConfigDict of the group ``cls`` declares: every field at its default, but ``values``
  (which must give the fields without one: the model's shape)."""
  declared = dataclasses.fields(cls)
  unknown = sorted(set(values) - {f.name for f in declared})
  if unknown:
    raise errors.ConfigError(f"{cls.__name__} has no field {unknown[0]!r}: its fields are "
                             f"declared in {config_lib.home(cls)}")
  needed = [f.name for f in declared if f.default is dataclasses.MISSING and f.name not in values]
  if needed:
    raise errors.ConfigError(f"{cls.__name__}: give {', '.join(needed)}: they have no default")
  return ml_collections.ConfigDict({f.name: values.get(f.name, f.default) for f in declared})


def default_config(**model) -> ml_collections.ConfigDict:
  """A full experiment config at the defaults, one group per ``config.GROUP_TYPES`` entry;
  ``model``: the model group's fields that have no default (its shape), and any others.

  ``data.vocab_size`` is a reference to ``model.vocab_size``: one vocabulary size, so
  overriding the model's also resizes the tokenizer.
  """
  config = ml_collections.ConfigDict()
  config.model = group(config_lib.GROUP_TYPES["model"], **model)
  for name, cls in config_lib.GROUP_TYPES.items():
    if name == "data":
      config.data = group(cls, vocab_size=config.model.vocab_size)
      config.data.vocab_size = config.model.get_ref("vocab_size")
    elif name != "model":
      config[name] = group(cls)
  return config


def fit_warmup(config: ml_collections.ConfigDict) -> str | None:
  """A run no longer than its warmup warms up over a tenth of its steps; returns a note."""
  t = config.train
  if not 0 < t.steps <= t.warmup_steps:
    return None
  configured, t.warmup_steps = t.warmup_steps, t.steps // 10
  return (f"train.warmup_steps={configured} is not below train.steps={t.steps}: warming up "
          f"over {t.warmup_steps} steps (a tenth of the run); set "
          f"--config.train.warmup_steps to choose")


def parse_variants(arg: str | None) -> dict:
  """Parse ``"norm=post,mlp_ratio=2"`` into ``{"norm": "post", "mlp_ratio": 2}``."""
  if not arg:
    return {}
  out = {}
  for item in arg.split(","):
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
      raise errors.ConfigError(f"config variant {item!r} is not of the form key=value "
                               f"(e.g. 'norm=post,mlp_ratio=2')")
    try:
      value = ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError):
      value = raw.strip()
    out[key.strip()] = value
  return out


def apply_variants(config: ml_collections.ConfigDict, arg: str | None) -> ml_collections.ConfigDict:
  """Apply ``key=value`` variants; bare keys address ``model``, dotted keys any group.

  ``recipe=NAME`` (``andrea_jax/recipes.py``) sets that recipe's model fields first; the other
  variants then override them, and a derived field (Gemma's ``sqrt(d_model)``) is computed
  last from the model group, unless a variant set it.
  """
  variants = parse_variants(arg)
  name = variants.pop("recipe", None)
  if name is None:
    return apply_overrides(config, variants)
  fields = recipes.recipe(str(name))
  apply_overrides(config, {k: f.value for k, f in fields.items()
                           if not isinstance(f.value, recipes.Derived)})
  apply_overrides(config, variants)
  set_here = {k if "." in k else f"model.{k}" for k in variants}
  return apply_overrides(config, {k: f.value(config.model) for k, f in fields.items()
                                  if isinstance(f.value, recipes.Derived) and f"model.{k}" not in set_here})


def apply_overrides(config: ml_collections.ConfigDict, overrides: dict) -> ml_collections.ConfigDict:
  """Set ``{"group.field": value}`` (bare keys address ``model``) in place and return ``config``.

  ml_collections does the work: ``update_from_flattened_dict`` on the locked config refuses
  unknown keys and values of the wrong type (ints widen to floats). A refusal is a
  ``ConfigError`` naming the override, with ml_collections' "did you mean" suggestion.
  """
  was_locked = config.is_locked
  config.lock()
  try:
    for key, value in overrides.items():
      path = key if "." in key else f"model.{key}"
      try:
        config.update_from_flattened_dict({path: value})
      except KeyError:
        raise errors.ConfigError(f"config override {key}={value!r}: "
                                 f"{unknown_field(config, path)}") from None
      except TypeError:  # ml_collections: "Could not override field ... cannot be casted"
        raise errors.ConfigError(f"config override {key}={value!r}: "
                                 f"{expected_value(field_value(config, path))}") from None
  finally:
    if not was_locked:
      config.unlock()
  return config


def field_value(config: ml_collections.ConfigDict, path: str):
  """The value of the dotted field ``path`` (``"train.steps"``) of ``config``."""
  for part in path.split("."):
    config = config[part]
  return config


def expected_value(example) -> str:
  """What a field holding ``example`` takes, in words: ``expected a number (float), e.g. 4.0``."""
  kinds = {bool: "True or False", int: "a whole number (int)", float: "a number (float)",
           str: "text (str)"}
  kind = kinds.get(type(example), f"a value of type {type(example).__name__}")
  return f"expected {kind}, e.g. {example!r}"


def unknown_field(config: ml_collections.ConfigDict, path: str) -> str:
  """Why ``path`` names no field of ``config``, with ml_collections' suggestion if it has one."""
  node, parts = config, path.split(".")
  for i, part in enumerate(parts):
    where = ".".join(parts[:i]) or "the config"
    if not isinstance(node, ml_collections.ConfigDict):
      return f"{where} is {node!r}, not a group of fields"
    try:
      node = node[part]
    except KeyError as e:  # a locked ConfigDict's message ends with 'Did you mean "x" ...?'
      hint = re.search(r'Did you mean "([^"]+)"', str(e))
      return (f"{where} has no field {part!r}; " +
              (f"did you mean {hint[1]!r}?" if hint else f"its fields are {sorted(node.keys())}"))
  return f"{path} cannot be set"
