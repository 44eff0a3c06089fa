"""What a person does to flax's examples/wmt where `--global` names a place.

    python bench/real_programs/wmt_person.py FLAX/examples/wmt /tmp/wmt_person
    python -m compare.rewrite /tmp/wmt_person/train.py \
        -o /tmp/wmt_global/train.py --global   # beside a copy of the folder

`python -m compare.rewrite train.py -o OUT --global` on the example as
written (google/flax at 18f8f311) names 4 places, two constructs:
`per_host_sum_pmap`, a pmap over one device per host, and `tohost(...)` of
the prediction batch, which reshapes what it reads from pmap's `[devices,
batch, ...]`. Copies the folder and rewrites those two as a team on one
host would: the sum over one host is the tree itself, and the inputs and
targets are read from the host batch before it is sharded (the same
padded rows `tohost` gave back). Everything else is the example's.
"""

import pathlib
import shutil
import sys

_ONE_HOST_SUM = '''def per_host_sum_pmap(in_tree):
  """The sum over hosts, on one host: the tree itself."""
  return in_tree


'''
EDITS = (
    ("    pred_batch = common_utils.shard(pred_batch)\n",
     "    host_batch = pred_batch\n"
     "    pred_batch = common_utils.shard(pred_batch)\n"),
    ('inputs = tohost(pred_batch["inputs"])', 'inputs = host_batch["inputs"]'),
    ('targets = tohost(pred_batch["targets"])',
     'targets = host_batch["targets"]'),
)


def main(source: str, target: str) -> int:
  """Copies `source` to `target` with the person's edits; 2 on bad input."""
  train = pathlib.Path(source) / "train.py"
  if not train.is_file() or pathlib.Path(target).exists():
    print(f"usage: wmt_person.py FLAX/examples/wmt NEW_FOLDER ({train} must "
          f"exist, {target} must not)", file=sys.stderr)
    return 2
  text = train.read_text()
  start, end = text.find("def per_host_sum_pmap("), text.find("def tohost(")
  if not 0 <= start < end:
    print(f"{train}: not the example this edits (per_host_sum_pmap)",
          file=sys.stderr)
    return 2
  text = text[:start] + _ONE_HOST_SUM + text[end:]
  for old, new in EDITS:
    if text.count(old) != 1:
      print(f"{train}: not the example this edits ({old.splitlines()[0]!r})",
            file=sys.stderr)
      return 2
    text = text.replace(old, new)
  shutil.copytree(source, target)
  (pathlib.Path(target) / "train.py").write_text(text)
  return 0


if __name__ == "__main__":
  sys.exit(main(*sys.argv[1:3]) if len(sys.argv) == 3 else main("", ""))
