"""fsdp as a `compare.Port`, from its twin modules.

pmap's step is `legacy_pmap.fsdp`'s, its state split into per-device
shards (`pmap_specs`); the ports (shard_map, and jit under the name `jit`)
are `sharded.fsdp`'s, their state split over the mesh by the same specs
(`port_specs`); data_parallel's shard_map port runs beside them on the
same batches as a `compare.Baseline` (its state replicated: the report
measures fsdp's per-device state, collectives and speed against it); the
reference is data_parallel's one-device `Reference`.
"""

import jax

import compare
from compare._src.ports import data_parallel
from legacy_pmap import fsdp as pmap_program
from sharded import data_parallel as baseline_program
from sharded import fsdp as mesh_program
from shardport.strategies import fsdp
from shardport.strategies.data_parallel import Reference
from shardport.workloads import registry

PORT_NAME, EXTRA = data_parallel.PORT_NAME, data_parallel.EXTRA


def specs(config, mesh):
  """Where each leaf of the train state lies over the `n` devices: split
  along `fsdp.shard_axis`, the others replicated (`sharded.fsdp`'s)."""
  return mesh_program._state_specs(  # pylint: disable=protected-access
      jax.eval_shape(lambda: registry.init_state(config.seed, config)),
      mesh.shape[mesh.axis_names[0]])


def port(strategy, config, data, n_devices: int, control=None):
  """The strategy's `compare.Port` with `config` and `data` on `n_devices`
  devices per process; with `control`'s mistake planted in the ports'
  twin module (never in the data_parallel baseline)."""
  base = data_parallel.port(strategy, config, data, n_devices)
  mesh, devices = base.mesh, pmap_program.make_placement(n_devices)
  ports = {name: mesh_program if control is None else
           control.plant(mesh_program, name) for name in (PORT_NAME, EXTRA)}
  split = specs(config, mesh)
  # The port's own initial state only where a control changes how the
  # port builds it (its learning rate): the unplanted Port shares `init`.
  port_init = None if control is None else jax.device_get(
      ports[PORT_NAME].create_state(config.seed, config, mesh))
  return compare.Port(
      name=strategy.name, init=base.init, port_init=port_init,
      pmap_step=pmap_program.make_train_step(config, devices),
      port_step=ports[PORT_NAME].make_train_step(config, mesh, PORT_NAME),
      extra_ports={EXTRA: ports[EXTRA].make_train_step(config, mesh, EXTRA)},
      baselines={fsdp.BASELINE: compare.Baseline(
          step=baseline_program.make_train_step(config, mesh, PORT_NAME),
          evaluation_step=baseline_program.make_evaluate(config, mesh))},
      reference_step=base.reference_step, mesh=mesh, steps=config.steps,
      batches=base.batches, port_specs=split, pmap_specs=split,
      port_name=PORT_NAME, pairs=tuple(strategy.pairs),
      calibration="row_order",
      device_evaluation=compare.DeviceEvaluation(
          batch=base.device_evaluation.batch,
          pmap_step=pmap_program.make_evaluate(config, devices),
          port_step=ports[PORT_NAME].make_evaluate(config, mesh),
          reference_step=Reference.make_evaluate(config, Reference.
                                                 make_placement(n_devices)),
          summarize=base.device_evaluation.summarize,
          metrics=base.device_evaluation.metrics))
