"""`python -m compare.rewrite ... --prove SPEC`: the rewrite proved.

SPEC names the team's `compare.Port` for the original program (as
`python -m compare --program` takes it). Its `pmap_step` must be one of the
rewritten file's pmaps (found by identity in the original module); the same
name in the rewritten file is proved against it, through `compare.prove`,
in place of the Port's own `port_step`. A pmap made inside a function
(flax's nlp_seq's `p_train_step`) has no name in the module: the Port's
`pmap_step` is then a pmap of one of the file's functions (or a
`functools.partial` of one), and the port is the rewritten file's one port
of it, its own text around the Port's function (`_port_of_local_pmap`);
the Port's `port_step` may be None. `script_proof` makes a Port of both
files run as scripts (`--prove __main__`).
The first step keeps pmap's stacked layout: the proved step takes the
Port's (one state replicated on the mesh, the global batch split over it)
and hands the rewritten step pmap's (`_on_mesh`).
"""

import ast
import dataclasses
import functools
import importlib.util
import pathlib
import re
import sys
import tempfile

from compare._src.prove import port as port_module
from compare._src.prove import port_steps
from compare._src.prove import proof as proof_module
from compare._src.rewrite import pipeline
from compare._src.rewrite.proof import rewrite_cost
from compare._src.rewrite.proof import written_axes
from compare._src.rewrite.write import global_joined
from compare._src.rewrite.write import global_keywords


def original_name(port, source: pathlib.Path) -> str | None:
  """The name the original module gives the Port's pmap_step, or None."""
  for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None)
    if path and pathlib.Path(path).resolve() == source.resolve():
      for name, value in vars(module).items():
        if value is port.pmap_step:
          return name
  return None


def _mapped_function(pmap_step, source: pathlib.Path):
  """`(the function, its name)` a pmap maps, where it is one of `source`'s
  functions (or a `functools.partial` of one); None otherwise."""
  fun = getattr(pmap_step, "__wrapped__", None)
  base = fun.func if isinstance(fun, functools.partial) else fun
  name = getattr(base, "__name__", None)
  module = sys.modules.get(getattr(base, "__module__", None))
  if name is None or pathlib.Path(getattr(module, "__file__", "") or "")\
      .resolve() != source.resolve():
    return None
  return fun, name


def _local_ports(name: str, source: pathlib.Path) -> list:
  """The first step's ports of `source`'s pmaps that map `name`."""
  mentions = re.compile(rf"\b{re.escape(name)}\b")
  return [p for p in pipeline.rewrite_source(source.read_text()).ports
          if mentions.search(p.fun_code)]


def local_pmap_line(pmap_step, source: pathlib.Path) -> int | None:
  """The line of `source`'s one pmap of the function `pmap_step` maps (a
  pmap made inside a function), or None."""
  mapped = _mapped_function(pmap_step, source)
  ports = _local_ports(mapped[1], source) if mapped else []
  return ports[0].line if len(ports) == 1 else None


