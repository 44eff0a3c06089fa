"""`--measure TARGET`: regenerate one file under docs/measured/.

Targets: every strategy in the registry (`python -m compare --strategy S
--devices 8 --json docs/measured/S.json`), `traps` (docs/traps.py),
`dispatch` (docs/bench_dispatch.py), `errors` (docs/errors.py), the long
runs behind the verdict, the handover of a running job, 2 processes against
1, the device sweeps and the repeated ensemble runs (`docs/*_runs.py`), and
`all`.
Every file gets the date (UTC) and the command that made it, so the guide
says when and how each figure was measured; the guide's figures name the
file they come from.
"""

import datetime
import json
import os
import subprocess
import sys

from docs.guide import MEASURED

# target -> the script that writes it, given `--json PATH`
SCRIPTS = {"traps": ["docs/traps.py"],
           "dispatch": ["docs/bench_dispatch.py"],
           "errors": ["docs/errors.py"],
           # About an hour on 2 cores: the long runs behind the verdict.
           "verdicts": ["docs/verdict_runs.py"],
           "handover": ["docs/handover_runs.py"],
           "many_hosts": ["docs/many_hosts_runs.py"],
           "sweep": ["docs/sweep_runs.py"],
           "ensemble_runs": ["docs/ensemble_runs.py"],
           # The issue 13 utilisation target's workload: 28x28 inputs.
           "utilisation": ["-m", "compare", "--strategy", "data_parallel",
                           "--dataset", "synthetic:28x28", "--steps", "30",
                           "--devices", "8"]}


def targets(registry):
  return (*registry, *SCRIPTS)


def command(target, out, devices=8):
  """The command that regenerates `target` into `out`."""
  if target in SCRIPTS:
    return [sys.executable, *SCRIPTS[target], "--json", str(out)]
  return [sys.executable, "-m", "compare", "--strategy", target,
          "--devices", str(devices), "--json", str(out)]


def measure(target, root, devices=8):
  """Runs the measurement of `target` into docs/measured/, dated.

  The file is kept as written, plus a `date` (UTC) and the `command` when it
  has none, and the machine's load average, since other work on the machine
  skews throughput. Returns the command's exit code; the file is written
  whatever compare's verdict (the table shows it).
  """
  out = root / MEASURED / f"{target}.json"
  out.parent.mkdir(parents=True, exist_ok=True)
  load = os.getloadavg()[0]
  cmd = command(target, out, devices)
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      [str(root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  code = subprocess.call(cmd, cwd=root, env=env)
  if out.is_file():
    record = json.loads(out.read_text())
    record.setdefault("date", datetime.datetime.now(
        datetime.timezone.utc).date().isoformat())
    record.setdefault("command", "python docs/build_guide.py --measure "
                                 f"{target}")
    record.setdefault("load_average", [round(load, 2),
                                       round(os.getloadavg()[0], 2)])
    out.write_text(json.dumps(record, indent=1) + "\n")
  return code
