"""`--switch-at N`: the port's runs pick up pmap's step-N checkpoint.

The moment of truth of a migration, inside one report: at step N the pmap
run's state is saved the way the training programs save it (Orbax, the
canonical layout), every port run restores it into its own layout and
continues, and the pairs then judge "resumed port vs uninterrupted pmap"
like any other pair. The report's `switch` says which step was handed over
and the digests of the state saved and restored (tests/test_switch.py checks
them against pmap's own after N steps).
"""

import tempfile

import jax

from shardport.training import handover
from shardport.workloads import configs
from shardport.workloads import digest

SOURCE = "pmap"


def check(plan, config, switch_at: int) -> None:
  """Raises ConfigError (one line) when the switch cannot happen."""
  if not 1 <= switch_at < config.steps:
    raise configs.ConfigError(
        f"--switch-at must be between 1 and the steps - 1 ({config.steps - 1})"
        f", got {switch_at}")
  if SOURCE in plan.skipped:
    raise configs.ConfigError(
        f"--switch-at needs a pmap run to switch from; here "
        f"{plan.skipped[SOURCE]}")


def switch(plan, config, runs, step: int) -> dict:
  """Restores pmap's state after `step` steps into every port run.

  Called once pmap has taken exactly `step` optimiser steps: the state it
  hands over is the one the uninterrupted pmap run holds at `step`.

  Returns:
    What was handed over, for the report: `{"step", "source",
    "source_digest"}` (pmap's own digest when it saved) and `"restored"`,
    each port run's digest of the state it restored (all equal to
    `source_digest`, or the restore would have refused).
  """
  by_name = {run.name: run for run in runs}
  source = by_name[SOURCE]
  handed = {"step": step, "source": SOURCE,
            "source_digest": digest.state_digest(
                source.module.to_host(source.state)),
            "restored": {}}
  with tempfile.TemporaryDirectory(prefix="shardport-switch-") as directory:
    handover.write_checkpoint(source.module, source.state, config, directory,
                              step, strategy=plan.name)
    for name in plan.port_runs:
      if name not in by_name:
        continue
      run = by_name[name]
      state, _ = handover.resume_into(
          run.module, run.placement, config, directory, step,
          strategy=plan.name, calls_per_step=plan.calls_per_step(name))
      # The compiled step is specialised to the state's pytree metadata
      # (the optimiser object): keep the run's own, with the restored leaves.
      run.state = jax.tree.unflatten(jax.tree.structure(run.state),
                                     jax.tree.leaves(state))
      run.host = run.module.to_host(run.state)
      handed["restored"][name] = digest.state_digest(run.host)
  return handed
