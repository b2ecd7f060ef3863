"""Command-line pieces shared by every entry point (run, prepare, sample, export, ...).

``cli.run(main)`` replaces ``absl.app.run(main)``. A mistake the user can fix (a bad
flag, config, override, data, checkpoint or file) ends the program with one
``error: <message>`` line on stderr and exit code 2 (``errors.EXIT_USER_ERROR``), never a
traceback; anything else is a bug and keeps its traceback.

``define_config_flag()`` is ml_collections' ``DEFINE_config_file`` (``--config=path.py``,
``--config=path.py:arg``, overrides such as ``--config.train.steps=100``); ``cli.run``
also lets it take a bare config name: ``--config=tiny`` and ``--config=tiny:norm=post``
mean ``experiments/configs/tiny.py`` of this repository, from any directory.
"""

from __future__ import annotations

import functools
import os
import pathlib
import re
import sys
from typing import Callable, NoReturn

from absl import app
from absl import flags
from ml_collections import config_flags

from andrea_jax import configdict
from andrea_jax import errors

CONFIG_DIR = pathlib.Path(__file__).resolve().parent / "configs"
# Names of the flags defined by define_config_flag.
_CONFIG_FLAGS: set[str] = set()
# The exceptions that are the user's to fix: the project's errors (andrea_jax/errors.py; data,
# checkpoint, tokenizer and interop errors derive from them), absl's usage errors, OS errors
# (a missing file, a permission, a full disk). Anything else is a bug and keeps its traceback.
USER_ERRORS = (errors.AndreaError, app.UsageError, OSError)


def config_names() -> list[str]:
  """The named configs in ``experiments/configs`` (``tiny``, ``andrea120m``, ...)."""
  return sorted(p.stem for p in CONFIG_DIR.glob("*.py")
                if p.stem != "__init__")


def resolve_config_path(name_or_path: str) -> str:
  """``"tiny:arg"`` -> ``"<repo>/experiments/configs/tiny.py:arg"``; paths pass through."""
  target, sep, arg = name_or_path.partition(":")
  if pathlib.Path(target).is_file():
    return name_or_path
  candidate = CONFIG_DIR / f"{target}.py"
  if "/" not in target and not target.endswith(".py") and candidate.is_file():
    return f"{candidate}{sep}{arg}"
  raise errors.ConfigError(f"--config={name_or_path!r}: {target!r} is neither a config file nor "
                           f"a config name; names are {', '.join(config_names())}")


def define_config_flag(name: str = "config", default: str | None = None,
                       flag_values: flags.FlagValues = flags.FLAGS) -> flags.FlagHolder:
  """Define ``--<name>`` taking a config name or path (see the module docstring)."""
  _CONFIG_FLAGS.add(name)
  try:
    return config_flags.DEFINE_config_file(
        name, default and resolve_config_path(default),
        "config name (e.g. tiny, andrea120m:norm=post) or path to a config file",
        flag_values=flag_values, lock_config=True)
  except flags.CantOpenFlagFileError as e:  # ml_collections reads sys.argv's --flagfile here
    fail(_flagfile_message(e))


def run(main: Callable[[list[str]], object]) -> None:
  """``absl.app.run(main)``, with the project's errors as one line and exit code 2."""
  app.run(_report_user_errors(main), flags_parser=parse_flags)


