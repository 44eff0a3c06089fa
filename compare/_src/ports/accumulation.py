"""accumulation as a `compare.Port`, from its twin modules.

pmap's step is `legacy_pmap.accumulation`'s, its two ports (shard_map, and
jit under the name `jit`) are `sharded.accumulation`'s, the reference is
the data-parallel one-device `Reference` (no microbatches). The plain
data-parallel steps train beside as baselines (`compare.Baseline`):
`dp_pmap` against pmap and `dp_shard_map` against shard_map, bitwise at
one microbatch. They are runs of this Port, not a Port of their own, so
that they share its truth, calibration band and report, as the pairs
`pmap~dp_pmap` and `shard_map~dp_shard_map` always have.

Under the `multisteps` loop each accumulating run calls its step K times
per optimiser step (`calls_per_step`) on a state wrapped by
optax.MultiSteps, which is compared through a view of its inner state
(`multisteps_view`): the reference and the baselines hold the plain state.
"""

import dataclasses

import jax

import compare
from compare._src.ports import data_parallel as data_parallel_port
from legacy_pmap import accumulation as pmap_program
from legacy_pmap import data_parallel as pmap_baseline
from sharded import accumulation as mesh_program
from sharded import data_parallel as mesh_baseline
from shardport.strategies.accumulation import Reference
from shardport.workloads import microbatches
from shardport.workloads import registry

PORT_NAME, EXTRA = data_parallel_port.PORT_NAME, data_parallel_port.EXTRA
PAIRS = (*data_parallel_port.PAIRS, ("pmap", "dp_pmap"),
         (PORT_NAME, "dp_shard_map"))
ACCUMULATING = ("pmap", PORT_NAME, EXTRA)


def multisteps_view(k: int) -> compare.StateView:
  """How a train state under optax.MultiSteps (K calls per optimiser step)
  is compared: its inner optimiser state and its count of optimiser steps,
  as a state stepped whole holds them; placed back on its own initial
  state, the accumulator zero and the call counter K per step (at an
  optimiser-step boundary, where the lockstep checks place it)."""

  def compared(state):
    return state.replace(opt_state=state.opt_state.inner_opt_state,
                         step=state.opt_state.gradient_step)

  def placed(shared, like):
    fields = {f.name: getattr(shared, f.name)
              for f in dataclasses.fields(shared)
              if f.metadata.get("pytree_node", True)}
    inner = like.opt_state
    steps = shared.step - inner.gradient_step
    return like.replace(**{**fields, "opt_state": inner._replace(
        inner_opt_state=shared.opt_state, gradient_step=shared.step),
                           "step": like.step + steps * k})

  return compare.StateView(compared, placed)


def port(strategy, config, data, n_devices: int, control=None):
  """The strategy's `compare.Port` with `config` and `data` on `n_devices`
  devices per process; with `control`'s mistake planted in the ports'
  twin module (as `--negative-control` plants it)."""
  mesh = mesh_program.make_placement(n_devices)
  devices = pmap_program.make_placement(n_devices)
  one = Reference.make_placement(n_devices)
  ports = {name: mesh_program if control is None else
           control.plant(mesh_program, name) for name in (PORT_NAME, EXTRA)}
  calls = microbatches.calls_per_step(config)
  wrapped = config.accum_loop == "multisteps"
  # The port's own initial state only where a control changes how the
  # port builds it (its learning rate): the unplanted Port shares `init`.
  port_init = None if control is None else jax.device_get(
      ports[PORT_NAME].create_state(config.seed, config, mesh))
  plain = registry.init_state(config.seed, config)
  return compare.Port(
      name=strategy.name,
      init=microbatches.init_state(config.seed, config),
      port_init=port_init, reference_init=plain,
      pmap_step=pmap_program.make_train_step(config, devices),
      port_step=ports[PORT_NAME].make_train_step(config, mesh, PORT_NAME),
      extra_ports={EXTRA: ports[EXTRA].make_train_step(config, mesh, EXTRA)},
      reference_step=Reference.make_train_step(config, one),
      baselines={
          "dp_pmap": compare.Baseline(
              pmap_baseline.make_train_step(config, devices), side="pmap",
              init=plain),
          "dp_shard_map": compare.Baseline(mesh_baseline.make_train_step(
              config, mesh, PORT_NAME), side="port", init=plain)},
      calls_per_step={name: calls for name in ACCUMULATING},
      state_views={name: multisteps_view(calls) for name in ACCUMULATING
                   if wrapped},
      mesh=mesh, steps=config.steps,
      batches=data_parallel_port.train_batches(config, data),
      port_name=PORT_NAME, pairs=PAIRS, calibration="row_order",
      device_evaluation=data_parallel_port.device_evaluation(
          strategy, config, data, (pmap_program, devices),
          (ports[PORT_NAME], mesh), one))
