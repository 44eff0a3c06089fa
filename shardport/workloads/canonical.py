"""A train state's canonical fields: what its digest and checkpoint hold.

Every backend and reference keeps its train state in its own layout (a
device axis under pmap, optax.MultiSteps' wrapper, a tuple of members);
`fields` names the same values in each, so that `to_host` of any of them,
once the backend has fetched it, holds the same bits where the runs agree.
"""

import dataclasses

from shardport.workloads import microbatches


def fields(state) -> dict:
  """Every array field of one train state, by name, in canonical terms.

  All of the state's pytree fields, not a chosen few: `params`, `opt_state`,
  `step` and any other collection a state carries (e.g. `batch_stats`), so
  that a digest over them sees a change anywhere in the state. Static fields
  (`apply_fn`, `tx`) hold no arrays. Under optax.MultiSteps the optimiser
  state is its inner one and the step its count of optimiser steps
  (`microbatches.canonical_opt_state`, `canonical_step`), as a run that
  takes whole steps holds them.

  Args:
    state: a flax struct train state (e.g. `TrainState`), on devices or not.

  Returns:
    `{field name: subtree}`, the leaves as they are (nothing is fetched).
  """
  tree = {field.name: getattr(state, field.name)
          for field in dataclasses.fields(state)
          if field.metadata.get("pytree_node", True)}
  tree["opt_state"] = microbatches.canonical_opt_state(state.opt_state)
  tree["step"] = microbatches.canonical_step(state)
  return tree
