"""andrea_jax/allocator.py: a command re-executes itself once under TCMalloc when it is
installed, never twice, never against the user's choice, and never when imported."""

import os
import subprocess
import sys

from andrea_jax import allocator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fake_library(tmp_path):
  d = tmp_path / "lib"
  d.mkdir()
  (d / "libtcmalloc_minimal.so.4").write_bytes(b"")
  return str(d), str(d / "libtcmalloc_minimal.so.4")


def test_the_library_is_found_named_or_refused(tmp_path):
  d, lib = fake_library(tmp_path)
  assert allocator.find({}, dirs=(d,)) == lib
  assert allocator.find({}, dirs=(str(tmp_path / "none"),), wheel=lambda: None) is None
  assert allocator.find({"ANDREA_MALLOC": "system"}, dirs=(d,)) is None
  assert allocator.find({"ANDREA_MALLOC": lib}, dirs=()) == lib
  assert allocator.find({"ANDREA_MALLOC": str(tmp_path / "missing.so")}, dirs=(d,)) is None


def test_a_command_starts_again_with_the_preload_once(tmp_path, capsys, monkeypatch):
  d, lib = fake_library(tmp_path)
  monkeypatch.setattr(allocator, "DIRS", (d,))
  calls = []
  argv = [sys.executable, "-m", "experiments.run", "--config=tiny"]
  allocator.maybe_reexec(argv, env={"PATH": "/bin"}, execve=lambda *a: calls.append(a), platform="linux")
  ((exe, got_argv, env),) = calls
  assert exe == sys.executable and got_argv == argv and env["LD_PRELOAD"] == lib and env["PATH"] == "/bin"
  assert capsys.readouterr().out == ""  # a command that fails on its input prints its error alone
  # The started-again process's run says so, once (train.run prints it).
  assert allocator.note(env).startswith(f"memory: tcmalloc preloaded ({lib}; ")
  assert allocator.note({}) is None and allocator.note({allocator.IN_USE: lib}) is None
  # The re-executed command (or a caller's own allocator) is left alone; so are opt-outs and other OSes.
  for env in ({"LD_PRELOAD": lib}, {"LD_PRELOAD": "/x/libjemalloc.so.2"}, {"ANDREA_MALLOC": "system"}):
    allocator.maybe_reexec(argv, env=env, execve=lambda *a: calls.append(a), platform="linux")
  allocator.maybe_reexec(argv, env={}, execve=lambda *a: calls.append(a), platform="darwin")
  assert len(calls) == 1
  # A path that names no file: the run goes on with the system allocator and says why.
  capsys.readouterr()
  allocator.maybe_reexec(argv, env={"ANDREA_MALLOC": "/no/such/libtcmalloc.so"},
                         execve=lambda *a: calls.append(a), platform="linux")
  assert len(calls) == 1
  assert "ANDREA_MALLOC='/no/such/libtcmalloc.so': no such file" in capsys.readouterr().err


def harmless_library() -> str:
  """A shared library any Linux process may preload without effect (the C maths library)."""
  dirs = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
          "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
  found = [os.path.join(d, "libm.so.6") for d in dirs if os.path.exists(os.path.join(d, "libm.so.6"))]
  assert found, "no libm.so.6 to preload"
  return found[0]


PROBE = ("from andrea_jax import allocator; allocator.maybe_reexec(); "
         "print('NOTE', allocator.note())")


def test_a_process_starts_again_once_with_the_library_loaded():
  # The real execve: the started-again process has the library preloaded and says so; it
  # does not start a third time (that would loop until the timeout).
  lib = harmless_library()
  env = {**os.environ, "ANDREA_MALLOC": lib, "LD_PRELOAD": "", "LD_DEBUG": "files"}
  out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO,
                       check=False, timeout=120, env=env)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.strip() == (f"NOTE memory: libm.so.6 preloaded ({lib}; fewer page faults per "
                                f"step than glibc's allocator); ANDREA_MALLOC=system keeps the system's")
  assert f"file={lib} [0];  generating link map" in out.stderr  # the dynamic loader's own word
  plain = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO,
                         check=False, timeout=120, env={**env, "ANDREA_MALLOC": "system"})
  assert plain.stdout.strip() == "NOTE None" and f"file={lib} [0]" not in plain.stderr


def test_the_commands_start_under_it_and_an_import_does_not():
  lib = harmless_library()
  env = {**os.environ, "ANDREA_MALLOC": lib, "LD_PRELOAD": "", "LD_DEBUG": "files"}
  command = subprocess.run([sys.executable, "-m", "experiments.report", "--help"], capture_output=True,
                           text=True, cwd=REPO, check=False, timeout=120, env=env)
  assert f"file={lib} [0];  generating link map" in command.stderr
  assert "--sweep_dir" in command.stdout and not command.stdout.startswith(("note", "memory"))
  imported = subprocess.run([sys.executable, "-c", "import experiments.report"], capture_output=True,
                            text=True, cwd=REPO, check=False, timeout=120, env=env)
  assert imported.returncode == 0 and f"file={lib} [0]" not in imported.stderr


def test_without_a_system_tcmalloc_the_wheels_mimalloc_is_the_default(tmp_path):
  """requirements.txt's cmeel-mimalloc, found from the package's installed files; a system
  TCMalloc is preferred, and ANDREA_MALLOC=system still opts out."""
  wheel = allocator.wheel_library()
  assert wheel is not None and os.path.basename(wheel).startswith("libmimalloc.so"), (
      "cmeel-mimalloc is not installed: pip install -r requirements.txt")
  assert os.path.exists(wheel) and "cmeel.prefix" in wheel
  none = str(tmp_path / "none")
  assert allocator.find({}, dirs=(none,)) == wheel
  assert allocator.find({}, dirs=(none,), wheel=lambda: "/w/libmimalloc.so") == "/w/libmimalloc.so"
  d, lib = fake_library(tmp_path)
  assert allocator.find({}, dirs=(d,)) == lib  # the system's TCMalloc first
  assert allocator.find({"ANDREA_MALLOC": "system"}, dirs=(none,)) is None
  assert allocator.wheel_library("no-such-distribution-r62") is None


def test_a_command_runs_under_the_wheels_mimalloc():
  """The real re-exec with no system TCMalloc: the process maps the wheel's libmimalloc."""
  probe = ("from andrea_jax import allocator; allocator.DIRS = (); allocator.maybe_reexec(); "
           "print('NOTE', allocator.note()); print(open('/proc/self/maps').read())")
  env = {**os.environ, "LD_PRELOAD": ""}
  env.pop("ANDREA_MALLOC", None)
  out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO,
                       check=False, timeout=120, env=env)
  assert out.returncode == 0, out.stderr[-2000:]
  wheel = allocator.wheel_library()
  assert out.stdout.startswith(f"NOTE memory: mimalloc preloaded ({wheel}; "), out.stdout[:300]
  assert wheel in out.stdout.split("\n", 1)[1]  # mapped into the process
