"""Entry points and experiment definitions for andrea_jax (run, prepare, sample, sweep, report).

``python -m experiments.<command>`` starts under TCMalloc when the system has it, else under
the mimalloc of requirements.txt's ``cmeel-mimalloc`` wheel (``andrea_jax/allocator.py``;
``ANDREA_MALLOC=system`` opts out); importing this package from anything else (a test, a notebook) leaves the allocator as it is.

Importing it registers the studies (``experiments/studies/``), the builder of their configs
(``configs.build``) and the study judging a sweep that names none with the research framework
(``research.registry.register``), which imports nothing of this package itself.
"""

import sys as _sys

if len(_sys.orig_argv) > 2 and _sys.orig_argv[1] == "-m" and _sys.orig_argv[2].startswith("experiments."):
  from andrea_jax import allocator as _allocator
  _allocator.maybe_reexec()

from experiments import configs as _configs  # noqa: E402
from experiments import studies as _studies  # noqa: E402
from research import registry as _registry  # noqa: E402

# norm_mlp judges a sweep that records no study: the first study's records predate sweep.json.
_registry.register(_studies, _configs.build, default="norm_mlp")
