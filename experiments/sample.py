"""Sample from a trained run: ``python -m experiments.sample --workdir=runs/... --prompt="def "``.

  python -m experiments.sample --workdir=runs/tiny --prompt="import " --num_samples=3
  python -m experiments.sample --workdir=runs/tiny --temperature=0   # greedy

Prompt plus new tokens must fit the model's context (block_size); a longer request is
refused with the numbers (no sliding window).
"""

import jax
from absl import flags, logging

from andrea_jax import sample
from andrea_jax import workdir as workdir_lib
from experiments import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "run directory written by experiments.run")
_PROMPT = flags.DEFINE_string("prompt", "", "text to continue ('' = start of a document)")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 64, "tokens to generate per sample")
_NUM = flags.DEFINE_integer("num_samples", 1, "number of samples", lower_bound=1)
_TEMPERATURE = flags.DEFINE_float("temperature", 0.8, "softmax temperature (0 = greedy)")
_TOP_K = flags.DEFINE_integer("top_k", 50, "keep the k most likely tokens (0 = all)")
_TOP_P = flags.DEFINE_float("top_p", 0.95, "nucleus sampling mass (1 = off)")
_SEED = flags.DEFINE_integer("seed", 0, "sampling seed")
_STEP = flags.DEFINE_integer("step", None, "checkpoint step (default: the latest)")


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  params, cfg, tok, _ = workdir_lib.load_run(_WORKDIR.value, _STEP.value)
  for i, key in enumerate(jax.random.split(jax.random.key(_SEED.value), _NUM.value)):
    text = sample.generate_text(params, cfg, tok, _PROMPT.value, _MAX_NEW.value, key,
                                temperature=_TEMPERATURE.value, top_k=_TOP_K.value,
                                top_p=_TOP_P.value)
    print(f"--- sample {i} ---\n{_PROMPT.value}{text}")


if __name__ == "__main__":
  flags.mark_flag_as_required("workdir")
  cli.run(main)
