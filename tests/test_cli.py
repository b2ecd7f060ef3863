"""The command lines: config names and overrides, one error line and exit code 2, the README."""

import functools
import importlib.util
import os
import pathlib
import re
import shlex
import subprocess
import sys
import types

import pytest
from absl import flags

from andrea_jax import configdict
from andrea_jax import errors
from experiments import cli
from experiments.configs import tiny

REPO = pathlib.Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def parse(monkeypatch, *args):
  """The config that ``prog *args`` parses to, on a fresh set of flags."""
  flag_values = flags.FlagValues()
  holder = cli.define_config_flag(flag_values=flag_values)
  argv = ["prog", *args]
  monkeypatch.setattr(sys, "argv", argv)  # ml_collections reads the overrides from sys.argv
  cli.parse_flags(argv, flag_values)
  return holder.value


def parse_error(monkeypatch, capsys, *args) -> str:
  """The one stderr line that parsing ``prog *args`` exits with (code 2)."""
  with pytest.raises(SystemExit) as exit_info:
    parse(monkeypatch, *args)
  assert exit_info.value.code == errors.EXIT_USER_ERROR
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("error: "), err
  return err


def run_module(*args, cwd=REPO):
  return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=120, check=False)


# ----------------------------------------------------------------------------- --config


@pytest.mark.parametrize("args", [
    ["--config=tiny:norm=post,mlp_ratio=2"],
    ["--config", "tiny:norm=post,mlp_ratio=2"],
    [f"--config={tiny.__file__}:norm=post,mlp_ratio=2"],
    ["--config=experiments/configs/tiny.py:norm=post,mlp_ratio=2"],
])
def test_config_names_paths_variants_and_overrides(args, monkeypatch):
  monkeypatch.chdir(REPO)
  config = parse(monkeypatch, *args, "--config.train.steps=7", "--config.model.n_layer=2")
  assert (config.model.norm, config.model.mlp_ratio) == ("post", 2.0)
  assert (config.train.steps, config.model.n_layer) == (7, 2)
  assert config.train.learning_rate == tiny.get_config().train.learning_rate


def test_config_name_in_a_flagfile(monkeypatch, tmp_path):
  (tmp_path / "flags.txt").write_text("--config=tiny:norm=post\n--config.train.steps=7\n")
  config = parse(monkeypatch, f"--flagfile={tmp_path / 'flags.txt'}")
  assert (config.model.norm, config.train.steps) == ("post", 7)


def test_a_misspelt_override_in_a_flagfile(monkeypatch, capsys, tmp_path):
  (tmp_path / "flags.txt").write_text("--config=tiny\n--config.train.stpes=7\n")
  assert "did you mean 'steps'?" in parse_error(monkeypatch, capsys,
                                                  f"--flagfile={tmp_path / 'flags.txt'}")


def test_config_name_works_from_another_directory(monkeypatch, tmp_path):
  monkeypatch.chdir(tmp_path)
  assert parse(monkeypatch, "--config=tiny").model.d_model == 128


@pytest.mark.parametrize("args, message", [
    (["--config=tiny", "--config.train.stpes=5"],
     "error: --config.train.stpes: train has no field 'stpes'; did you mean 'steps'?\n"),
    (["--config=tiny", "--config.trian.steps=5"],
     "error: --config.trian.steps: the config has no field 'trian'; did you mean 'train'?\n"),
    (["--config=tiny:nrom=post"],
     "error: config override nrom='post': model has no field 'nrom'; did you mean 'norm'?\n"),
    (["--config=tiny:train.stpes=5"],
     "error: config override train.stpes=5: train has no field 'stpes'; did you mean 'steps'?\n"),
])
def test_a_misspelt_key_is_one_line_with_a_suggestion(args, message, monkeypatch, capsys):
  assert parse_error(monkeypatch, capsys, *args) == message


@pytest.mark.parametrize("args, match", [
    (["--config=nope"], "'nope' is neither a config file nor a config name; names are .*tiny"),
    (["--config=tiny:norm"], "config variant 'norm' is not of the form key=value"),
    (["--config=tiny", "--config.zzz=1"], "--config.zzz: the config has no field 'zzz'"),
    (["--config=tiny", "--config.train.steps.x=1"], "--config.train.steps.x: .*train.steps.x"),
    (["--config=tiny", "--workdri=x"], "Unknown command line flag 'workdri'"),
])
def test_other_flag_mistakes_are_one_line(args, match, monkeypatch, capsys):
  assert re.search(match, parse_error(monkeypatch, capsys, *args))


