"""Entry points and experiment definitions for andrea_jax (run, prepare, sample, sweep, report).

``python -m experiments.<command>`` starts under TCMalloc when the system has it, else under
the mimalloc of requirements.txt's ``cmeel-mimalloc`` wheel (``andrea_jax/allocator.py``;
``ANDREA_MALLOC=system`` opts out); importing this package from anything else (a test, a notebook) changes nothing.
"""

import sys as _sys

if len(_sys.orig_argv) > 2 and _sys.orig_argv[1] == "-m" and _sys.orig_argv[2].startswith("experiments."):
  from andrea_jax import allocator as _allocator
  _allocator.maybe_reexec()
