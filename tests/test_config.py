"""The run config's schema and typed tree (``andrea_jax/config.py``): the ConfigDict is built
from the schema (``configdict.py``), the typed tree built once from the ConfigDict gives back
its JSON exactly (what workdirs record and resumes compare), and a field or group it does not
know, or lacks, is refused by name."""

import ast
import dataclasses
import importlib
import json
import pathlib

import pytest

from andrea_jax import config as config_lib
from andrea_jax import configdict
from andrea_jax import errors
from andrea_jax import fields
from andrea_jax import model
from andrea_jax import run_record
from andrea_jax import step as step_lib
from andrea_jax import train
from andrea_jax import workdir as workdir_lib
from experiments import cli
from experiments.configs import tiny

VARIANTS = [(name, None) for name in cli.config_names()] + [
    ("tiny", "norm=post,mlp_ratio=2"), ("andrea120m", "parametrization=mup,base_width=256"),
    ("tiny", "train.z_loss=1e-4,data.path=texts,mesh.fsdp=2,sample.prompt=''")]


def recorded(config) -> str:
  """The bytes ``files.write_json`` writes for ``config``'s dict (sorted keys, indent 2)."""
  return json.dumps(config, indent=2, sort_keys=True)


@pytest.mark.parametrize("name, arg", VARIANTS)
def test_the_round_trip_gives_back_the_configdicts_json_byte_for_byte(name, arg):
  config = importlib.import_module(f"experiments.configs.{name}").get_config(arg)
  typed = config_lib.RunConfig.from_configdict(config)
  # Byte for byte: 2 and 2.0 are equal as numbers, not as what config.json holds.
  assert recorded(typed.to_dict()) == recorded(json.loads(config.to_json_best_effort()))
  assert config_lib.RunConfig.from_dict(typed.to_dict()) == typed
  hash(typed)  # frozen and hashable, like ModelConfig and TrainConfig
  with pytest.raises(dataclasses.FrozenInstanceError):
    typed.data.path = "elsewhere"


def test_the_groups_are_the_typed_groups():
  typed = config_lib.RunConfig.from_configdict(tiny.get_config())
  assert isinstance(typed.model, model.ModelConfig) and typed.model.compute_dtype == "float32"
  assert typed.train.steps == tiny.get_config().train.steps
  assert typed.data.vocab_size == typed.model.vocab_size  # the reference, resolved
  assert config_lib.run_config(typed) is typed
  assert config_lib.run_config(tiny.get_config()) == typed


def test_the_configdict_is_the_schema_at_its_defaults():
  # One home: each group's ConfigDict is its dataclass's fields, in order, at their defaults
  # (of the same type: an override casts to it), the model's shape given.
  shape = dict(vocab_size=10, block_size=8, d_model=16, n_layer=1, n_head=2)
  config = configdict.default_config(**shape)
  assert list(json.loads(config.to_json_best_effort())) == list(config_lib.GROUP_TYPES)
  for name, cls in config_lib.GROUP_TYPES.items():
    values = json.loads(config[name].to_json_best_effort())
    assert list(values) == [f.name for f in dataclasses.fields(cls)], name
    expected = {**fields.defaults(cls), **(shape if name == "model" else {}),
                **({"vocab_size": 10} if name == "data" else {})}
    assert [(k, type(v), v) for k, v in values.items()] == [
        (k, type(expected[k]), expected[k]) for k in values], name
  config.model.vocab_size = 12
  assert config.data.vocab_size == 12  # one vocabulary size: data's refers to the model's
  assert configdict.group(step_lib.TrainConfig).to_dict() == dataclasses.asdict(
      step_lib.TrainConfig())
  with pytest.raises(errors.ConfigError, match=r"^ModelConfig: give vocab_size, block_size, "
                                               r"d_model, n_layer, n_head: they have no default$"):
    configdict.group(model.ModelConfig)


@pytest.mark.parametrize("cls", list(config_lib.GROUP_TYPES.values()), ids=lambda c: c.__name__)
def test_every_field_has_a_one_line_doc(cls):
  for f in dataclasses.fields(cls):
    doc = fields.doc(cls, f.name)
    assert doc and "\n" not in doc and doc.endswith("."), (cls.__name__, f.name, doc)


def test_a_field_added_to_the_schema_reaches_the_configdict_and_the_resume_rule(monkeypatch):
  # The one edit a new optimizer field takes: its line in TrainConfig, with default and doc.
  @dataclasses.dataclass(frozen=True)
  class Train(step_lib.TrainConfig):
    example_field: float = fields.default(0.5, "A field added after runs were saved.")

  monkeypatch.setitem(config_lib.GROUP_TYPES, "train", Train)
  config = configdict.default_config(vocab_size=10, block_size=8, d_model=16, n_layer=1, n_head=2)
  assert config.train.example_field == 0.5
  configdict.apply_overrides(config, {"train.example_field": 2})
  assert config_lib.RunConfig.from_configdict(config).train.example_field == 2.0
  assert run_record.added_fields() == {**workdir_lib.ADDED_FIELDS, "train.example_field": 0.5}