@pytest.mark.parametrize("args, message", [
    (["--config=tiny", "--config.model.mlp_ratio=two"],
     "--config.model.mlp_ratio=two: expected a number (float), e.g. 4.0"),
    (["--config=tiny", "--config.train.steps=abc"],
     "--config.train.steps=abc: expected a whole number (int), e.g. 300"),
    (["--config=tiny", "--config.model.tie_embeddings=maybe"],
     "--config.model.tie_embeddings=maybe: expected True or False, e.g. True"),
    (["--config=tiny:mlp_ratio=two"], "config override mlp_ratio='two': expected a number (float), e.g. 4.0"),
    (["--config=tiny:norm=3"], "config override norm=3: expected text (str), e.g. 'pre'"),
])
def test_a_value_of_the_wrong_type_says_what_the_field_takes(args, message, monkeypatch, capsys):
  assert parse_error(monkeypatch, capsys, *args) == f"error: {message}\n"


def test_overridden_fields_are_the_variants_and_the_overrides(monkeypatch):
  flag_values = flags.FlagValues()
  cli.define_config_flag(flag_values=flag_values)
  argv = ["prog", "--config=tiny:norm=post,train.seed=3", "--config.data.path=my_texts/",
          "--config.train.steps=20"]
  monkeypatch.setattr(sys, "argv", argv)
  cli.parse_flags(argv, flag_values)
  assert cli.overridden_fields(flag_values) == {
      "model.norm": "post", "train.seed": 3, "data.path": "my_texts/", "train.steps": 20}


def test_a_lookup_error_that_no_override_explains_keeps_its_traceback(monkeypatch):
  monkeypatch.setattr(flags.FlagValues, "__call__", lambda *_: {}["not_an_override"])
  with pytest.raises(KeyError):
    parse(monkeypatch, "--config=tiny", "--config.train.steps=5")


def test_the_command_line_prints_one_line_and_exits_2(tmp_path):
  """Through ``python -m``: no traceback, no absl FATAL, exit code 2 (README, Exit codes)."""
  for args in (["--config=tiny", "--config.train.stpes=5"], ["--config=tiny:nrom=post"]):
    done = run_module("experiments.run", *args, f"--workdir={tmp_path / 'run'}")
    assert (done.returncode, done.stdout) == (errors.EXIT_USER_ERROR, ""), done
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "did you mean" in done.stderr
  assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------- errors in main


def run_main(monkeypatch, main):
  monkeypatch.setattr(sys, "argv", ["prog"])
  cli.run(main)


@pytest.mark.parametrize("error", [
    errors.ConfigError("train.steps=0: expected a positive value"),
    errors.DataError("a.txt: not valid UTF-8 at byte offset 12"),
    errors.CheckpointError("no step 250; the run has steps 100, 200"),
    errors.DataNotFoundError("data.path 'x' does not exist; point data.path at a text file"),
])
def test_user_errors_in_main_are_one_line_and_exit_2(error, monkeypatch, capsys):
  def main(argv):
    raise error
  with pytest.raises(SystemExit) as exit_info:
    run_main(monkeypatch, main)
  assert exit_info.value.code == errors.EXIT_USER_ERROR
  assert capsys.readouterr().err == f"error: {error}\n"


def test_an_os_error_no_check_caught_names_its_path_and_a_fix(monkeypatch, capsys):
  """The last resort for an OS error that no check of a path caught (a permission, a full
  disk): the path and the reason, not Python's ``[Errno 13] ...``."""
  def main(argv):
    raise PermissionError(13, "Permission denied", "/data/corpus.txt")
  with pytest.raises(SystemExit) as exit_info:
    run_main(monkeypatch, main)
  assert exit_info.value.code == errors.EXIT_USER_ERROR
  assert capsys.readouterr().err == (
      "error: /data/corpus.txt: Permission denied; check the flag or config field that names "
      "this path (a file or a directory, as it expects, that you can read or write)\n")


def test_the_older_error_classes_are_project_errors():
  from andrea_jax import checkpoint, tokenizer  # pylint: disable=import-outside-toplevel
  from andrea_jax.interop import hf_gpt2  # pylint: disable=import-outside-toplevel
  for error in (checkpoint.CheckpointError, tokenizer.TokenizerError, hf_gpt2.InteropError):
    assert issubclass(error, errors.AndreaError), error


def test_a_bug_keeps_its_traceback(monkeypatch):
  def main(argv):
    return [][1]
  with pytest.raises(IndexError):
    run_main(monkeypatch, main)
  def value_error(argv):
    raise ValueError("a bug, not the user's mistake")
  with pytest.raises(ValueError, match="a bug"):
    run_main(monkeypatch, value_error)


def test_main_return_value_is_the_exit_code(monkeypatch):
  with pytest.raises(SystemExit) as exit_info:
    run_main(monkeypatch, lambda argv: errors.EXIT_DIVERGED)
  assert exit_info.value.code == errors.EXIT_DIVERGED


