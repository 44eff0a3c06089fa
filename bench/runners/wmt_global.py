"""flax's examples/wmt (its last pmap version, as written) through both
steps of `python -m compare.rewrite`, in the `--global` table of
bench/runners/rewrite_global_runs.py (issue 74).

Given a checkout of google/flax whose examples/wmt still trains with pmap
(18f8f311 does) and a Python with tensorflow-cpu, tensorflow-text,
sentencepiece, tensorflow-datasets, clu and ml_collections beside jax:
the example's own `train.py` is rewritten by the first step (`python -m
compare.rewrite train.py -o train_port.py`) as written; `--global` names
two reads of pmap's layout a person rewrites, so the second step is
written from the person's edit (bench/real_programs/wmt_person.py) of a
copy. The example, the first step's port and the `--global` port, each as
its folder's `train.py`, are run by bench/real_programs/wmt_mock.py (tfds
mock data, 4 steps, evaluation and translation at steps 0, 2 and 3, a
checkpoint at the last, 8 emulated CPU devices): every tensorboard scalar
but `steps_per_second` and a digest of each checkpoint leaf compared, bit
for bit. The row is the `--global` file's (bench.runners.rewrite_written)
with the first step's outcome beside it.
"""

import pathlib
import re
import shutil

from bench.real_programs import run
from bench.real_programs import wmt_person
from bench.runners.rewrite_written import written

HERE = run.HERE
TIMINGS = ("steps_per_sec", "uptime")
WMT = ("flax `examples/wmt/train.py` (as written; `--global` of "
       "`wmt_person.py`'s edit of its 2 reads of pmap's layout)")


def _rewrite(folder: pathlib.Path, out: str, *flags: str):
  """`python -m compare.rewrite train.py -o OUT [flags]` in `folder`."""
  done, _ = run._python(  # pylint: disable=protected-access
      ["-m", "compare.rewrite", "train.py", "-o", out, *flags], folder)
  return done


def _ported(folder: pathlib.Path, written_file: str) -> pathlib.Path:
  """A copy of `folder` with `written_file` as its train.py."""
  ported = folder.with_name(f"{folder.name}_{pathlib.Path(written_file).stem}")
  shutil.copytree(folder, ported)
  shutil.copyfile(folder / written_file, ported / "train.py")
  return ported


def _printed(folder: pathlib.Path, row: dict, name: str):
  """wmt_mock.py on `folder`: (scalars, checkpoint leaf digests), its
  seconds and any error noted in `row`."""
  done, seconds = run._python(  # pylint: disable=protected-access
      [HERE / "wmt_mock.py", folder], folder)
  row.setdefault("seconds", []).append(round(seconds, 1))
  if done.returncode:
    row[f"{name}_error"] = done.stderr.strip().splitlines()[-3:]
    return [], []
  # clu's ReportProgress timings differ run to run (as lm1b_mock.py).
  lines = [l for l in done.stdout.splitlines()
           if not l.startswith(TIMINGS)]
  return ([l for l in lines if not l.startswith("checkpoint ")],
          [l for l in lines if l.startswith("checkpoint ")])


def _same(want, got) -> tuple[bool, int]:
  """Scalars equal (and some), and how many leaves are bitwise."""
  (scalars, leaves), (got_scalars, got_leaves) = want, got
  same = sum(1 for a, b in zip(leaves, got_leaves) if a == b)
  return (scalars == got_scalars and bool(scalars),
          same if len(leaves) == len(got_leaves) else 0)


def wmt(flax: pathlib.Path, work: pathlib.Path) -> dict:
  """Both steps of the example, run beside it: the table's row."""
  folder = work / "wmt"
  shutil.copytree(flax / "examples" / "wmt", folder)
  if "jax.pmap(" not in (folder / "train.py").read_text():
    return {"program": WMT, "not_run": f"examples/wmt under {flax} trains "
            "without pmap: not its pmap version"}
  first = _rewrite(folder, "train_port.py")
  as_written = _rewrite(folder, "train_global.py", "--global")
  edited = work / "wmt_person"
  if wmt_person.main(str(folder), str(edited)) != 0:
    return {"program": WMT, "not_run": "wmt_person.py does not edit this "
            "examples/wmt (its constructs moved)"}
  done = _rewrite(edited, "train_global.py", "--global")
  row = {"program": WMT, **written(
      (edited / "train.py").read_text(),
      (edited / "train_global.py").read_text(), done, None)}
  row["as_written_places"] = len(re.findall(r": NEEDS A PERSON: ",
                                            as_written.stdout))
  port_text = (folder / "train_port.py").read_text()
  row["first_step"] = {
      "exit": first.returncode,
      "places": len(re.findall(r": NEEDS A PERSON: ", first.stdout)),
      "pmap_names": len(re.findall(r"\b_pmap_\w+", port_text)),
      "lines": len(port_text.splitlines())}
  original = _printed(folder, row, "original")
  first_run = _printed(_ported(folder, "train_port.py"), row, "first_step")
  global_run = _printed(_ported(edited, "train_global.py"), row, "port")
  row["numbers"] = len(original[0])
  row["numbers_what"] = " tensorboard scalars"
  row["numbers_equal"], same = _same(original, global_run)
  first_equal, first_same = _same(original, first_run)
  row["first_step"].update(numbers_equal=first_equal,
                           checkpoint_leaves_bitwise=first_same)
  # The scalars that differ, each run's, to read what a NO is.
  for name, got in (("first_step", first_run), ("port", global_run)):
    row[f"{name}_differing"] = [(a, b) for a, b in zip(original[0], got[0])
                                if a != b]
  row["scalars"] = original[0]
  row["checkpoint_leaves"], row["checkpoint_leaves_bitwise"] = (
      len(original[1]), same)
  row["numbers_also"] = (
      f"; checkpoint: {same} of {len(original[1])} leaves bitwise; the "
      f"first step of the example as written: "
      f"{'yes' if first_equal else 'NO'}, checkpoint {first_same} of "
      f"{len(original[1])} bitwise")
  return row
