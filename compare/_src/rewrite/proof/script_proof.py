"""`--prove __main__`: a step made where no Port can import it, proved.

JAX's SPMD MNIST example builds `spmd_update` under `if __name__ ==
"__main__":`: importing the file makes no step, so no `compare.Port` can
name it. Both files are run as scripts instead, as `python FILE` runs them
(`__main__`, the file's folder first on `sys.path`, no arguments):

- the original, with `jax.pmap` recording each call of the pmaps it makes
  (their arguments) up to `steps` calls of the one it calls, then stopped;
- the rewritten file, stopped at the first call of the step bound to the
  same name (`jax.jit` recording what it makes).

What flows out is a Port: the first call's state (device 0's copy of a
stacked one), the recorded batches as global rows, pmap's step as the
original made it and the rewritten step, each through `compare.adapt_step`
(a step returning its state alone reports no metrics: the state is judged).
`rewrite_proof.prove` proves it as it proves a named Port.
"""

import builtins
import contextlib
import pathlib
import sys

import jax
import numpy as np

from compare import conversions
from compare._src.prove import adapt
from compare._src.prove import port as port_module
from compare._src.rewrite import pipeline

SPEC = "__main__"


class _Stop(BaseException):
  """Stops a script at the call it was run to (not an `Exception`: a
  script's own `except Exception` does not swallow it)."""


@contextlib.contextmanager
def _as_script(path: pathlib.Path):
  """`python PATH`'s `sys.argv` and `sys.path[0]` while the script runs;
  the modules it imported from its own folder are let go after."""
  argv, syspath, before = sys.argv, list(sys.path), set(sys.modules)
  sys.argv, sys.path[:0] = [str(path)], [str(path.parent)]
  try:
    yield
  finally:
    sys.argv, sys.path[:] = argv, syspath
    for name in set(sys.modules) - before:
      if path.parent in pathlib.Path(
          getattr(sys.modules[name], "__file__", None) or "/").parents:
        del sys.modules[name]


def _run(path: pathlib.Path, name: str, wrap) -> dict:
  """Runs `path` as `__main__` with `jax.<name>` wrapped by `wrap(made)`
  until it ends or stops (`_Stop`); returns its module's globals."""
  made = getattr(jax, name)
  scope = {"__name__": "__main__", "__file__": str(path),
           "__builtins__": builtins}
  setattr(jax, name, lambda *args, **kwargs: wrap(made(*args, **kwargs),
                                                  args, kwargs, scope))
  try:
    with _as_script(path):
      exec(compile(path.read_text(), str(path), "exec"), scope)  # pylint: disable=exec-used
  except _Stop:
    pass
  finally:
    setattr(jax, name, made)
  return scope


class _Recorded:
  """A pmap the original made: called as written, each call's arguments
  kept (the first call's state, every call's batch)."""

  def __init__(self, mapped, args, kwargs, steps: int):
    self.mapped, self.steps = mapped, steps
    self.axis_name = kwargs.get("axis_name", args[1] if len(args) > 1
                                else None)
    in_axes = kwargs.get("in_axes", 0)
    self.state_axis = in_axes[0] if isinstance(in_axes, (tuple, list)) \
        else in_axes
    self.state, self.batches = None, []

  def __call__(self, *args, **kwargs):
    if len(self.batches) == self.steps:
      raise _Stop()
    if len(args) != 2 or kwargs:
      raise port_module.PortError(
          "--prove __main__ proves a step called as step(state, batch); "
          "for another call, write the program's compare.Port with "
          "compare.adapt_step and pass --prove PKG.MODULE:NAME")
    if self.state is None:  # one copy, device 0's, owned (not a view)
      self.state = jax.tree.map(np.array, conversions.unreplicate(
          args[0]) if self.state_axis == 0 else jax.device_get(args[0]))
    self.batches.append(jax.tree.map(np.array, jax.device_get(args[1])))
    return self.mapped(*args)


def _original(source: pathlib.Path, steps: int):
  """`(its one called pmap, the name the script binds it to)`."""
  made = []

  def record(mapped, args, kwargs, scope):
    del scope
    made.append(_Recorded(mapped, args, kwargs, steps))
    return made[-1]
  scope = _run(source, "pmap", record)
  called = [r for r in made if r.batches]
  names = [n for n, v in scope.items() if called and v is called[0]]
  if len(called) != 1 or len(names) != 1:
    raise port_module.PortError(
        f"--prove __main__: {source} run as a script called {len(called)} "
        "pmap(s) bound to a name; it proves one (write the program's "
        "compare.Port and pass --prove PKG.MODULE:NAME)")
  return called[0], names[0]


class _StopsAtStep:
  """A jit the rewritten script made: called as written, but the one bound
  to the step's name, which is taken at its first call and stops the
  script."""

  def __init__(self, jitted, scope: dict, name: str, taken: list):
    self.jitted, self.scope, self.name, self.taken = (jitted, scope, name,
                                                      taken)

  def __call__(self, *args, **kwargs):
    if self.scope.get(self.name) is self:
      self.taken.append(self.jitted)
      raise _Stop()
    return self.jitted(*args, **kwargs)

  def __getattr__(self, attribute):  # `.lower`, `.trace`, ... as jit's
    return getattr(self.jitted, attribute)


def _rewritten(target: pathlib.Path, name: str):
  """The step `target`, run as a script, binds to `name` (a jit), taken at
  its first call."""
  taken = []

  def stop_at_step(jitted, args, kwargs, scope):
    del args, kwargs
    return _StopsAtStep(jitted, scope, name, taken)
  _run(target, "jit", stop_at_step)
  if not taken:
    raise port_module.PortError(
        f"--prove __main__: {target} run as a script never called a jitted "
        f"{name}")
  return taken[0]


def _host(tree):
  """Host values with jax's dtypes (a float64 numpy array placed by a
  program without x64 is float32)."""
  return jax.tree.map(lambda x: np.asarray(
      x, jax.dtypes.canonicalize_dtype(np.asarray(x).dtype)), tree)


def port_of_scripts(source: pathlib.Path, target: pathlib.Path,
                    steps: int, rewrite=None):
  """`(the Port, (the written step, its axes, its name))` of `source` and
  its rewrite `target`, each run as a script (module docstring). The
  Port's `port_step` is the written step as written (on pmap's stacked
  layout where it keeps it): `rewrite_proof.prove` runs it on the Port's
  layout, with the axes the writer recorded for it (`rewrite`: the
  command's `Rewrite`, else made again)."""
  recorded, name = _original(source, steps)
  written = adapt.adapt_step(_rewritten(target, name))
  batches = [_host(jax.tree.map(lambda x: np.reshape(
      x, (-1,) + np.shape(x)[2:]), b)) for b in recorded.batches]
  devices = jax.devices()
  mesh = jax.sharding.Mesh(np.array(sorted(
      devices, key=lambda d: d.process_index)), (recorded.axis_name,))
  port = port_module.Port(
      name=f"{source.name}'s {name}", init=_host(recorded.state),
      pmap_step=adapt.adapt_step(recorded.mapped), port_step=written,
      mesh=mesh, batches=batches, steps=len(batches))
  return port, (written, _recorded_axes(source, name, rewrite), name)


def _recorded_axes(source: pathlib.Path, name: str, rewrite) -> dict:
  """The axes the writer recorded for the step bound to `name` in
  `--global`'s rewrite of `source` (as `--prove __main__` wrote it: no
  declared step); {} where it bound none so."""
  rewrite = rewrite or pipeline.rewrite_global_source(source.read_text(),
                                                      str(source))
  return next((p.axes for p in rewrite.ports if p.name == name), {})