def test_prepare_on_a_non_utf8_corpus_prints_one_line(tmp_path):
  (tmp_path / "corpus").mkdir()
  (tmp_path / "corpus" / "a.txt").write_bytes(b"hello world\n\xff\xfe not utf-8\n")
  done = run_module("experiments.prepare", "--config=tiny", f"--config.data.path={tmp_path / 'corpus'}",
                    f"--config.data.cache_dir={tmp_path / 'cache'}")
  assert done.returncode == errors.EXIT_USER_ERROR, done
  assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
  assert "a.txt" in done.stderr and "UTF-8" in done.stderr


@pytest.mark.parametrize("override", [
    {"model.n_head": 3}, {"model.norm": "sideways"}, {"train.steps": 0}, {"mesh.data": 3},
    {"train.warmup_steps": 10_000}])
def test_bad_config_values_are_user_errors(override, tmp_path):
  """The entry points print these as one line: they must be the project's errors."""
  from andrea_jax import train  # pylint: disable=import-outside-toplevel
  config = configdict.apply_overrides(tiny.get_config(), override)
  with pytest.raises(cli.USER_ERRORS):
    train.train_and_evaluate(config, str(tmp_path / "run"))


@pytest.mark.parametrize("request_", [
    {"temperature": -1.0}, {"top_p": 0.0}, {"top_k": -1}, {"max_new_tokens": 128}])
def test_bad_sampling_requests_are_user_errors(request_):
  """experiments.sample passes these flags on: they must reach cli.run as project errors."""
  import jax  # pylint: disable=import-outside-toplevel
  from andrea_jax import model, sample  # pylint: disable=import-outside-toplevel
  cfg = model.ModelConfig(vocab_size=16, block_size=8, d_model=8, n_layer=1, n_head=1)
  args = {"max_new_tokens": 4, **request_}
  max_new_tokens = args.pop("max_new_tokens")
  with pytest.raises(cli.USER_ERRORS):
    sample.generate(None, cfg, [[1, 2]], max_new_tokens, jax.random.key(0), **args)


ENTRY_POINTS = sorted(p.stem for p in (REPO / "experiments").glob("*.py")
                      if "__main__" in p.read_text(encoding="utf-8"))


def test_the_entry_points_are_found():
  assert {"run", "prepare", "sample", "export", "import_hf", "sweep", "report"} <= set(ENTRY_POINTS)


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_every_entry_point_uses_cli_run(entry_point):
  source = (REPO / "experiments" / f"{entry_point}.py").read_text(encoding="utf-8")
  assert "cli.run(main)" in source and "app.run(" not in source
  assert "sys.exit(f\"error:" not in source and "except ValueError" not in source


# ----------------------------------------------------------------------------- apply_overrides


def test_apply_overrides_sets_casts_and_keeps_the_lock_state():
  config = configdict.apply_overrides(tiny.get_config(),
                                      {"norm": "post", "mlp_ratio": 2, "train.steps": 9,
                                       "model.vocab_size": 300})
  assert (config.model.norm, config.train.steps) == ("post", 9)
  assert isinstance(config.model.mlp_ratio, float) and config.model.mlp_ratio == 2.0
  assert config.data.vocab_size == 300  # the reference to model.vocab_size survives
  assert not config.is_locked
  config.lock()
  configdict.apply_overrides(config, {"train.steps": 3})
  assert config.is_locked


@pytest.mark.parametrize("overrides, match", [
    ({"train.stpes": 3}, "train.stpes=3: train has no field 'stpes'; did you mean 'steps'"),
    ({"trian.steps": 3}, "trian.steps=3: the config has no field 'trian'; did you mean 'train'"),
    ({"nrom": "post"}, "nrom='post': model has no field 'nrom'; did you mean 'norm'"),
    ({"zzz.a": 1}, "the config has no field 'zzz'; its fields are .*'train'"),
    ({"train.steps": 2.5}, "train.steps=2.5: expected a whole number \\(int\\), e.g. 300"),
    ({"train.steps.x": 1}, "train.steps is 300, not a group"),
])
def test_apply_overrides_rejects_unknown_keys_and_wrong_types(overrides, match):
  config = tiny.get_config()
  with pytest.raises(errors.ConfigError, match=match):
    configdict.apply_overrides(config, overrides)
  assert "stpes" not in config.train and "trian" not in config and "nrom" not in config.model
  assert not config.is_locked


def test_a_run_no_longer_than_its_warmup_warms_up_over_a_tenth_of_it():
  config = configdict.apply_overrides(tiny.get_config(), {"train.steps": 20})
  note = configdict.fit_warmup(config)
  assert config.train.warmup_steps == 2 and "warming up over 2 steps" in note
  assert configdict.fit_warmup(tiny.get_config()) is None  # 40 < 300: left as it is
  config = configdict.apply_overrides(tiny.get_config(), {"train.steps": 1})
  assert configdict.fit_warmup(config) and config.train.warmup_steps == 0