def parse_flags(argv: list[str], flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
  """absl's flag parsing after resolving config names; a flag mistake exits via ``fail``."""
  args = argv[1:]
  try:
    args = flag_values.read_flags_from_files(args, force_gnu=False)  # expand --flagfile
    args = resolve_config_names(args)
    return flag_values([argv[0], *args])
  except flags.CantOpenFlagFileError as e:
    fail(_flagfile_message(e))
  except (errors.AndreaError, flags.Error) as e:  # bad flag, value, config file or variant
    fail(_bad_override_value(e, flag_values) or _root_message(e))
  except (KeyError, AttributeError) as e:  # ml_collections: an override names no field
    message = _misspelt_override(e, args) or _config_file_error(e, args)
    if message is None:
      raise
    fail(message)
  except Exception as e:  # pylint: disable=broad-except
    message = _config_file_error(e, args)  # a config file of one's own that does not load
    if message is None:
      raise
    fail(message)


def resolve_config_names(args: list[str]) -> list[str]:
  """``--config=tiny:x`` (or ``--config tiny:x``) -> ``--config=<repo>/.../tiny.py:x``."""
  out = list(args)
  for i, arg in enumerate(out):
    for name in _CONFIG_FLAGS:
      match = re.fullmatch(rf"--?{name}(=(.*))?", arg)
      if match and match[1]:
        out[i] = f"--{name}={resolve_config_path(match[2])}"
      elif match and i + 1 < len(out):
        out[i + 1] = resolve_config_path(out[i + 1])
  return out


def overridden_fields(flag_values: flags.FlagValues = flags.FLAGS, name: str = "config") -> dict:
  """``{"train.steps": 20, ...}``: the fields the command line set, by override or variant.

  ml_collections registers a flag only for the overrides a command line names; the
  variants (``--config=tiny:norm=post``, bare keys address ``model``) come from the
  config flag's argument.
  """
  variants = flag_values[name].serialize().split("=", 1)[-1].partition(":")[2]
  out = {(k if "." in k else f"model.{k}"): v for k, v in configdict.parse_variants(variants).items()}
  for flag in flag_values:
    if flag.startswith(f"{name}.") and flag_values[flag].present:
      out[flag.removeprefix(f"{name}.")] = flag_values[flag].value
  return out


def fit_vocab(config, overridden: dict) -> bool:
  """Whether preparation may shrink the vocabulary to what the corpus fills: own data
  (``data.path`` or ``data.hf_dataset``), a tokenizer trained on it, and no vocab_size on
  the command line."""
  return bool((config.data.path or config.data.hf_dataset) and not config.data.tokenizer_path
              and not {"model.vocab_size", "data.vocab_size"} & set(overridden))


def fit_to_data(config, overridden: dict, workdir: str | None = None) -> list[str]:
  """Settings the command left to their defaults, fitted to its run; one note each.

  A run no longer than its warmup gets a shorter one; a resume keeps the warmup its
  workdir's run started with. With data of one's own (``data.path``, ``data.hf_dataset``,
  ``data.shards``), a new run's data is prepared first: a corpus too small for the
  vocabulary gets the one it fills, and the samples continue the opening words of a
  held-out document (not the built-in "def "). A resume (or a finished run) keeps the
  vocabulary and prompt of its first start and prepares nothing here: the run reads its
  data where it recorded it, or, finished, not at all.
  """
  # Imported here: report and the other light commands share this module without JAX.
  from andrea_jax import config as config_lib  # pylint: disable=import-outside-toplevel
  from andrea_jax import train, workdir as workdir_lib  # pylint: disable=import-outside-toplevel
  from andrea_jax import prepared as prepared_lib  # pylint: disable=import-outside-toplevel
  saved = workdir_lib.load_config_dict(workdir) if workdir else None
  notes = []
  if "train.warmup_steps" not in overridden:
    if saved is not None:  # a resume keeps the warmup of the first start (fitted or not)
      config.train.warmup_steps = saved["train"]["warmup_steps"]
    else:
      notes.append(configdict.fit_warmup(config))
  if saved is not None and (config.data.path or config.data.hf_dataset or config.data.shards):
    # A resume (or a finished run) keeps what its first start fitted; its data is read (or
    # left alone) by the run itself, where the run recorded it (train.prepare_data).
    for group, field, names in (("model", "vocab_size", {"model.vocab_size", "data.vocab_size"}),
                                ("sample", "prompt", {"sample.prompt"})):
      if not names & set(overridden) and field in saved.get(group, {}):
        config[group][field] = saved[group][field]
  elif config.data.path or config.data.hf_dataset or config.data.shards:
    prepared = train.prepare_data(config_lib.RunConfig.from_configdict(config),
                                  fit_vocab=fit_vocab(config, overridden), workdir=workdir)
    config.model.vocab_size = prepared.vocab_size  # data.vocab_size refers to it
    if "sample.prompt" not in overridden:
      config.sample.prompt = prepared_lib.opening_words(prepared)
      notes.append(f"samples will continue {config.sample.prompt!r}, the opening of a "
                   f"held-out document (set --config.sample.prompt to choose)")
  return [n for n in notes if n]


def fail(message: str) -> NoReturn:
  """Print ``error: <message>`` on stderr and exit with ``errors.EXIT_USER_ERROR``."""
  print(f"error: {message}", file=sys.stderr)
  sys.exit(errors.EXIT_USER_ERROR)


def _report_user_errors(main: Callable[[list[str]], object]) -> Callable[[list[str]], object]:
  @functools.wraps(main)
  def wrapped(argv):
    try:
      return main(argv)
    except (errors.AndreaError, app.UsageError) as e:
      fail(str(e))
    except OSError as e:  # the last resort: each path a command names is checked where it is read
      fail(_os_error_message(e))
  return wrapped


def _os_error_message(error: OSError) -> str:
  """``<path>: <reason>; <fix>`` for an OS error no check caught; its text if it names no path."""
  if error.filename is None or error.strerror is None:
    return str(error)
  return (f"{os.fspath(error.filename)}: {error.strerror}; check the flag or config field that "
          f"names this path (a file or a directory, as it expects, that you can read or write)")


def _flagfile_message(error: flags.CantOpenFlagFileError) -> str:
  """``--flagfile=x: No such file or directory; ...`` for absl's "Unable to open flagfile"."""
  cause = error.__context__
  if not isinstance(cause, OSError) or cause.filename is None:
    return str(error)
  return (f"--flagfile={cause.filename}: {cause.strerror}; pass a text file of flags, one per "
          f"line (--config=tiny, --config.train.steps=100, ...)")


def _config_file_error(error: BaseException, args: list[str]) -> str | None:
  """One line for a config file of one's own (``--config=path.py``) that does not load (not
  Python, no ``get_config``, an exception inside it), else None: a config of this repository
  that fails is a bug and keeps its traceback."""
  for arg in args:
    for name in _CONFIG_FLAGS:
      match = re.fullmatch(rf"--?{name}=([^:]*)(:.*)?", arg)
      if not match or pathlib.Path(match[1]).resolve().parent == CONFIG_DIR:
        continue
      path = os.path.realpath(match[1])
      lines = [tb.tb_lineno for tb in _frames(error)
               if os.path.realpath(tb.tb_frame.f_code.co_filename) == path]
      if isinstance(error, SyntaxError) and error.filename:
        lines += [error.lineno] if os.path.realpath(error.filename) == path else []
      if not lines and "get_config" not in str(error):
        continue
      where = f", line {lines[-1]}" if lines else ""
      return (f"--{name}={match[1]}: this file does not load as a config ({type(error).__name__}"
              f"{where}: {getattr(error, 'msg', None) or error}); a config file is Python that "
              f"defines get_config() (like experiments/configs/tiny.py), or pass a config name "
              f"({', '.join(config_names())})")
  return None


def _frames(error: BaseException):
  tb = error.__traceback__
  while tb is not None:
    yield tb
    tb = tb.tb_next


def _root_message(error: BaseException) -> str:
  """The message of the innermost project error behind ``error`` (flag parsing wraps them)."""
  found, seen = error, error
  while seen is not None:
    if isinstance(seen, errors.AndreaError):
      found = seen
    seen = seen.__cause__ or seen.__context__
  return str(found)


def _bad_override_value(error: flags.Error, flag_values: flags.FlagValues) -> str | None:
  """``--config.model.mlp_ratio=two: expected a number (float), e.g. 4.0``, else None."""
  match = re.match(r"flag --([\w.]+)=(.*?): ", str(error))
  if not (isinstance(error, flags.IllegalFlagValueError) and match and "." in match[1]
          and match[1].split(".")[0] in _CONFIG_FLAGS and match[1] in flag_values):
    return None
  return f"--{match[1]}={match[2]}: {configdict.expected_value(flag_values[match[1]].value)}"


def _misspelt_override(error: Exception, args: list[str]) -> str | None:
  """One line for ml_collections' error on ``--config.a.b=v`` naming no field, else None."""
  while isinstance(error, BaseException) and error.args:  # AttributeError(KeyError(text))
    error = error.args[0]
  text = str(error)
  key = re.match(r"'([^']+)'", text)
  hint = re.search(r'Did you mean "([^"]+)"', text)
  for arg in args:
    for name in _CONFIG_FLAGS:
      match = re.match(rf"--?(?:no)?{name}\.([^=]+)", arg)
      if match and text.endswith(f"Attempting to lookup: {match[1]}"):  # a.b.c where a.b is a value
        return f"--{name}.{match[1]}: {text}"
      if key and match and key[1] in match[1].split("."):
        parts = match[1].split(".")
        where = ".".join(parts[:parts.index(key[1])]) or "the config"
        return (f"--{name}.{match[1]}: {where} has no field {key[1]!r}" +
                (f"; did you mean {hint[1]!r}?" if hint else ""))
  return None
