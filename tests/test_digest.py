"""`state_digest` covers the whole train state, in every backend.

Every leaf of a program's initial train state is changed, one at a time, in
the state itself (not in its host copy), so that both `to_host` and the
digest must see it: params, optimiser state, the step, for every strategy's
modules, and for ensembles in one member only. A digest that covered the
params alone, or a `to_host` that dropped the step, fails here.
"""

import dataclasses
import importlib

import flax.training.train_state
import jax
import numpy as np
import pytest

from shardport import strategies
from shardport.training import checkpoints
from shardport.workloads import digest

N_DEVICES = 8
# Under optax.MultiSteps these are not in the canonical state: the
# accumulator and its count are zero at every optimiser-step boundary (where
# digests are taken), and the call counter is K x optax's own count of
# optimiser steps, which the canonical `step` is (shardport/workloads/microbatches.py).
NOT_CANONICAL = (".opt_state.acc_grads", ".opt_state.mini_step")


def _label(module):
  """A backend module's import name, or a strategy's `Reference` class's."""
  if isinstance(module, type):
    return f"{module.__module__}.{module.__qualname__}"
  return module.__name__


def _cases():
  """`(strategy, module, options)`: every module of every strategy,
  and the accumulation backends under optax.MultiSteps."""
  cases = []
  for name, strategy in strategies.STRATEGIES.items():
    modules = {_label(run.module): run.module for run in strategy.runs}
    cases += [pytest.param(name, module, {}, id=f"{name}-{label}")
              for label, module in modules.items()]
  cases += [pytest.param("accumulation",
                         importlib.import_module(f"{backend}.accumulation"),
                         {"accum_loop": "multisteps", "accum_steps": 2},
                         id=f"multisteps-{backend}")
            for backend in ("legacy_pmap", "sharded")]
  return cases


def _nudge(rows):
  """One element of `rows` changed in place, whatever its dtype."""
  flat = rows.reshape(-1)
  if np.issubdtype(flat.dtype, np.floating):
    flat[0] = np.nextafter(flat[0], np.inf)
  else:
    flat[0] += 1


def _changed(leaf, member_axis, device_axis):
  """`leaf` with one value changed: in member 3 only where the leaf has a
  member axis, in every replica where pmap replicates it."""
  host = np.array(jax.device_get(leaf))
  if member_axis:
    _nudge(host[3:4])
  elif device_axis:
    for i in range(len(host)):
      _nudge(host[i:i + 1])
  else:
    _nudge(host)
  return jax.device_put(host, leaf.sharding)


def _part(path):
  """The state field a leaf's path is in (`params`, `opt_state`, ...)."""
  names = [key.name for key in path
           if isinstance(key, jax.tree_util.GetAttrKey)]
  # Under optax.MultiSteps optax's count of optimiser steps is the canonical
  # step (the state's own counter counts calls).
  return "step" if names[-1] == "gradient_step" else names[0]


def _state(strategy_name, module, options, digits):
  """`module` (or its import name)'s initial state for the strategy."""
  strategy = strategies.get(strategy_name)
  config = strategy.make_config(
      {"steps": 1, "global_batch": 64, **options}, digits)
  if isinstance(module, str):
    module = importlib.import_module(module)
  why = getattr(module, "why_unavailable", lambda: None)()
  if why:  # a program this jax cannot run (ensemble_data's nested pmap)
    pytest.skip(why)
  state = module.create_state(config.seed, config,
                              module.make_placement(N_DEVICES))
  return module, state


@pytest.mark.parametrize("strategy, module_name, options", _cases())
def test_a_change_to_any_leaf_changes_the_digest(strategy, module_name,
                                                 options, digits):
  module, state = _state(strategy, module_name, options, digits)
  leaves, treedef = jax.tree_util.tree_flatten_with_path(state)
  before = digest.state_digest(module.to_host(state))
  # Negative control: the same state, its leaves copied, the same digest.
  copied = [jax.device_put(np.array(jax.device_get(x)), x.sharding)
            for _, x in leaves]
  assert digest.state_digest(module.to_host(
      jax.tree_util.tree_unflatten(treedef, copied))) == before
  members = hasattr(module, "MEMBERS_PER_DEVICE") and not isinstance(
      state, tuple)  # the reference's members are a tuple of states
  replicated = module.BACKEND == "legacy_pmap" and not members
  seen, unseen = set(), []
  for i, (path, leaf) in enumerate(leaves):
    if isinstance(state, tuple) and path[0].idx != len(state) - 1:
      continue  # the reference's members: the last one's leaves are enough
    changed = list(copied)
    changed[i] = _changed(leaf, members, replicated)
    after = digest.state_digest(module.to_host(
        jax.tree_util.tree_unflatten(treedef, changed)))
    where = jax.tree_util.keystr(path)
    if after == before:
      unseen.append(where)
    else:
      seen.add(_part(path))
  assert seen >= {"params", "opt_state", "step"}, (
      f"the digest sees changes in {sorted(seen)} only")
  if options.get("accum_loop") == "multisteps":
    assert ".step" in unseen and all(
        where == ".step" or where.startswith(NOT_CANONICAL)
        for where in unseen), unseen
  else:
    assert not unseen, f"changes the digest does not see: {unseen}"


@pytest.mark.parametrize("module_name", ["legacy_pmap.ensemble",
                                         "sharded.ensemble"])
def test_members_in_another_order_change_the_digest(module_name, digits):
  # Members restored in another order hold the same arrays, in other rows.
  module, state = _state("ensemble", module_name, {}, digits)
  before = digest.state_digest(module.to_host(state))
  swapped = jax.tree.map(
      lambda x: jax.device_put(np.array(jax.device_get(x))[[1, 0, *range(
          2, len(x))]], x.sharding), state)
  assert digest.state_digest(module.to_host(swapped)) != before


class _WithBatchStats(flax.training.train_state.TrainState):
  batch_stats: dict


def test_any_other_collection_is_in_the_digest_and_the_checkpoint(digits):
  # No workload here carries batch statistics; a state that does is hashed
  # and saved whole all the same (shardport/workloads/canonical.py).
  module, state = _state("data_parallel", "sharded.data_parallel", {},
                         digits)
  stats = {"mean": np.zeros(3, np.float32)}
  with_stats = _WithBatchStats(**{
      field.name: getattr(state, field.name)
      for field in dataclasses.fields(state)}, batch_stats=stats)
  moved = with_stats.replace(batch_stats={"mean": np.ones(3, np.float32)})
  assert (digest.state_digest(module.to_host(moved)) !=
          digest.state_digest(module.to_host(with_stats)))
  assert "batch_stats" in checkpoints.saved_fields(with_stats)
