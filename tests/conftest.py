"""What the whole suite shares: the XLA compile flags, the prepared-data cache, and the studies registered.

Compiling dominates the suite's tiny models (a step runs in milliseconds and compiles in
seconds). XLA's CPU backend at optimisation level 0 compiles about twice as fast (the
train step of tests/test_step.py: 17-19 s instead of 37-43 s, on a 2-core machine
at load 11-12) and runs slower (a 1-layer d_model-32 step 26 ms instead of 7 ms; the
`tiny` config's about 3x slower), which the suite's runs of a few steps do not feel
(tests/test_sharding.py's workers used these flags before). The flags are set here, before JAX starts, so they reach
this process and everything it starts (the command-line runs, the sharding workers, the
notebooks' kernels); a caller's own ``XLA_FLAGS`` stay, before these, and one that sets
the optimisation level itself is left alone.
"""

import os

import pytest

# The flags are coord_check's fast-compile options (one home; its comment says what each
# does): with the classic loop emitter for fusions instead of the MLIR fusion emitters a
# 2-layer train step compiles in 1.4 s instead of 4.4 s on jaxlib 0.10.2, and
# tests/test_model.py ran in 139 s instead of 255 s (2-core AMD EPYC, loaded alike).
# Importing JAX here is early enough: it reads XLA_FLAGS when its CPU backend starts.
from andrea_jax.tools.coord_check import FAST_COMPILE as _OPTIONS  # noqa: E402

FAST_COMPILE = " ".join(f"--{name}={str(value).lower()}" for name, value in _OPTIONS.items())
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE}".strip()

# The user cache (``files.user_cache_dir``: the CPU's measured matmul peak, downloaded task
# sets) goes to a directory of this run's own: a peak measured under the fast-compile flags
# above would otherwise be read back by the user's next real run, and the tests would read
# whatever the user's machine left there.
import tempfile  # noqa: E402

os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="andrea-test-cache-")

# The studies, their configs and the default study registered with the research framework
# (research.registry.register), as every command has them: a test that reads a study through
# research.registry alone needs them too.
import experiments  # noqa: E402,F401


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory):
  """One ``data.cache_dir`` for the session's training runs (per xdist worker): a corpus
  slice and vocabulary that several modules train on is prepared once, not per module.
  A test of the preparation itself takes a directory of its own."""
  return tmp_path_factory.mktemp("data-cache")
