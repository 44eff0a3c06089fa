"""Fake runs for the lockstep checks' unit tests (tests/test_lockstep_units.py,
tests/test_lockstep_retakes.py): a 4-float weight trained by SGD on 8-row
batches, numpy all through. The truth and the witness (pmap) hold the state
as the host does; a port run holds it in a layout of its own (the weight as
a 2x2 block under other names), so a state that reaches the wrong run's step
raises. A calibration step scales its batch by `1 + EPS` (a band of EPS of
the update, exactly); a planted port run takes a step 1% off at the steps
it names.
"""

import dataclasses
import types

import jax
import numpy as np

from compare._src.prove import lockstep

LR = 0.5
ROWS = 8
EPS = 4e-6  # the calibration's change of the update: the band
OFF = 1.01  # a planted step: 1% off
# Its error as a share of its own update (a pair judged against the port's).
ERR = (OFF - 1) / OFF


def _batches(n, seed=0):
  rng = np.random.default_rng(seed)
  return [{"x": rng.normal(size=(ROWS, 4)) + 1.0} for _ in range(n)]


def _initial():
  return {"params": {"w": np.array([1.0, -2.0, 0.5, 3.0]),
                     "b": np.array([0.25, 0.5, 0.75])},
          "step": np.asarray(0)}


def _sgd(host, x, scale=1.0):
  """One step of the host-layout state on rows `x`; the update times
  `scale`."""
  w = host["params"]["w"]
  grad = np.mean(x, axis=0) * (1.0 + 0.1 * w)
  new_w = w - LR * scale * grad
  return ({"params": {"w": new_w, "b": host["params"]["b"]},
           "step": host["step"] + 1},
          {"loss": np.sum(new_w ** 2)})


class HostLayout:
  """A module whose runs hold the state as the host does."""

  def __init__(self, log, placement):
    self.log, self.placement = log, placement

  def to_host(self, state):
    return jax.tree.map(np.array, state)

  def from_host(self, host, placement, like, step, calls):
    assert placement == self.placement and calls == 1 and like is not None
    self.log.append(("from_host", self.placement, step))
    return jax.tree.map(np.array, host)

  def put_batch(self, batch, placement):
    assert placement == self.placement, placement
    return batch

  def metrics_to_host(self, metrics):
    return {k: np.asarray(v) for k, v in metrics.items()}


class NoFromHost(HostLayout):
  """Our strategies' one-device reference: the host cannot place it."""

  from_host = property(lambda self: (_ for _ in ()).throw(AttributeError))


class PortLayout(HostLayout):
  """A port's layout: the weight a 2x2 block, other names."""

  def to_host(self, state):
    return {"params": {"w": np.array(state["w2"]).reshape(4),
                       "b": np.array(state["bias"])},
            "step": np.array(state["n"])}

  def from_host(self, host, placement, like, step, calls):
    super().from_host(host, placement, like, step, calls)
    return self.of_host(host)

  @staticmethod
  def of_host(host):
    return {"w2": np.array(host["params"]["w"]).reshape(2, 2),
            "bias": np.array(host["params"]["b"]), "n": np.array(host["step"])}


def _host_step(scale=lambda t, batch: 1.0):
  def step(state, batch):
    return _sgd(state, batch["x"], scale(int(state["step"]) + 1, batch))
  return step


def _port_step(scale=lambda t, batch: 1.0):
  """The port's step in its own layout; `scale(t, batch)` its update's
  factor at step t (1.0: correct)."""
  def step(state, batch):
    host = PortLayout(None, None).to_host(state)
    new, metrics = _sgd(host, batch["x"], scale(int(host["step"]) + 1, batch))
    return PortLayout.of_host(new), metrics
  return step


def planted_at(*steps):
  return lambda t, batch: OFF if t in steps else 1.0


@dataclasses.dataclass(frozen=True)
class Scaled:
  """A calibration change: the batch scaled by `1 + eps` (or the state)."""

  eps: float
  seen: list

  def batch(self, host_batch, step, n_devices):
    self.seen.append(("batch", step, n_devices))
    return {"x": host_batch["x"] * (1.0 + self.eps)}

  def state(self, state):
    self.seen.append(("state", state))
    return state


@dataclasses.dataclass
class World:
  checks: object
  runs: dict
  log: list
  rows: list
  seen: list
  batches: list

  def drive(self, upto=None):
    """The runner's loop (`compare._src.prove.runner.train`)."""
    for i, batch in enumerate(self.batches[:upto]):
      self.step(i + 1, batch)
    return self.checks

  def step(self, t, batch):
    self.checks.before_step(t, batch)
    self.step_runs(t, batch)
    self.checks.after_step(t, batch)

  def step_runs(self, t, batch):
    """Every run's own step t, free-running."""
    del t
    for run in self.runs.values():
      run.state, metrics = run.step(run.state, batch)
      run.step_metrics = run.module.metrics_to_host(metrics)
      run.host = run.module.to_host(run.state)


def world(ports=None, *, witness="pmap", witness_step=None, truth_module=None,
          check_every=1, steps=4, eps=lambda t: EPS, multiple=10.0,
          pairs=None, port_runs=None):
  """Truth, pmap (its witness) and port runs (`{name: scale}`), each with
  its module, placement and step, and the `Lockstep` over them."""
  log, rows, seen = [], [], []
  ports = {"port": lambda t, b: 1.0} if ports is None else ports

  def run(name, module, step, state):
    return types.SimpleNamespace(
        name=name, module=module, step=step, state=state, placement=name,
        calls=1, step_metrics={}, host=None, initial=None)

  runs = {"truth": run("truth", (truth_module or HostLayout)(log, "truth"),
                       _host_step(), _initial()),
          "pmap": run("pmap", HostLayout(log, "pmap"),
                      _host_step(witness_step or (lambda t, b: 1.0)),
                      _initial())}
  for name, scale in ports.items():
    runs[name] = run(name, PortLayout(log, name), _port_step(scale),
                     PortLayout.of_host(_initial()))

  def perturbation(t):
    seen.append(("perturbation", t))
    return Scaled(eps(t), seen)

  def rows_of(run, batch):
    rows.append(run.name)
    return batch

  if pairs is None:
    pairs = [("truth", "pmap"), *(("truth", p) for p in ports),
             *(("pmap", p) for p in ports)]
  checks = lockstep.Lockstep(
      list(runs.values()), pairs, check_every, steps, 2, rows_of,
      truth="truth", perturbation=perturbation,
      port_runs=tuple(ports) if port_runs is None else port_runs,
      witness=witness, multiple=multiple)
  return World(checks, runs, log, rows, seen, _batches(steps))


def _w(host):
  return host["params"]["w"]
