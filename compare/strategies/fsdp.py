"""fsdp: pmap, shard_map and jit with the train state sharded over the
devices, against data_parallel's single-device reference.

Reported beside the verdict: each run's bytes of params + optimiser state on
one device (its addressable shards), against data_parallel's replicated
state (target: at most 1/N + 10%), and the all-gather / reduce-scatter
counts from the compiled HLO (`compare.hlo`, in each run's entry).
"""

import jax
from jax import lax

from compare import negative_controls as controls
from compare.reference import data_parallel as reference
from compare.strategies.base import NegativeControl
from compare.strategies.base import RunSpec
from compare.strategies.base import Strategy
from compare.strategies.data_parallel import FINAL
from compare.tolerances import Tolerance
from legacy_pmap import fsdp as legacy
from sharded import fsdp as port
from training.programs.fsdp import FsdpProgram
from workloads import registry

MEMORY_TARGET = 0.10  # per-device state <= (1/N + 10%) of the replicated


def wrong_shard(module, run):
  """Each device updates its shard with its neighbour's gradient shard: the
  reduce-scatter's output rolled by one device (`lax.ppermute`). Looked up
  when the step is traced, as `no_pmean`; the jit port has no
  psum_scatter of its own, so it is unchanged there."""
  del run
  psum_scatter = lax.psum_scatter

  def rolled(x, axis_name, **kwargs):
    out = psum_scatter(x, axis_name, **kwargs)
    n = lax.psum(1, axis_name)
    return lax.ppermute(out, axis_name, [(i, (i + 1) % n) for i in range(n)])

  def make_train_step(config, placement, variant):
    step = module.make_train_step(config, placement, variant)

    def train_step(state, batch):
      with controls._patched(jax.lax, "psum_scatter", rolled):  # pylint: disable=protected-access
        return step(state, batch)

    return train_step

  return controls._with(module, make_train_step=make_train_step)  # pylint: disable=protected-access


def state_bytes_per_device(state) -> dict:
  """Bytes of params + optimiser state on each device (addressable shards)."""
  per = {}
  for leaf in jax.tree.leaves((state.params, state.opt_state)):
    for shard in leaf.addressable_shards:
      per[shard.device.id] = per.get(shard.device.id, 0) + shard.data.nbytes
  return per


def replicated_bytes(config) -> int:
  """data_parallel's params + optimiser state: the whole state per device."""
  shapes = jax.eval_shape(lambda: registry.init_state(config.seed, config))
  return sum(x.size * x.dtype.itemsize
             for x in jax.tree.leaves((shapes.params, shapes.opt_state)))


class Fsdp(FsdpProgram, Strategy):
  """Data parallelism with params and optimiser state sharded over `data`."""

  runs = (RunSpec("pmap", legacy, "pmap"),
          RunSpec("shard_map", port, "shard_map"),
          RunSpec("jit", port, "jit"),
          RunSpec("reference", reference, "reference"))
  pairs = (("pmap", "shard_map"), ("pmap", "reference"),
           ("shard_map", "reference"), ("jit", "reference"))
  tolerances = {
      "first_step": Tolerance(rtol=1e-5, atol=1e-5, reason=(
          "As for data_parallel: the gradient is the mean of N devices' "
          "gradients (a reduce-scatter / N here, pmean there) against one "
          "sum over the global batch; only the summation order differs. "
          "The all-gather moves bits unchanged. 1e-5 is data_parallel's "
          "first-step tolerance; the wrong-shard mistake moves whole "
          "leaves (tests/test_fsdp.py).")),
      "final": FINAL,
  }
  negative_controls = (
      NegativeControl("wrong-shard", "each device updates its params shard "
                      "with its neighbour's gradient shard (the "
                      "reduce-scatter's output rolled by one device)",
                      wrong_shard),
      NegativeControl("lr-1pct", "the port's learning rate x 1.01",
                      controls.learning_rate_1pct),
      *controls.late_controls(),
  )

  _n_devices = None

  def active_runs(self, config, n_devices):
    # Kept for `run_fields`, which measures each run's state on them.
    self._n_devices = n_devices
    return super().active_runs(config, n_devices)

  def run_fields(self, config, name):
    """Bytes of params + optimiser state on the fullest device, a fresh
    state of this run on the run's devices, and data_parallel's."""
    if self._n_devices is None:
      return {}
    module = {run.name: run.module for run in self.runs}[name]
    state = module.create_state(config.seed, config,
                                module.make_placement(self._n_devices))
    return {"state_bytes_per_device": max(
        state_bytes_per_device(state).values()),
            "replicated_state_bytes": replicated_bytes(config)}

  def report_lines(self, report):
    lines = []
    n = report["devices"]
    for name, run in report["runs"].items():
      mine, full = (run.get("state_bytes_per_device"),
                    run.get("replicated_state_bytes"))
      if not mine or name == "reference":
        continue
      ratio = mine / full
      ok = ratio <= 1 / n + MEMORY_TARGET
      counts = run.get("collectives_per_step") or {}
      lines.append(
          f"{name:<10} params+opt state per device {mine} B = {ratio:.3f}x "
          f"data_parallel's {full} B (target <= 1/{n} + 10% = "
          f"{1 / n + MEMORY_TARGET:.3f}: {'met' if ok else 'NOT met'}); "
          f"all-gather {counts.get('all-gather', '?')}, reduce-scatter "
          f"{counts.get('reduce-scatter', '?')}, all-reduce "
          f"{counts.get('all-reduce', '?')} per step")
    return lines
