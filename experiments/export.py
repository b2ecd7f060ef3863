"""Export a trained run as a Hugging Face GPT-2 directory.

  python -m experiments.export --workdir=runs/tiny --out=exported/tiny
  python -m experiments.export --workdir=runs/tiny --out=exported/tiny --step=200

The directory holds config.json, model.safetensors (float32) and the run's tokenizer
(tokenizer.json, tokenizer_config.json, special_tokens_map.json), so
``GPT2LMHeadModel.from_pretrained(out)`` and ``AutoTokenizer.from_pretrained(out)`` load
it. Post-norm and SwiGLU models are refused: GPT-2 cannot express them. PyTorch is not
needed to export.
"""

from absl import flags, logging

from andrea_jax import files
from andrea_jax import model
from andrea_jax import workdir as workdir_lib
from andrea_jax.interop import hf_gpt2
from experiments import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "run directory written by experiments.run")
_OUT = flags.DEFINE_string("out", None, "directory to write the Hugging Face GPT-2 files to")
_STEP = flags.DEFINE_integer("step", None, "checkpoint step (default: the latest)")


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  purpose = "for the Hugging Face files (a new one, or one to overwrite)"
  files.check_directory(_OUT.value, "--out", purpose)  # before the model is read
  params, cfg, tok, _ = workdir_lib.load_run(_WORKDIR.value, _STEP.value)
  files.make_directory(_OUT.value, "--out", purpose)
  hf_gpt2.export_gpt2(params, cfg, _OUT.value, tokenizer=tok)
  print(f"exported {_WORKDIR.value} ({model.count_params(cfg):,} parameters, "
        f"{cfg.n_layer} layers, d_model {cfg.d_model}, vocab {cfg.vocab_size}) to {_OUT.value}")


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir", "out"])
  cli.run(main)
