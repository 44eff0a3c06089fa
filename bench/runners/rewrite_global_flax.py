"""flax's examples/nlp_seq, examples/imagenet and examples/lm1b (its last
pmap version), as written, in the `--global` table of
bench/runners/rewrite_global_runs.py (issue 58).

Given a checkout of google/flax (`--flax` or FLAX_CHECKOUT) and a Python
with tensorflow-cpu, tensorboard, tensorflow-datasets, clu and
ml_collections beside jax, each example's own `train.py` is rewritten from
a copy of its folder with `python -m compare.rewrite train.py -o
train_global.py --global --prove PORT --steps 3` (its Port beside it:
bench/real_programs/nlp_seq_port.py, imagenet_port.py), and the original
and the port are run on 8 emulated CPU devices as bench/real_programs
runs them: nlp_seq by `run.nlp_seq` (synthetic CoNLL-U, every tensorboard
scalar but `steps per second` compared), imagenet by `imagenet_mock.py`
(tfds mock data, `_ResNet1`, every tensorboard scalar but
`steps_per_second` and a digest of each leaf of the checkpoint it saves),
lm1b by `lm1b_mock.py` alike (its Port: lm1b_port.py). lm1b's pmap version
is flax 558be01e^ (558be01e moved its steps to jit): the checkout's
examples/lm1b where its train step is still a pmap, else that commit's
folder taken from the checkout's git (`git archive`; a bare mirror will
do). Its `per_host_sum_pmap`, which nothing calls, is set aside by the
rewrite: the row keeps what the report says of it (`never_called`).
examples/wmt, its last pmap version, through both steps, is
bench/runners/wmt_global.py's row. Without a checkout or those packages
(CI has neither) each row says it was not run, and why.
"""

import filecmp
import importlib.util
import pathlib
import shutil
import subprocess
import tarfile
import tempfile

from bench.real_programs import run
from bench.runners import wmt_global
from bench.runners.rewrite_written import written

HERE = run.HERE
NLP_SEQ = "flax `examples/nlp_seq/train.py` (as written)"
IMAGENET = "flax `examples/imagenet/train.py` (as written)"
LM1B = "flax `examples/lm1b/train.py` at 558be01e^ (as written)"
WMT = wmt_global.WMT
# lm1b's last pmap version: 558be01e ("updated lm1b example with jit")
# made its train, eval and predict steps jit's.
LM1B_COMMIT = "558be01e^"
# What each example imports beyond jax and flax.
NEEDS = {NLP_SEQ: ("tensorflow", "tensorboard"),
         IMAGENET: ("tensorflow", "tensorboard", "tensorflow_datasets",
                    "clu", "ml_collections"),
         LM1B: ("tensorflow", "tensorboard", "tensorflow_datasets",
                "tensorflow_text", "sentencepiece", "clu", "ml_collections")}
NEEDS[WMT] = NEEDS[LM1B]


def _global(folder: pathlib.Path, port: str) -> dict:
  """`--global --prove` of the folder's train.py, its Port copied beside
  it: the written file's row (bench.runners.rewrite_written.written)."""
  shutil.copyfile(HERE / f"{port}.py", folder / f"{port}.py")
  done, seconds = run._python(  # pylint: disable=protected-access
      ["-m", "compare.rewrite", "train.py", "-o", "train_global.py",
       "--global", "--prove", f"{port}:port", "--steps", "3"], folder)
  row = written((folder / "train.py").read_text(),
                (folder / "train_global.py").read_text(), done, port)
  row["prove_seconds"] = round(seconds, 1)
  # What the report says of a pmap in a function nothing calls (lm1b's).
  uncalled = [l.strip() for l in done.stdout.splitlines()
              if "never called" in l]
  if uncalled:
    row["never_called"] = uncalled
  if row["prove"] == "none":
    row["prove_error"] = (done.stdout + done.stderr).strip().splitlines()[-3:]
  return row


def nlp_seq(flax: pathlib.Path, work: pathlib.Path) -> dict:
  """run.nlp_seq (rewrite, both run, every scalar compared), then the
  rewrite proved with nlp_seq_port; the file proved is the file run."""
  record = run.nlp_seq(flax, work, True)
  folder = work / "nlp_seq"
  row = {"program": NLP_SEQ, **_global(folder, "nlp_seq_port")}
  row["same_file_run"] = filecmp.cmp(folder / "train_port.py",
                                     folder / "train_global.py",
                                     shallow=False)
  row["numbers"] = record["numbers"]
  row["numbers_what"] = " tensorboard scalars"
  row["numbers_equal"] = (record["ran"] and record["same_numbers"]
                          and record.get("largest_relative") == 0.0
                          and row["same_file_run"])
  row["seconds"] = record["seconds"]
  for key in ("original_error", "port_error"):
    if key in record:
      row[key] = record[key]
  return row