def _port_of_local_pmap(port, source: pathlib.Path, target: pathlib.Path,
                        helpers: dict):
  """The rewritten file's port of its one pmap of the Port's function (its
  own text, as written in `target`), built around that function with the
  file's helpers. Returns `(the port, the line in the original)`."""
  mapped = _mapped_function(port.pmap_step, source)
  if mapped is None:
    raise port_module.PortError(
        f"--prove: the Port's pmap_step is neither a pmap {source} names "
        f"nor jax.pmap of one of its functions (or a functools.partial of "
        "one)")
  fun, name = mapped
  mentions = re.compile(rf"\b{re.escape(name)}\b")
  ports = _local_ports(name, source)
  text = target.read_text()
  written = [ast.get_source_segment(text, node)
             for node in ast.walk(ast.parse(text))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
             and node.func.id == "_pmap_call"]
  if not written:  # `--global` without helpers: jax.jit(jax.shard_map(...))
    written = [ast.get_source_segment(text, node)
               for node in ast.walk(ast.parse(text))
               if isinstance(node, ast.Call) and ast.unparse(node.func)
               == "jax.jit" and node.args and isinstance(node.args[0],
                                                         ast.Call)
               and ast.unparse(node.args[0].func) == "jax.shard_map"]
    # Its function may hold pmap's view in its body now: the written
    # module's, bound as the Port's is; the mesh is the module's.
    module = _rewritten_module(target, source)
    helpers = vars(module)
    own = getattr(module, name, None)
    if isinstance(fun, functools.partial) and own is not None:
      fun = functools.partial(own, *fun.args, **fun.keywords)
    elif own is not None:
      fun = own
  written = [w for w in written if mentions.search(w)]
  # The function's source as written there (LibCST may re-indent it).
  fun_code = re.compile(r"\s*".join(
      re.escape(chunk) for chunk in ports[0].fun_code.split())
                        ) if len(ports) == 1 else None
  if len(ports) != 1 or len(written) != 1 or not fun_code.search(
      written[0]):
    raise port_module.PortError(
        f"--prove: {len(ports)} pmaps of {source} map {name} (lines "
        f"{[p.line for p in ports]}) and {target} has {len(written)} "
        "ports of it; the proof needs exactly one of each")
  try:
    step = eval(  # pylint: disable=eval-used
        fun_code.sub("_proved_function", written[0], count=1),
        {**helpers, "_proved_function": fun})
    return global_keywords.proved_with_bound_keywords(
        step, written[0], fun, port.mesh.size), ports[0].line, written[0]
  except NameError as err:
    raise port_module.PortError(
        f"--prove: the pmap at {source}:{ports[0].line} uses a local name "
        f"outside its function ({err})") from None


def _helpers(target: pathlib.Path) -> dict:
  """The rewritten file's own `_pmap_*` helpers, run apart from the rest
  of the file (whose import may define flags, read data or train)."""
  import jax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import numpy as np  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  tree, namespace = ast.parse(target.read_text()), {
      "functools": functools, "jax": jax, "np": np}
  helpers = [node for node in tree.body if isinstance(node, ast.FunctionDef)
             and node.name.startswith("_pmap_")]
  # Its literal constants (`AXIS = "batch"`), which a pmap's line may name.
  for node in tree.body:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)):
      try:
        namespace[node.targets[0].id] = ast.literal_eval(node.value)
      except ValueError:
        pass
  exec(compile(ast.Module(helpers, type_ignores=[]), str(target), "exec"),  # pylint: disable=exec-used
       namespace)
  return namespace


def _rewritten_module(target: pathlib.Path, source: pathlib.Path):
  # Run as the original's module, in its sys.modules place while it runs:
  # a Port that imports the original has run its absl flag definitions,
  # and absl takes another module object of the same name defining them
  # again as a re-import, where any other raises DuplicateFlagError (flax
  # nlp_seq's train.py). The original's entry is put back.
  spec = importlib.util.spec_from_file_location(source.stem, target)
  module = importlib.util.module_from_spec(spec)
  original = sys.modules.get(source.stem)
  sys.modules[source.stem] = module
  try:
    spec.loader.exec_module(module)
  finally:
    if original is None:
      del sys.modules[source.stem]
    else:
      sys.modules[source.stem] = original
  return module


