"""The training programs' short jobs, shared by the tests that resume them.

Runs are short (4 steps, a checkpoint every 2) and in-process through
`main(argv)`; each backend's and strategy's uninterrupted run is made once
per test module (`finished`) and its step-2 checkpoint stands in for a job
stopped there. The persistent compilation cache (`compile_once`) lets the
many runs of one program compile it once.
"""

import json
import pathlib
import shutil

import pytest

from shardport import strategies
from legacy_pmap import train as legacy_train
from sharded import train as sharded_train
from tests import compile_cache

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROGRAMS = {"legacy_pmap": legacy_train, "sharded": sharded_train}
OPTIONS = {"data_parallel": {}, "ensemble": {"members": 8},
           "accumulation": {"accum_loop": "multisteps", "accum_steps": 2},
           "fsdp": {}}
EXTRA = {strategy: [arg for name, value in options.items()
                    for arg in (f"--{name.replace('_', '-')}", str(value))]
         for strategy, options in OPTIONS.items()}


def argv_for(strategy, workdir, steps=4, *extra):
  return ["--strategy", strategy, "--workdir", str(workdir), "--steps",
          str(steps), "--checkpoint-every", "2", "--batch-size", "64",
          "--eval-every", "4", *EXTRA[strategy], *extra]


def train_job(backend, strategy, workdir, *extra, steps=4):
  """Runs a program in-process; returns its result.json."""
  assert PROGRAMS[backend].main(argv_for(strategy, workdir, steps, *extra)) == 0
  return json.loads((pathlib.Path(workdir) / "result.json").read_text())


def stopped_at(workdir, step, into):
  """A copy of `workdir` as a job stopped right after saving `step` left it."""
  shutil.copytree(workdir, into)
  for path in (into / "checkpoints").iterdir():
    if path.name.isdigit() and int(path.name) > step:
      shutil.rmtree(path)
  (into / "result.json").unlink()
  return into


@pytest.fixture(scope="module", autouse=True)
def compile_once(tmp_path_factory):
  """A persistent compilation cache for this module's runs (the suite's
  where there is one), the one before it kept after it."""
  yield from compile_cache.module_cache(tmp_path_factory)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
  """`(backend, strategy) -> workdir` of an uninterrupted 4-step run."""
  runs = {}

  def get(backend, strategy):
    if (backend, strategy) not in runs:
      workdir = tmp_path_factory.mktemp(f"{backend}-{strategy}")
      train_job(backend, strategy, workdir)
      runs[backend, strategy] = workdir
    return runs[backend, strategy]

  return get


def config_for(strategy, data):
  """The config `argv_for` gives the programs, for the Python API."""
  return strategies.get(strategy).make_config(
      {"steps": 4, "global_batch": 64, **OPTIONS[strategy]}, data)


def digest_of(workdir):
  return json.loads((pathlib.Path(workdir) / "result.json").read_text())[
      "state_digest"]