def imagenet(flax: pathlib.Path, work: pathlib.Path) -> dict:
  """The rewrite proved with imagenet_port, then imagenet_mock.py on the
  example and on a copy with the rewrite as its train.py."""
  folder = work / "imagenet"
  shutil.copytree(flax / "examples" / "imagenet", folder)
  return _mocked(IMAGENET, folder, "imagenet")


def lm1b(flax: pathlib.Path, work: pathlib.Path) -> dict:
  """The rewrite proved with lm1b_port, then lm1b_mock.py on the example
  (its pmap version, `lm1b_source`) and on a copy with the rewrite."""
  folder = work / "lm1b"
  source = lm1b_source(flax, work)
  if isinstance(source, str):
    return {"program": LM1B, "not_run": source}
  shutil.copytree(source, folder)
  return _mocked(LM1B, folder, "lm1b")


def lm1b_source(flax: pathlib.Path, work: pathlib.Path):
  """The folder of lm1b's pmap version: the checkout's own where its train
  step is still a pmap, else LM1B_COMMIT's from the checkout's git
  (extracted under `work`); a str saying why neither is there."""
  own = flax / "examples" / "lm1b"
  if (own / "train.py").is_file() and "p_train_step = jax.pmap(" in (
      own / "train.py").read_text():
    return own
  archive = work / "lm1b.tar"
  done = subprocess.run(
      ["git", "-C", str(flax), "archive", "-o", str(archive), LM1B_COMMIT,
       "examples/lm1b"], capture_output=True, text=True, check=False)
  if done.returncode:
    return (f"examples/lm1b under {flax} is not the pmap version, and its "
            f"git has no {LM1B_COMMIT} ({done.stderr.strip()[:80]})")
  with tarfile.open(archive) as tar:
    tar.extractall(work / "lm1b_archive", filter="data")
  return work / "lm1b_archive" / "examples" / "lm1b"


def _mocked(program: str, folder: pathlib.Path, example: str) -> dict:
  """`_global` with `{example}_port`, then `{example}_mock.py` on the
  example and on a copy with the rewrite as its train.py: its scalars
  and checkpoint digests compared."""
  ported = folder.with_name(f"{example}_global")
  shutil.copytree(folder, ported)
  row = {"program": program, **_global(folder, f"{example}_port")}
  shutil.copyfile(folder / "train_global.py", ported / "train.py")
  outputs, row["seconds"] = {}, []
  for name, where in (("original", folder), ("port", ported)):
    done, seconds = run._python(  # pylint: disable=protected-access
        [HERE / f"{example}_mock.py", where], where)
    row["seconds"].append(round(seconds, 1))
    if done.returncode:
      row[f"{name}_error"] = done.stderr.strip().splitlines()[-3:]
    lines = done.stdout.splitlines() if done.returncode == 0 else []
    outputs[name] = ([l for l in lines if not l.startswith("checkpoint ")],
                     [l for l in lines if l.startswith("checkpoint ")])
  (scalars, leaves), (got, got_leaves) = outputs["original"], outputs["port"]
  row["numbers"] = len(scalars)
  row["numbers_what"] = " tensorboard scalars"
  row["numbers_equal"] = scalars == got and bool(scalars)
  same = sum(1 for a, b in zip(leaves, got_leaves) if a == b)
  row["checkpoint_leaves"], row["checkpoint_leaves_bitwise"] = (
      len(leaves), same if len(leaves) == len(got_leaves) else 0)
  row["numbers_also"] = (f"; checkpoint: {same} of {len(leaves)} leaves "
                         "bitwise" if leaves else "; no checkpoint read")
  return row


def _missing(program: str) -> list[str]:
  return [name for name in NEEDS[program]
          if importlib.util.find_spec(name) is None]


def rows(flax: pathlib.Path | None) -> list[dict]:
  """The three rows: measured where a checkout and the packages are here,
  else each with `not_run`, the reason."""
  out = []
  for program, measure in ((NLP_SEQ, nlp_seq), (IMAGENET, imagenet),
                           (LM1B, lm1b), (WMT, wmt_global.wmt)):
    folder = measure.__name__
    if flax is None:
      out.append({"program": program, "not_run": "no flax checkout given "
                  "(`--flax` or FLAX_CHECKOUT; CI has none)"})
    elif measure is not lm1b and not (
        flax / "examples" / folder / "train.py").is_file():
      out.append({"program": program, "not_run":
                  f"no examples/{folder}/train.py under {flax}"})
    elif _missing(program):
      out.append({"program": program, "not_run": "this Python lacks "
                  + ", ".join(_missing(program))})
    else:
      work = pathlib.Path(tempfile.mkdtemp(prefix="shardport-flax-"))
      try:
        out.append(measure(flax, work))
      finally:
        shutil.rmtree(work, ignore_errors=True)
    print({k: v for k, v in out[-1].items() if k != "diff"}, flush=True)
  return out