def _on_mesh(stacked_step, n_devices: int, broadcast: bool):
  """`stacked_step` (pmap's layout) as a step on the Port's layout."""
  import jax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,import-outside-toplevel

  def step(state, batch):
    split = jax.tree.map(
        lambda x: x.reshape((n_devices, -1) + x.shape[1:]), batch)
    if not broadcast:
      state = jax.tree.map(
          lambda x: jnp.broadcast_to(x, (n_devices,) + x.shape), state)
    state, metrics = stacked_step(state, split)
    if not broadcast:
      state = jax.tree.map(lambda x: x[0], state)
    # pmap's per-device metrics, averaged as the harness averages pmap's.
    return state, jax.tree.map(lambda x: jnp.mean(x, axis=0), metrics)

  adapted = jax.jit(step)
  written = getattr(stacked_step, "jitted", None)  # the file's own jit
  if written is None:
    return adapted

  def lower_each(state, batch):
    """The written step alone, lowered on the layout it is handed: what the
    report counts is the port's collectives and bytes, not the adapter's
    (a stack and an `x[0]` per leaf)."""
    def stacked(x, split):
      shape = ((n_devices, x.shape[0] // n_devices) + x.shape[1:] if split
               else (n_devices,) + x.shape)
      return jax.ShapeDtypeStruct(shape, x.dtype)
    args = (state if broadcast else jax.tree.map(
        lambda x: stacked(x, False), state),
            jax.tree.map(lambda x: stacked(x, True), batch))
    return [written().lower(*args)]

  run = functools.partial(adapted)  # a jit takes no attribute; a partial does
  run.lower_each = lower_each  # the engine compiles it to count, never runs
  return run


def _written_axes(target: pathlib.Path, name: str | None,
                  written: str | None) -> dict:
  """The `in_axes` and `out_axes` of the written port's `_pmap_view`
  (`NAME = ...` in `target`, or the `written` text of a local pmap's
  port)."""
  text = target.read_text()
  if written is None:
    written = next((ast.get_source_segment(text, node.value)
                    for node in ast.walk(ast.parse(text))
                    if isinstance(node, ast.Assign)
                    and [getattr(t, "id", None) for t in node.targets]
                    == [name]), "")
  for node in ast.walk(ast.parse(written)):
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == \
        "_pmap_view":
      return {k.arg: ast.literal_eval(k.value) for k in node.keywords}
  return written_axes.plain_axes(text, name, written)


def _on_global_mesh(global_step, axes: dict, size: int, mesh=None):
  """A `--global` port as a step on the Port's layout (one state placed
  with P(), the global batch): what the written port still takes in pmap's
  stacked layout (`in_axes` 0: a batch the program stacks itself) is
  stacked for it, and what it gives back per device (`out_axes` 0) is
  taken from device 0 (the state) or averaged as the harness averages
  pmap's metrics (the metrics). Given `mesh` (the Port's), it traces with
  its devices as jax's mesh: a file that joins `jax.distributed` sets its
  mesh after the join, which importing it does not run, and its shard_map
  names none."""
  import jax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  state_in, batch_in = axes["in_axes"]
  state_out, metrics_out = axes["out_axes"]
  n_devices = size
  # The program's own mesh is `Mesh(devices, axes)`: its axes Auto.
  traced = mesh and jax.sharding.Mesh(mesh.devices,
                                      mesh.axis_names).abstract_mesh

  def handed(state, batch, call=global_step):
    """The written step (`call`: it, or what reads it) on the layout the
    adapter hands it."""
    if state_in == 0:
      state = jax.tree.map(
          lambda x: jnp.broadcast_to(x, (n_devices,) + x.shape), state)
    if batch_in == 0:
      batch = jax.tree.map(
          lambda x: x.reshape((n_devices, -1) + x.shape[1:]), batch)
    if traced is None:
      return call(state, batch)
    with jax.sharding.use_abstract_mesh(traced):
      return call(state, batch)

  def step(state, batch):
    state, metrics = handed(state, batch)
    if state_out == 0:
      state = jax.tree.map(lambda x: x[0], state)
    if metrics_out == 0:
      metrics = jax.tree.map(lambda x: jnp.mean(x, axis=0), metrics)
    return state, metrics

  # One program (the harness times a step, not Python around one), which
  # donates the state where the written step does (at any depth: a jit in a
  # jit donates nothing, and the proof held each step's old state beside
  # its new: flax nlp_seq at its default size peaked 18.7 GB, 14.6 with).
  adapted = []

  def run(state, batch):
    if not adapted:
      donated = state_in is None and _donates(
          jax.make_jaxpr(handed)(state, batch).jaxpr)
      adapted.append(jax.jit(step, donate_argnums=(0,) if donated else ()))
    return adapted[0](state, batch)

  # What the report counts: the written step's collectives and bytes, not
  # the adapter's averaging of per-device metrics (an all-reduce each:
  # flax lm1b's port read 4 where pmap's step runs 1).
  run.lower_each = lambda state, batch: [jax.jit(handed).lower(state,
                                                               batch)]
  return run


def _donates(jaxpr) -> bool:
  """Whether a jit called in `jaxpr`, at any depth, donates an argument."""
  return any(any(eqn.params.get("donated_invars", ())) or any(
      hasattr(j, "eqns") and _donates(j)
      for j in (getattr(v, "jaxpr", v) for v in eqn.params.values()))
             for eqn in jaxpr.eqns)


def _with_layout(port, rewritten):
  """The Port with the rewritten step as its port, on pmap's layout of the
  state (stacked, or broadcast: the one `compare.prove`'s check accepts)."""
  first = None
  for broadcast in (False, True):
    proved = dataclasses.replace(port, port_step=_on_mesh(
        rewritten, port.mesh.size, broadcast))
    try:
      checked = port_module.check(proved)
    except port_module.PortError as err:
      first = first or err
      continue
    if (checked.pmap_layout == port_steps.BROADCAST) == broadcast:
      return proved
  raise first


def _written_port(port, source: pathlib.Path, target: pathlib.Path):
  """`(the step, its _pmap_view axes, its name)`: the written file's port
  of the Port's pmap_step, found by name or, for a pmap made inside a
  function, by the function it maps."""
  signature = getattr(port.pmap_step, "signature", None)
  if signature is not None:  # compare.adapt_step of the file's step
    # Adapted alike, the written step takes the Port's (state, batch) as
    # the declared layout placed them: all P(), the batch P(axis), the
    # metrics per device.
    adapted = {"in_axes": (None, None), "out_axes": (None, 0)}
    inner = dataclasses.replace(port, pmap_step=signature.step)
    name = original_name(inner, source)
    if name is not None:
      # Written without helpers, its outputs are as its out_specs say (a
      # loss the step pmeans: one value, P()).
      plain = written_axes.plain_axes(target.read_text(), name, None)
      return (signature.adapt(getattr(_rewritten_module(target, source), name)),
              {**adapted, **{k: v for k, v in plain.items()
                             if k == "out_axes"}}, name)
    step, line, _ = _port_of_local_pmap(inner, source, target,
                                        _helpers(target))
    return signature.adapt(step), adapted, f"pmap of line {line}"
  name = original_name(port, source)
  if name is not None:
    return (getattr(_rewritten_module(target, source), name),
            _written_axes(target, name, None), name)
  step, line, written = _port_of_local_pmap(port, source, target,
                                            _helpers(target))
  return step, _written_axes(target, None, written), f"pmap of line {line}"


def prove(port, source: pathlib.Path, target: pathlib.Path,
          steps: int | None = None, global_step: bool = False,
          written=None) -> int:
  """Proves the rewritten step against the Port's pmap_step; prints the
  report and returns the proof's exit code (2: it cannot be proved).
  `global_step`: the rewrite took the state placed once (`--global`), so
  the port runs on the Port's own layout, no adapter. `written`: `(step,
  axes, name)` of scripts' Port (`script_proof`), else read from `target`."""
  rewritten, axes, name = written or _written_port(port, source, target)
  moved = None
  # A file that sets jax's mesh after its join: the Port's, while proved.
  mesh = port.mesh if global_joined.sets_mesh(target.read_text()) else None
  if global_step and all(isinstance(axes.get(k), tuple) and len(axes[k]) == 2
                         for k in ("in_axes", "out_axes")):
    proved = dataclasses.replace(port, port_step=_on_global_mesh(
        rewritten, axes, port.mesh.size, mesh))
    port_module.check(proved)
    moved = (["what the global step moved: not measured for a step "
              "proved through compare.adapt_step (a Port's, or --prove "
              "__main__'s): its arguments are not the Port's (state, batch)"]
             if hasattr(port.pmap_step, "signature")
             else _what_moved(port, source, target, rewritten, axes, mesh))
  else:
    proved = _with_layout(port, rewritten)
  proof = proof_module.prove(proved, steps=steps, windows=1)
  print(f"proving {target}'s {name} against {source}'s:")
  print(proof.table())
  if moved:
    print("\n".join(moved))
  return proof.exit_code


def _what_moved(port, source, target, global_port, axes, mesh) -> list:
  """`rewrite_cost.lines` of the first step's port of the same pmap (the
  first step written to a temporary folder) and the global one."""
  with tempfile.TemporaryDirectory() as folder:
    first = pathlib.Path(folder) / target.name
    first.write_text(pipeline.rewrite_source(source.read_text()).code)
    first_port, first_axes, _ = _written_port(port, source, first)
  first_axes = {k: v if isinstance(v, tuple) else (v, v)
                for k, v in first_axes.items()}
  return rewrite_cost.lines(rewrite_cost.describe(port, first_port,
                                                  first_axes),
                            rewrite_cost.describe(port, global_port, axes,
                                                  mesh))
