"""Equinox's BERT example through `python -m compare.rewrite`, as written.

    python -m bench.real_programs.equinox_bert --notebook PATH/bert.ipynb

Fetches nothing: `--notebook` is docs/examples/bert.ipynb of a checkout of
patrick-kidger/equinox (measured at 7c447d43). Its model, loss, steps and
loops run as written, with what a machine without its data needs changed,
each named where it is made (`_ADAPTED`): synthetic SST-2-shaped batches for
the tokenized dataset and tqdm, a smaller vocabulary, the model as
initialised for the checkpoint, optax's state of the model's arrays. Two
programs are written: the example, its ~~`jax.device_put_replicated`~~
calls as written (jax 0.10 removed it: the rewrite writes the stacked
copies), and the original to compare with, those calls stacking the copies
by hand. The first is rewritten (`compare.rewrite`, both steps), then the
original and each port run on 8 emulated CPU devices and every printed
number is compared. Prints one line per program; exit 0 where every number
of the first step is the original's, 1 otherwise, 2 on bad input.
"""

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
_ENV = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": "cpu"}
_NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")
# What the example needs that a machine without its data has not, as
# (pattern, replacement) on its code; each must match once.
_ADAPTED = [
    (r"from datasets import .*\n", ""),
    (r"from tqdm import .*\n", ""),
    (r"from transformers import .*\n", ""),
    (r'"vocab_size": 30522,', '"vocab_size": 1000,  # 30522: CPU time'),
    (r"classifier_chkpt = eqx.tree_deserialise_leaves\(.*\)",
     "classifier_chkpt = classifier  # as initialised: no checkpoint"),
    # optax now rejects the state of a model with non-array leaves.
    (r"opt_state = tx.init\(classifier_chkpt\)",
     "opt_state = tx.init(eqx.filter(classifier_chkpt, eqx.is_array))"),
    (r"tx.update\(grads, opt_state, model\)",
     "tx.update(grads, opt_state, eqx.filter(model, eqx.is_array))"),
    (r"epochs = 3", "epochs = 1"),
    (r"with tqdm.tqdm\([^:]*\) as tqdm_epoch:", "if True:"),
    (r"for batch in tqdm_epoch:", "for batch in batches(3):"),
    (r"tqdm_epoch.set_postfix\(loss=(.*)\)", r'print("loss", repr(\1))'),
    (r"for batch in tqdm.tqdm\([^:]*\):", "for batch in batches(2):"),
    (r"(\n +)(output = p_make_eval_step\(model, inputs\))",
     r'\1\2\1print("logits", repr(float(np.asarray(output).sum())))'),
]
_BATCHES = '''
data_rng = np.random.default_rng(0)


def batches(count, seq=32):
  """Synthetic SST-2-shaped batches (tokenized sentences, labels)."""
  for _ in range(count):
    yield {"input_ids": data_rng.integers(0, 1000, (batch_size, seq)),
           "token_type_ids": np.zeros((batch_size, seq), np.int32),
           "label": data_rng.integers(0, 2, (batch_size,))}
'''
_STACKED = '''

def stacked_copies(x, devices):
  """What jax.device_put_replicated made (removed in jax 0.10)."""
  return jax.tree.map(lambda a: jnp.stack([a] * len(devices))
                      if eqx.is_array(a) else a, x)
'''


def programs(notebook: pathlib.Path) -> tuple[str, str]:
  """The example as written (its removed calls kept) and the original to
  compare with (them stacked by hand), from the notebook's code cells."""
  cells = ["".join(c["source"]) for c in json.loads(notebook.read_text())[
      "cells"] if c["cell_type"] == "code"]
  code = "\n\n".join(c for c in cells if "AutoTokenizer.from_pretrained"
                     not in c and "load_dataset(" not in c)
  for pattern, replacement in _ADAPTED:
    code, count = re.subn(pattern, replacement, code)
    if count != 1:
      raise ValueError(f"{pattern!r} matched {count} times, not once: "
                       "another version of the example")
  # `jax.random.PRNGKey | None` in its annotations fails on Python 3.11.
  head = "from __future__ import annotations\n"
  train = code.index("epochs = 1")
  as_written = head + code[:train] + _BATCHES + "\n\n" + code[train:]
  original = as_written.replace("jax.device_put_replicated(",
                                "stacked_copies(")
  at = original.index(_BATCHES)
  return as_written, original[:at] + _STACKED + original[at:]


def _numbers(script: pathlib.Path) -> list[str]:
  done = subprocess.run([sys.executable, str(script)], cwd=ROOT,
                        env={**os.environ, **_ENV}, capture_output=True,
                        text=True, timeout=1800, check=False)
  if done.returncode:
    return [f"exit {done.returncode}: {done.stderr.strip()[-300:]}"]
  return _NUMBER.findall(done.stdout)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m bench.real_programs."
                                   "equinox_bert", description=__doc__.split(
                                       "\n")[0])
  parser.add_argument("--notebook", required=True, type=pathlib.Path,
                      help="docs/examples/bert.ipynb of an equinox checkout")
  args = parser.parse_args(argv)
  try:
    as_written, original = programs(args.notebook)
  except (OSError, ValueError, KeyError) as err:
    print(f"equinox_bert: --notebook {args.notebook}: {err}",
          file=sys.stderr)
    return 2
  work = pathlib.Path(tempfile.mkdtemp(prefix="equinox-bert-"))
  (work / "bert.py").write_text(as_written)
  (work / "original.py").write_text(original)
  runs = {"original": _numbers(work / "original.py")}
  for name, flags in (("first step", []), ("--global", ["--global"])):
    out = work / f"port_{len(flags)}.py"
    done = subprocess.run([sys.executable, "-m", "compare.rewrite",
                           str(work / "bert.py"), "-o", str(out), *flags],
                          cwd=ROOT, capture_output=True, text=True,
                          check=False)
    print(f"{name}: compare.rewrite exit {done.returncode}, "
          f"{done.stdout.splitlines()[-2] if done.stdout else done.stderr}")
    runs[name] = _numbers(out)
  for name, numbers in runs.items():
    same = "same as the original" if numbers == runs["original"] else (
        "DIFFERENT")
    print(f"{name}: {len(numbers)} numbers, {same}: {' '.join(numbers)}")
  return 0 if runs["first step"] == runs["original"] else 1


if __name__ == "__main__":
  sys.exit(main())
