"""What the measurement runners share: running a command, recording.

Each runner (`bench/runners/handover_runs.py`,
`bench/runners/many_hosts_runs.py`, `bench/runners/sweep_runs.py`,
`bench/runners/ensemble_runs.py`) runs shardport's own commands as a user would and writes one file under docs/measured/ that
records when, how and under what load it was measured, so the guide's
figures can say so.
"""

import datetime
import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys
import time


def run(argv: list[str], log: pathlib.Path | None = None) -> tuple[int, float]:
  """Runs `python ARGV...`; its exit code and wall seconds.

  Output goes to `log` (kept for a failure's post-mortem) or nowhere.
  """
  start = time.perf_counter()
  with open(log or os.devnull, "w", encoding="utf-8") as out:
    code = subprocess.run([sys.executable, *argv], stdout=out,
                          stderr=subprocess.STDOUT, check=False).returncode
  return code, time.perf_counter() - start


def command_line(argv: list[str]) -> str:
  return "python " + " ".join(argv)


def write(path: str, target: str, workload: str, **fields) -> None:
  """docs/measured/TARGET.json: `fields` plus the date, jax and the load.

  jax's version is read from its installed metadata, not by importing it: a
  runner that writes as it goes may still emulate CPU devices afterwards,
  which only works before jax is imported (`shardport.launch.emulation`).
  """
  record = {"workload": workload,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "jax_version": importlib.metadata.version("jax"),
            "command": f"python -m docs.build_guide --measure {target}",
            "load_average_after": round(os.getloadavg()[0], 2), **fields}
  pathlib.Path(path).write_text(json.dumps(record, indent=1) + "\n")