@pytest.mark.parametrize("test_file", ["test_sharding.py", "sharding_worker.py", "test_sweep.py"])
def test_test_overrides_go_through_apply_overrides(test_file):
  """Tests that set config[group][field] directly would add a misspelt key silently."""
  source = (REPO / "tests" / test_file).read_text(encoding="utf-8")
  assert "configdict.apply_overrides(" in source
  assert not re.search(r"config(\.\w+)?\[\w+\]\s*=|config\[\w+\]\[\w+\]\s*=", source)


@pytest.mark.parametrize("config_file", sorted((REPO / "experiments" / "configs").glob("*.py")),
                         ids=lambda p: p.stem)
def test_each_config_field_has_one_comment_line(config_file):
  lines = config_file.read_text(encoding="utf-8").splitlines()
  for i, line in enumerate(lines):
    if re.match(r"\s+(\w+\.)+\w+ = ", line):  # m.norm = ..., config.train.steps = ...
      above = [l.strip().startswith("#") for l in lines[max(i - 2, 0):i]]
      assert above[-1:] == [True] and above[-2:] != [True, True], f"{config_file.name}:{i + 1}"


# ----------------------------------------------------------------------------- README


def readme_section(heading: str) -> str:
  match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ )", README, re.M | re.S)
  assert match, heading
  return match[1]


def test_readme_using_it_snippet_runs_as_pasted():
  blocks = re.findall(r"```python\n(.*?)```", readme_section("Using it"), re.S)
  assert len(blocks) == 1
  namespace = {}
  exec(compile(blocks[0], "README.md (Using it)", "exec"), namespace)  # pylint: disable=exec-used
  assert namespace["logits"].shape[-1] == namespace["cfg"].vocab_size
  assert float(namespace["loss"]) > 0


def test_readme_using_it_runs_as_a_script_from_any_directory(tmp_path):
  """The install step (`pip install -e .`) makes the snippet work outside the checkout."""
  (block,) = re.findall(r"```python\n(.*?)```", readme_section("Using it"), re.S)
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  probe = subprocess.run([sys.executable, "-c", "import andrea_jax"], cwd=tmp_path, env=env,
                         capture_output=True, check=False)
  if probe.returncode:
    pytest.skip("andrea_jax is not installed here: the README installs it with `pip install -e .`")
  (tmp_path / "using_it.py").write_text(block + "print(logits.shape[-1] == cfg.vocab_size)\n")
  done = subprocess.run([sys.executable, "using_it.py"], cwd=tmp_path, capture_output=True,
                        text=True, env={**env, "JAX_PLATFORMS": "cpu"}, timeout=600, check=False)
  assert (done.returncode, done.stdout) == (0, "True\n"), done.stderr


def test_ci_runs_the_readme_test_command():
  (command,) = re.findall(r"```bash\n(.*?)\n```", readme_section("Run the tests"))
  assert "-e ." in command and "pytest -n 2" in command
  assert command in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def test_readme_parameter_count_is_counted():
  from andrea_jax import model  # pylint: disable=import-outside-toplevel
  from experiments.configs import andrea120m  # pylint: disable=import-outside-toplevel
  count = model.count_params(model.ModelConfig(**andrea120m.get_config().model))
  assert f"{count:,} parameters" in README


def readme_commands():
  """(--config args, the README's error line or None) of each experiments.run/prepare command."""
  text = re.sub(r"\\\n\s*", " ", README)  # join backslash continuations
  for match in re.finditer(r"python -m experiments\.(?:run|prepare) ([^`#\n]*)\n?(error: .*)?", text):
    args = [re.sub(r"\$\w+", "0", a) for a in shlex.split(match[1]) if a.startswith("--config")]
    if args and not any("path/to" in a for a in args):
      yield args, match[2]


@pytest.mark.parametrize("args, error", list(readme_commands()), ids=lambda x: str(x)[:60])
def test_readme_commands_parse_or_fail_as_shown(args, error, monkeypatch, capsys):
  monkeypatch.chdir(REPO)
  if error is None:
    parse(monkeypatch, *args)
  else:
    assert parse_error(monkeypatch, capsys, *args) == error + "\n"


def test_readme_shows_config_mistakes():
  assert sum(error is not None for _, error in readme_commands()) >= 2


def test_readme_documents_the_exit_codes():
  section = readme_section("Exit codes")
  for code, meaning in ((errors.EXIT_COMPLETED, "completed"), (errors.EXIT_USER_ERROR, "error"),
                        (errors.EXIT_DIVERGED, "diverged"), (errors.EXIT_INTERRUPTED, "interrupted")):
    assert re.search(rf"\b{code}\b[^\n]*{meaning}", section, re.I), (code, meaning)


def test_readme_and_notebooks_readme_give_the_headless_command():
  command = "python -m pytest --nbmake notebooks/01_residual_stream.ipynb"
  assert command in README
  assert command in (REPO / "notebooks" / "README.md").read_text(encoding="utf-8")


