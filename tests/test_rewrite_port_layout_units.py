"""`proof.on_port_layout`'s adapters, unit by unit: a small step on pmap's
stacked layout, or a global one, handed the Port's layout (one state, the
global batch), and what each lowers for the report. No program runs: the
proofs that run programs are tests/test_rewrite_proof*.py.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare._src.prove import port as port_module
from compare._src.rewrite.proof import on_port_layout

N = 4  # pmap's devices in these steps: a stacked leading axis of 4


def stacked_step(state, batch):
  """pmap's layout: `state` [N, 3], `batch` [N, rows, 2]; each device adds
  its own rows' sum, and reports its rows' mean."""
  assert state["w"].shape == (N, 3) and batch.shape[0] == N
  return ({"w": state["w"] + batch.sum(axis=(1, 2))[:, None]},
          {"loss": batch.mean(axis=(1, 2))})


BATCH = jnp.arange(16.0).reshape(8, 2)  # the global batch: 2 rows a device


def test_the_first_step_on_the_ports_layout_stacks_and_takes_device_0():
  step = on_port_layout.on_mesh(stacked_step, N, broadcast=False)
  state, metrics = step({"w": jnp.ones(3)}, BATCH)
  # Device 0's rows are 0..3: its state; the loss the mean of the devices'.
  np.testing.assert_array_equal(state["w"], np.full(3, 7.0))
  assert float(metrics["loss"]) == 7.5
  assert not hasattr(step, "lower_each")  # no file's jit to count


def test_a_broadcast_state_is_handed_and_returned_as_it_is():
  step = on_port_layout.on_mesh(stacked_step, N, broadcast=True)
  state, _ = step({"w": jnp.zeros((N, 3))}, BATCH)
  np.testing.assert_array_equal(state["w"][:, 0], [6.0, 22.0, 38.0, 54.0])


@pytest.mark.parametrize("broadcast", [False, True])
def test_the_report_lowers_the_files_own_jit_on_pmaps_layout(broadcast):
  written = jax.jit(stacked_step)
  step = functools.partial(stacked_step)
  step.jitted = lambda: written
  run = on_port_layout.on_mesh(step, N, broadcast)
  state = {"w": jnp.zeros((N, 3) if broadcast else 3)}
  (lowered,) = run.lower_each(state, BATCH)
  text = lowered.as_text()
  # The state stacked [4, 3] (by the adapter, or as handed), the batch
  # [4, 2, 2]: the written step's own arguments, not the Port's.
  assert "tensor<4x3xf32>" in text and "tensor<4x2x2xf32>" in text
  assert float(run(state, BATCH)[1]["loss"]) == 7.5


def test_a_global_step_that_kept_pmaps_view_is_handed_it():
  # in_axes 0: the state broadcast and the batch stacked for it; out_axes
  # 0: the state from device 0, the metrics averaged.
  axes = {"in_axes": (0, 0), "out_axes": (0, 0)}
  step = on_port_layout.on_global_mesh(stacked_step, axes, N)
  state, metrics = step({"w": jnp.ones(3)}, BATCH)
  np.testing.assert_array_equal(state["w"], np.full(3, 7.0))
  assert float(metrics["loss"]) == 7.5
  (lowered,) = step.lower_each({"w": jnp.ones(3)}, BATCH)
  assert "tensor<4x2x2xf32>" in lowered.as_text()
  # The state alone stacked, one value back: the metrics as they are.
  axes = {"in_axes": (0, None), "out_axes": (0, None)}
  per_device = on_port_layout.on_global_mesh(
      lambda s, b: ({"w": s["w"] + b.sum()}, {"rows": b}), axes, N)
  state, metrics = per_device({"w": jnp.ones(3)}, BATCH)
  np.testing.assert_array_equal(state["w"], np.full(3, 121.0))
  np.testing.assert_array_equal(metrics["rows"], BATCH)


def test_a_global_step_traces_under_the_ports_mesh_when_given():
  seen = []

  def step(state, batch):
    seen.append(jax.sharding.get_abstract_mesh().axis_names)
    return state, {"loss": batch.mean()}

  mesh = jax.sharding.Mesh(np.array(jax.devices()[:N]), ("data",))
  axes = {"in_axes": (None, None), "out_axes": (None, None)}
  for given in (mesh, None):
    state, metrics = on_port_layout.on_global_mesh(step, axes, N, given)(
        {"w": jnp.ones(3)}, BATCH)
    np.testing.assert_array_equal(state["w"], np.ones(3))  # handed on
    assert float(metrics["loss"]) == 7.5
  assert seen[0] == ("data",) and seen[-1] == ()


def test_a_local_pmaps_keywords_are_the_ports_bound_values_per_device():
  def step(state, batch, rate, scale):
    return state * rate.sum() + scale.sum(), {"rows": batch}

  assert on_port_layout.with_bound_keywords(step, (), None, N) is step
  fun = functools.partial(print, rate=jnp.ones(2), scale=3.0)
  bound = on_port_layout.with_bound_keywords(step, ("rate", "scale"), fun,
                                             N)
  state, _ = bound(jnp.ones(3), BATCH)
  # rate [N, 2] summed: 8; scale [N] summed: 12.
  np.testing.assert_array_equal(state, np.full(3, 20.0))
  # Each keyword the Port's function does not bind, named.
  for partial, missing in ((functools.partial(print, scale=1), "rate"),
                           (functools.partial(print), "rate, scale")):
    with pytest.raises(port_module.PortError, match=(
        rf"^--prove: the written step takes {missing} \(keyword arguments "
        r"of the program's calls\); the Port's pmap_step must bind them "
        r"\(functools\.partial\(f, \.\.\., k=v\)\) to be proved against it$")):
      on_port_layout.with_bound_keywords(step, ("rate", "scale"), partial, N)


def _pmapped(in_axes, out_axes):
  """A pmap'd step over 8 devices, its state stacked (0) or not (None):
  the reshape takes a state of 3 values alone, so only one layout traces."""
  def step(state, batch):
    loss = jax.lax.pmean(batch.mean(), "i")
    return {"w": state["w"].reshape(3) - 0.1 * loss}, {"loss": loss}
  return jax.pmap(step, axis_name="i", in_axes=in_axes, out_axes=out_axes)


@pytest.mark.parametrize("axes, broadcast", [
    (((0, 0), 0), False), (((None, 0), (None, 0)), True)])
def test_the_first_step_takes_the_state_as_the_ports_pmap_step_does(
    axes, broadcast):
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("i",))
  pmap_step = _pmapped(*axes)
  port = port_module.Port(
      name="unit", init={"w": np.ones(3, np.float32)}, pmap_step=pmap_step,
      port_step=lambda state, batch: (state, {"loss": batch.mean()}),
      mesh=mesh, batches=lambda i: np.ones((16, 2), np.float32), steps=1)
  proved = on_port_layout.with_layout(port, pmap_step)
  # The Port's layout (one state): pmap's step handed it stacked or as is.
  state, metrics = proved.port_step({"w": jnp.ones(3)}, jnp.ones((16, 2)))
  np.testing.assert_allclose(state["w"], np.full(3, 0.9), rtol=1e-6)
  assert float(metrics["loss"]) == 1.0
  assert port_module.check(proved).pmap_layout == (
      "broadcast" if broadcast else "stacked")
  # A step that cannot take either layout: the first error is raised.
  with pytest.raises(port_module.PortError):
    on_port_layout.with_layout(port, lambda state, batch: None)
