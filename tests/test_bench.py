"""The measurement runners' own plumbing (bench/): what they write must not
change what they measure next."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_writing_a_record_leaves_jax_unimported(tmp_path):
  # lockstep_runs writes after every run, then emulates 8 CPU devices for
  # its in-process cost group: which only works while jax is not imported.
  out = tmp_path / "record.json"
  script = ("import sys\n"
            "from bench.runners import run_record\n"
            f"run_record.write({str(out)!r}, 'probe', 'nothing ran', a=1)\n"
            "assert 'jax' not in sys.modules, 'jax imported'\n")
  done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, text=True,
                        capture_output=True, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  record = json.loads(out.read_text())
  assert record["jax_version"].count(".") == 2 and record["a"] == 1


def test_the_grids_late_controls_lie_inside_each_strategys_default_steps(
    digits):
  # A late control placed past a strategy's default run never runs there
  # (ensemble_data's default is 77 steps): N and the steps each detection
  # run takes lie within the defaults, and N = the last default step is
  # among them.
  from bench.runners import verdict_grid  # pylint: disable=g-import-not-at-top
  from shardport import strategies  # pylint: disable=g-import-not-at-top
  runs = verdict_grid.detection_runs(verdict_grid.STRATEGIES)
  for name in verdict_grid.STRATEGIES:
    default = strategies.get(name).make_config({}, digits).steps
    assert verdict_grid.DEFAULT_STEPS[name] == default, name
    late = [flags for key, flags in runs.items()
            if key.startswith(f"{name}_from_") or key.startswith(f"{name}_at_")]
    steps = [int(f[f.index("--negative-control") + 1].split(":")[1])
             for f in late]
    assert steps and max(steps) == default and min(steps) == 1, name
    assert all(int(f[f.index("--steps") + 1]) <= default for f in late)


def test_the_mutation_bench_says_how_to_run_it_within_100_columns():
  done = subprocess.run([sys.executable, "-m", "bench.mutation", "--help"],
                        cwd=ROOT, text=True, capture_output=True, check=True)
  assert "--max-mutants" in done.stdout and "--survivors" in done.stdout
  assert max(len(line) for line in done.stdout.splitlines()) <= 100


def test_each_triaged_survivor_names_a_function_of_todays_source():
  # Cheap, without mutmut: an entry names a measured module's function,
  # the line its mutant writes, and why it is equivalent (or its test).
  # That the line is still that mutant's is `python -m bench.mutation
  # --check-triage` (mutmut regenerates the mutants: minutes on 2 busy
  # cores, too long for CI); the bench itself counts a stale entry as none.
  from bench.mutation import mutate as mutation  # pylint: disable=g-import-not-at-top
  triage = mutation.load_triage()
  assert triage
  assert mutation.read_triage(triage)[0] == []


@pytest.mark.parametrize("text, message", [
    # An entry whose `[[mutant]]` line was lost: read as top-level keys.
    ('name = "a"\nline = "x"\n', "keys outside any"),
    ('[[mutant]]\nname = "a"\n[[mutant]]\nname = "a"\n', "triaged twice"),
])
def test_a_triage_file_that_would_lose_an_entry_is_refused(
    tmp_path, text, message):
  from bench.mutation import mutate as mutation  # pylint: disable=g-import-not-at-top
  path = tmp_path / "triage.toml"
  path.write_text(text)
  with pytest.raises(ValueError, match=message):
    mutation.load_triage(path)



def test_lines_of_code_leave_out_blank_lines_comments_and_docstrings():
  from bench.runners import rewrite_written  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  text = ('"""doc\nmore"""\nimport x  # c\n\n# only a comment\ndef f():\n'
          '  """d"""\n  s = """a\nb"""\n  return (1,\n          2)\n')
  # import; def; the assignment's two lines; the return's two.
  assert rewrite_written.code_lines(text) == 6
  # A string that is a statement of its own is a docstring wherever it
  # stands; one that is a value is code.
  assert rewrite_written.code_lines('x = 1\n"""note"""\ny = "s"\n') == 2