def test_a_path_that_is_a_file_is_one_line_not_an_errno(tmp_path):
  """``--workdir`` that is a file (or lies under one), as the shell sees it: one line naming
  the value and the fix, exit 2, the file untouched (issue 44's raw errno messages; the
  other commands' ``--out``, in this process: the tests below)."""
  a_file = tmp_path / "outfile"
  a_file.write_text("keep me")
  cases = [("experiments.run", "--config=tiny", f"--workdir={a_file}"),
           ("experiments.run", "--config=tiny", f"--workdir={a_file / 'run'}")]
  for args in cases:
    done = run_module(*args)
    assert done.returncode == errors.EXIT_USER_ERROR, (args, done.stderr)
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, (args, done.stderr)
    assert "Errno" not in done.stderr and "is a file" in done.stderr and str(a_file) in done.stderr, done.stderr
  assert a_file.read_text() == "keep me"


# ----------------------------------------------------------------------------- paths and values


def entry_point(name: str, monkeypatch):
  """``(module, flag values)``: ``experiments/<name>.py`` loaded in this process, its flags
  on a FlagValues of its own (absl defines them on one global set, where several entry
  points' ``--workdir`` and ``--out`` would collide)."""
  import absl  # pylint: disable=import-outside-toplevel
  own = flags.FlagValues()
  proxy = types.ModuleType("absl.flags")
  proxy.__dict__.update(vars(flags))
  for attr in vars(flags):
    if attr.startswith("DEFINE"):
      setattr(proxy, attr, functools.partial(getattr(flags, attr), flag_values=own))
  monkeypatch.setattr(absl, "flags", proxy)
  monkeypatch.setitem(sys.modules, "absl.flags", proxy)
  spec = importlib.util.spec_from_file_location(f"entry_{name}", REPO / "experiments" / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  monkeypatch.undo()
  return module, own


def entry_error(monkeypatch, capsys, name: str, *args: str) -> str:
  """The one stderr line (exit code 2) of ``python -m experiments.<name> *args``, run in
  this process: flags parsed by ``cli.parse_flags``, ``main`` as ``cli.run`` calls it."""
  module, own = entry_point(name, monkeypatch)
  with pytest.raises(SystemExit) as exit_info:
    rest = cli.parse_flags([name, *args], own)
    cli._report_user_errors(module.main)(rest)  # pylint: disable=protected-access
  assert exit_info.value.code == errors.EXIT_USER_ERROR
  out, err = capsys.readouterr()
  assert err.count("\n") == 1 and err.startswith("error: ") and "Errno" not in err, err
  assert out == "", out  # the refusal is the first line printed: no work before it
  return err


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
  """A tiny Hugging Face GPT-2 directory with its tokenizer (experiments.export's layout)."""
  import jax  # pylint: disable=import-outside-toplevel
  from andrea_jax import model, tokenizer  # pylint: disable=import-outside-toplevel
  from andrea_jax.interop import hf_gpt2  # pylint: disable=import-outside-toplevel
  tok = tokenizer.train_tokenizer(["hello world, the tiny model reads this text"] * 8, 260)
  cfg = model.ModelConfig(vocab_size=260, block_size=16, d_model=16, n_layer=1, n_head=2)
  out = tmp_path_factory.mktemp("hf")
  hf_gpt2.export_gpt2(model.init_params(cfg, jax.random.key(0)), cfg, str(out), tokenizer=tok)
  return out


@pytest.mark.parametrize("args, message", [
    (("sample", "--workdir={missing}"),
     "run directory '{missing}' does not exist: pass the --workdir of a run of python -m "
     "experiments.run"),
    (("export", "--workdir={a_file}", "--out={tmp}/out"),
     "run directory '{a_file}' is a file: pass the --workdir"),
    (("inspect", "--hf_dir={missing}", "--text=hi"),
     "{missing} does not exist: expected a Hugging Face GPT-2 directory"),
    (("inspect", "--hf_dir={a_file}", "--text=hi"),
     "{a_file} is a file: expected a Hugging Face GPT-2 directory"),
    (("import_hf", "--hf_dir={hf_dir}", "--eval_text={missing}"),
     "--eval_text='{missing}' does not exist: pass a UTF-8 text file"),
    (("import_hf", "--hf_dir={hf_dir}", "--eval_text={a_dir}"),
     "--eval_text='{a_dir}' is a directory: pass a UTF-8 text file"),
    (("import_hf", "--hf_dir={hf_dir}", "--eval_text={tmp}/latin1.txt"),
     "latin1.txt': not valid UTF-8 at byte offset 3 (invalid continuation byte); pass a UTF-8"),
    (("sweep", "--run_group={missing}"), "--run_group='{missing}' holds no group.json"),
    (("report", "--sweep_dir={missing}"),
     "--sweep_dir='{missing}' does not exist: pass a directory written by python -m "
     "experiments.sweep"),
    (("report", "--sweep_dir={a_file}"), "--sweep_dir='{a_file}' is a file"),
    (("sample", "--flagfile={missing}"),
     "--flagfile={missing}: No such file or directory; pass a text file of flags, one per line"),
    (("evaluate", "--workdir={tmp}/none", "--task=hellaswag", "--task_file={missing}"),
     "--task_file='{missing}' does not exist: pass HellaSwag's JSONL (hellaswag_val.jsonl)"),
    (("evaluate", "--workdir={tmp}/none", "--task=hellaswag", "--task_file={a_dir}"),
     "--task_file='{a_dir}' is a directory: pass HellaSwag's JSONL"),
    (("evaluate", "--workdir={missing}"), "run directory '{missing}' does not exist"),
    (("evaluate", "--workdir={a_dir}", "--data={missing}"), "{missing}"),
    (("import_hf", "--hf_dir={missing}"), "--hf_dir='{missing}' does not exist: pass a Hugging"),
    (("import_hf", "--hf_dir={a_file}"), "--hf_dir='{a_file}' is a file: pass a Hugging Face"),
    (("report", "--sweep_dir={missing}", "--pack={tmp}/packed"), "--sweep_dir='{missing}' does not"),
    (("inspect", "--workdir={missing}"), "run directory '{missing}' does not exist"),
    (("inspect", "--random=tiny", "--compare={missing}"), "'{missing}' does not exist"),
], ids=lambda x: " ".join(x)[:40] if isinstance(x, tuple) else "")
def test_paths_a_command_reads_that_are_missing_or_the_wrong_kind(args, message, tmp_path,
                                                                  monkeypatch, capsys, hf_dir):
  """A run directory, a Hugging Face directory, a text file or a flag file that does not
  exist, or is a file where a directory belongs (or the reverse): one line naming the value
  and what to pass, exit 2, no ``[Errno ...]`` or traceback (issue 44)."""
  paths = dict(tmp=tmp_path, missing=tmp_path / "missing", a_file=tmp_path / "afile",
               a_dir=tmp_path / "adir", hf_dir=hf_dir)
  paths["a_file"].write_text("keep me")
  paths["a_dir"].mkdir()
  (tmp_path / "latin1.txt").write_bytes(b"caf\xe9 au lait\n")
  err = entry_error(monkeypatch, capsys, *(a.format(**paths) for a in args))
  assert message.format(**paths) in err
  assert not paths["missing"].exists() and paths["a_file"].read_text() == "keep me"
  assert not any(paths["a_dir"].iterdir())
  # Nothing left behind: no data cache, no workdir, nothing else in the test's folder.
  assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile", "latin1.txt"]


@pytest.mark.parametrize("source, workdir, message", [
    ("adir", None, "--cooldown_from='{adir}': {adir} has no config.json: is it a run directory "
                   "of python -m experiments.run?"),
    ("adir", "cooled", "--cooldown_from='{adir}': {adir} has no config.json: is it a run "
                       "directory of python -m experiments.run?"),
    ("missing", "cooled", "--cooldown_from='{missing}': run directory '{missing}' does not exist: "
                          "pass the --workdir of a run of python -m experiments.run"),
])
def test_a_cooldown_from_a_folder_that_is_not_a_run_is_refused_before_any_work(
    source, workdir, message, tmp_path):
  """With or without --workdir: the refusal is the first line printed, and no data cache,
  workdir or anything else is left behind (issue 73)."""
  (tmp_path / "adir").mkdir()
  args = ["--config=tiny", f"--cooldown_from={tmp_path / source}", "--cooldown_steps=2",
          f"--config.data.cache_dir={tmp_path / 'cache'}"]
  done = run_module("experiments.run", *args,
                    *([f"--workdir={tmp_path / workdir}"] if workdir else []))
  assert done.returncode == errors.EXIT_USER_ERROR and done.stdout == "", done.stdout
  assert done.stderr == "error: " + message.format(adir=tmp_path / "adir",
                                                   missing=tmp_path / "missing") + "\n"
  assert [p.name for p in tmp_path.iterdir()] == ["adir"] and not any((tmp_path / "adir").iterdir())


RESULTS = REPO / "results" / "zloss-cpu"  # a study's committed data: must stay as it is
BLOCKED = "'{a_file}' is a file, not a directory: pass a directory"


@pytest.mark.parametrize("args, message", [
    (("export", "--workdir={tmp}/none", "--out={a_file}/sub"),
     "--out='{a_file}/sub': " + BLOCKED + " for the Hugging Face files"),
    (("export", "--workdir={tmp}/none", "--out={a_file}"), "--out='{a_file}' is a file"),
    (("inspect", "--random=tiny", "--out={a_file}"), "--out='{a_file}' is a file"),
    (("evaluate", "--workdir={tmp}/none", "--out={a_file}/e.json"), "'{a_file}' is a file"),
    (("export", "--workdir={tmp}/none", "--out="), "--out is empty: pass a directory"),
    (("inspect", "--random=tiny", "--out={a_file}/sub"),
     "--out='{a_file}/sub': " + BLOCKED + " for the figures"),
    (("import_hf", "--hf_dir=none", "--out={a_file}"),
     "--out='{a_file}' is a file: pass a directory for the bytes-first copy"),
    (("sweep", "--sweep=norm_mlp", "--workdir={a_file}", "--dry_run"),
     "--workdir='{a_file}' is a file: pass a directory for the sweep's cells"),
    (("report", f"--sweep_dir={RESULTS}", "--out={a_file}/sub"),
     "--out='{a_file}/sub': " + BLOCKED + " for REPORT.md and its plots"),
    (("report", f"--sweep_dir={RESULTS}", "--pack={a_file}"), "--pack='{a_file}' is a file"),
    (("report", f"--sweep_dir={RESULTS}", "--pack={a_file}/sub"),
     "--pack='{a_file}/sub': " + BLOCKED + " for the study's data"),
], ids=lambda x: " ".join(x)[:40] if isinstance(x, tuple) else "")
def test_directories_a_command_writes_that_a_file_is_in_the_way_of(args, message, tmp_path,
                                                                   monkeypatch, capsys):
  """``--out`` or ``--workdir`` that is a file, lies under one, or is empty: one line naming
  the flag, the file in the way and what to pass, before any model or data is read; the
  file untouched (``files.check_directory``, ``make_directory``)."""
  paths = dict(tmp=tmp_path, a_file=tmp_path / "afile")
  paths["a_file"].write_text("keep me")
  before = {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()}
  err = entry_error(monkeypatch, capsys, *(a.format(**paths) for a in args))
  assert message.format(**paths) in err
  assert paths["a_file"].read_text() == "keep me"
  assert {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()} == before  # nothing written


def test_hellaswag_by_name_offline_is_one_line_naming_task_file(tmp_path, monkeypatch, capsys):
  import urllib.error  # pylint: disable=import-outside-toplevel
  import urllib.request  # pylint: disable=import-outside-toplevel

  def offline(*args, **kwargs):
    raise urllib.error.URLError(OSError(-3, "Temporary failure in name resolution"))

  module, own = entry_point("evaluate", monkeypatch)  # (which undoes the monkeypatches)
  monkeypatch.setattr(urllib.request, "urlopen", offline)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  with pytest.raises(SystemExit) as exit_info:
    rest = cli.parse_flags(["evaluate", f"--workdir={tmp_path}/none", "--task=hellaswag"], own)
    cli._report_user_errors(module.main)(rest)  # pylint: disable=protected-access
  assert exit_info.value.code == errors.EXIT_USER_ERROR
  out, err = capsys.readouterr()
  assert not out and err == (
      f"error: hellaswag: cannot download {module.tasks.HELLASWAG_URL} (Temporary failure in "
      f"name resolution): offline? Download it elsewhere and pass it with "
      f"--task_file=path/to/hellaswag_val.jsonl (in a run: --config.train.task_file=...)\n")


@pytest.mark.parametrize("flag", ["--task_style=llmc", "--task_examples=3"])
def test_hellaswag_flags_without_the_task_are_one_line_naming_it(flag, tmp_path, monkeypatch,
                                                                 capsys):
  err = entry_error(monkeypatch, capsys, "evaluate", f"--workdir={tmp_path}/none", flag)
  assert err == ("error: --task_file, --task_examples and --task_style are HellaSwag's: add "
                 "--task=hellaswag\n")


def test_a_cache_dir_under_a_file_is_one_line(tmp_path):
  from andrea_jax import config as config_lib, prepare  # pylint: disable=import-outside-toplevel
  a_file = tmp_path / "afile"
  a_file.write_text("keep me")
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("a few words of text\n" * 50)
  config = configdict.apply_overrides(tiny.get_config(), {
      "data.path": str(corpus), "data.cache_dir": str(a_file / "cache"), "model.vocab_size": 300})
  with pytest.raises(errors.DataError, match=re.escape(
      f"data.cache_dir='{a_file / 'cache'}': '{a_file}' is a file, not a directory: pass a "
      f"directory for the prepared data")):
    prepare.prepare(config_lib.RunConfig.from_configdict(config))
  assert a_file.read_text() == "keep me"


def test_a_tokenizer_path_that_is_a_directory_says_so(tmp_path):
  from andrea_jax import config as config_lib, prepare  # pylint: disable=import-outside-toplevel
  (tmp_path / "tok").mkdir()
  (tmp_path / "tok" / "tokenizer.json").write_text("{}")
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("a few words of text\n" * 50)
  config = configdict.apply_overrides(tiny.get_config(), {
      "data.path": str(corpus), "data.cache_dir": str(tmp_path / "cache"),
      "data.tokenizer_path": str(tmp_path / "tok")})
  with pytest.raises(errors.DataError, match=re.escape(
      f"data.tokenizer_path='{tmp_path / 'tok'}' is a directory, not a tokenizer.json (the one "
      f"in it is '{tmp_path / 'tok' / 'tokenizer.json'}'); point it at a tokenizer.json")):
    prepare.prepare(config_lib.RunConfig.from_configdict(config))


@pytest.mark.parametrize("args, message", [
    (("sample", "--workdir=x", "--num_samples=0"), "--num_samples=0: 0 is not a positive integer"),
    (("import_hf", "--hf_dir=x", "--eval_windows=0"), "--eval_windows=0: 0 is not a positive"),
    (("sweep", "--parallel=0", "--dry_run"), "--parallel=0: 0 is not a positive integer"),
    (("sweep", "--gpus=-1", "--dry_run"), "--gpus=-1: -1 is not a non-negative integer"),
])
def test_counts_out_of_range_are_refused_when_the_flags_are_read(args, message, monkeypatch,
                                                                 capsys):
  """Before: a traceback from deep inside (a negative split, an empty thread pool) or a
  wrong message ("fewer than block_size + 1" tokens for --eval_windows=0)."""
  assert message in entry_error(monkeypatch, capsys, *args)


def test_a_config_file_that_does_not_load_is_one_line(tmp_path, monkeypatch, capsys):
  """``--config=`` a file of one's own that is not a config: its name, the error and its
  line, and what a config file is; a config of this repository that fails keeps its traceback."""
  cases = {"notes.txt": ("hello\n", "(NameError, line 1: name 'hello' is not defined)"),
           "broken.py": ("def get_config(:\n", "(SyntaxError, line 1: "),
           "empty.py": ("x = 1\n", "(AttributeError: module 'config_config' has no attribute "
                                   "'get_config')")}
  for name, (text, message) in cases.items():
    (tmp_path / name).write_text(text)
    # ml_collections loads every config as this module, into the last one loaded if any.
    monkeypatch.delitem(sys.modules, "config_config", raising=False)
    err = parse_error(monkeypatch, capsys, f"--config={tmp_path / name}")
    assert err.startswith(f"error: --config={tmp_path / name}: this file does not load as a "
                          f"config {message}"), err
    assert "defines get_config() (like experiments/configs/tiny.py)" in err


def test_a_missing_flagfile_read_when_the_config_flag_is_defined_is_one_line(tmp_path, monkeypatch,
                                                                             capsys):
  """ml_collections reads ``--flagfile`` from sys.argv already when ``--config`` is defined,
  at import: that too is one line, not absl's traceback."""
  monkeypatch.setattr(sys, "argv", ["prog", f"--flagfile={tmp_path / 'flags.txt'}"])
  with pytest.raises(SystemExit) as exit_info:
    cli.define_config_flag(flag_values=flags.FlagValues())
  assert exit_info.value.code == errors.EXIT_USER_ERROR
  assert capsys.readouterr().err == (f"error: --flagfile={tmp_path / 'flags.txt'}: No such file or "
                                     f"directory; pass a text file of flags, one per line "
                                     f"(--config=tiny, --config.train.steps=100, ...)\n")


def test_data_too_small_for_the_batch_is_told_settings_that_start_the_run(tmp_path):
  """Issue 73: the advice of a refusal for data smaller than one batch is followed as
  printed (every flag it names), and the run then starts and finishes: no second refusal."""
  (tmp_path / "text.txt").write_text("".join(f"line {i}: the quick brown fox jumps over the "
                                             f"lazy dog number {i * 7}\n" for i in range(12)),
                                     encoding="utf-8")
  args = ["experiments.run", "--config=tiny", f"--config.data.path={tmp_path / 'text.txt'}",
          f"--config.data.cache_dir={tmp_path / 'cache'}", f"--workdir={tmp_path / 'run'}",
          "--config.data.val_fraction=0.3", "--config.train.steps=1",
          "--config.train.warmup_steps=0", "--config.train.eval_batches=1",
          "--config.sample.num_samples=1"]
  refused = run_module(*args)
  assert refused.returncode == errors.EXIT_USER_ERROR, refused.stderr
  line = refused.stderr.strip().splitlines()[-1]
  fix = re.findall(r"--config\.\S+=\d+", line)
  assert "block_size=" in line and "batch_size=" in line and len(fix) >= 2, line
  started = run_module(*args, *fix)
  assert started.returncode == 0, started.stdout + started.stderr
  assert (tmp_path / "run" / "summary.json").exists()