def test_the_resume_rule_names_real_fields_and_each_exception_differs_from_its_default():
  defaults = config_lib.defaults()
  assert run_record.NOT_ADDED <= set(defaults)
  assert set(workdir_lib.ADDED_FIELDS) == set(defaults) - run_record.NOT_ADDED
  assert all(defaults[k] != v for k, v in run_record.BEFORE.items())
  assert set(run_record.BEFORE) <= set(workdir_lib.ADDED_FIELDS)


@pytest.mark.parametrize("where, match", [
    (("model", "nrom"), r"^model\.nrom is not a field of the model group \(andrea_jax/"
                        r"model_config\.py lists them\): remove it or rename it; did you mean "
                        r"'norm'\?$"),
    (("train", "learning_rte"), r"^train\.learning_rte is not a field .*did you mean "
                                r"'learning_rate'\?$"),
    (("data", "shufle_seed"), r"^data\.shufle_seed is not a field .*did you mean 'shuffle_seed'"),
])
def test_a_misspelt_field_is_refused_by_name(where, match):
  config = tiny.get_config()  # unlocked: a config file may add any field
  config[where[0]][where[1]] = 0
  with pytest.raises(errors.ConfigError, match=match):
    config_lib.RunConfig.from_configdict(config)


def test_a_config_file_with_a_misspelt_field_trains_nothing(tmp_path):
  # A config file is not locked: what it adds is refused at the boundary, before the workdir.
  config = tiny.get_config()
  config.model.nrom = "post"
  with pytest.raises(errors.ConfigError, match=r"model\.nrom .*did you mean 'norm'\?"):
    train.train_and_evaluate(config, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()


def test_a_misspelt_group_and_a_missing_field_are_refused_by_name():
  saved = json.loads(tiny.get_config().to_json_best_effort())
  with pytest.raises(errors.ConfigError, match=r"^config group 'sampel' is not one of .*did "
                                               r"you mean 'sample'\?$"):
    config_lib.RunConfig.from_dict({**saved, "sampel": saved["sample"]})
  del saved["data"]["prefetch"]
  with pytest.raises(errors.ConfigError, match=r"^the config has no data\.prefetch: add it "
                                               r"\(andrea_jax/config\.py gives its default"):
    config_lib.RunConfig.from_dict(saved)
  with pytest.raises(errors.ConfigError, match=r"^the config has no 'mesh' group"):
    config_lib.RunConfig.from_dict({k: v for k, v in saved.items() if k != "mesh"})


@pytest.mark.parametrize("field, value, match", [
    ("every_seconds", -5, r"^checkpoint\.every_seconds=-5: expected seconds >= 0 \(0 turns the "
                          r"saves by wall time off\)$"),
    ("every", 0, r"^checkpoint\.every=0: expected a positive number of steps$"),
    ("keep_steps", "96;192", r"^checkpoint\.keep_steps='96;192': expected steps to save and keep as "
                             r"'a,b,\.\.\.' \(positive integers, e\.g\. '96,192'\), or '' for none$"),
    ("keep_steps", "0,8", r"^checkpoint\.keep_steps='0,8': expected steps"),
])
def test_a_checkpoint_cadence_out_of_range_is_one_line_naming_it(field, value, match):
  with pytest.raises(errors.ConfigError, match=match):
    config_lib.RunConfig.from_configdict(configdict.apply_overrides(
        tiny.get_config(), {f"checkpoint.{field}": value}))


def test_an_override_naming_no_field_is_still_refused_on_the_command_line_path():
  with pytest.raises(errors.ConfigError, match=r"config override train\.learning_rte=0\.1: "
                                               r"train has no field 'learning_rte'"):
    configdict.apply_overrides(tiny.get_config(), {"train.learning_rte": 0.1})


def test_a_config_saved_before_a_field_existed_reads_back_typed():
  old = json.loads(tiny.get_config().to_json_best_effort())
  for group, name in [f.split(".") for f in workdir_lib.ADDED_FIELDS]:
    del old[group][name]
  typed = config_lib.RunConfig.from_dict(workdir_lib.with_added_fields(old))
  assert typed.model.mup_attention == "inverse"  # the rule it trained with (run_record.py)


def test_below_the_boundary_the_library_never_touches_a_configdict():
  # configdict.py alone builds and changes one and config.py converts it (from_configdict); no
  # other module imports ml_collections or configdict, or writes a ConfigDict's JSON
  # (resume.py records RunConfig.to_dict()).
  root = pathlib.Path(config_lib.__file__).parent
  boundary = {"config.py", "configdict.py"}
  for path in sorted(root.rglob("*.py")):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {f"{n.module}.{a.name}" for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module for a in n.names}
    if path.name not in boundary:
      assert not {m for m in imported if m.split(".")[0] == "ml_collections"}, path
      assert "andrea_jax.configdict" not in imported, path
      assert "to_json_best_effort" not in {n.attr for n in ast.walk(tree)
                                           if isinstance(n, ast.Attribute)}, path
