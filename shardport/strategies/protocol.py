"""The public API every strategy module exposes, in both backends.

`legacy_pmap.<strategy>`, `sharded.<strategy>` and each strategy's
one-device `Reference` (`shardport.strategies.<strategy>`) all satisfy
`StrategyModule` (a module or class can satisfy a Protocol);
`tests/test_api.py` checks that the signatures match name for name. Where the
backends differ in a way the loop or the harness must know, the module
declares it (`BACKEND`, `STEP_TAKES_HOST_LOCAL`, `CHECKPOINTS`, and for
ensembles `MEMBERS_PER_DEVICE`): nothing is inferred from module names.
"""

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

State = Any
Batch = Any
Metrics = dict[str, Any]
HostState = dict[str, Any]


class StrategyModule(Protocol):
  """One strategy (data_parallel, ensemble, accumulation) in one backend.

  Attributes:
    VARIANTS: the runs this module provides, e.g. `("shard_map", "jit")`.
    PROCESS_LOCAL_BATCH: whether `put_batch` takes this process's rows of
      the global batch (data-parallel programs: each process reads only its
      slice) or the whole global batch in every process (ensembles, the
      one-device references). The same in one process, where the rows are
      the whole batch.
    BACKEND: the backend's name (`legacy_pmap`, `sharded`, `reference`), as
      checkpoints and reports record it.
    STEP_TAKES_HOST_LOCAL: whether, with many processes, the step converts
      host-local arrays itself (pmap), so that it is called as it is and
      never as an ahead-of-time executable (which takes global arrays).
    CHECKPOINTS: how the state maps to a checkpoint and back: the backend's
      `devices` module, or its `MemberCheckpoints` for ensembles (None for
      the references, which are never saved).
  """

  VARIANTS: tuple[str, ...]
  PROCESS_LOCAL_BATCH: bool
  BACKEND: str
  STEP_TAKES_HOST_LOCAL: bool
  CHECKPOINTS: Any

  def make_placement(self, n_devices: int) -> Any:
    """The devices (pmap), mesh (sharded) or device (reference) to run on."""

  def create_state(self, seed: int, config: Any, placement: Any) -> State:
    """The initial train state from `seed`, placed on `placement`."""

  def put_batch(self, batch: dict[str, np.ndarray], placement: Any) -> Batch:
    """A global host batch, placed the way `train_step` takes it."""

  def make_train_step(self, config: Any, placement: Any,
                      variant: str) -> Callable[[State, Batch],
                                                tuple[State, Metrics]]:
    """The compiled `(state, batch) -> (state, metrics)`; it has `.lower`."""

  def make_evaluate(self, config: Any,
                    placement: Any) -> Callable[[State, Batch], Metrics]:
    """The compiled `(state, batch) -> metric sums and counts`."""

  def to_host(self, state: State) -> HostState:
    """The whole train state as numpy, in the run's own view of it.

    The engine compares, digests and shares this view and never looks
    inside it. Our programs' view is the canonical one
    (`shardport.workloads.canonical.fields`): every field of the state,
    `params`, `opt_state`, `step` and any other collection it carries, so
    that a digest over it sees a change anywhere; under optax.MultiSteps the
    optimiser state is the inner one and `step` counts optimiser steps; no
    device axis for data-parallel programs, a leading member axis for
    ensembles. A team's `Port` keeps every leaf as its program holds it.
    """

  def metrics_to_host(self, metrics: Metrics) -> dict[str, np.ndarray]:
    """Metrics as numpy, reduced over devices the backend's way."""


# Every name a strategy module exposes: its declared attributes, then its
# functions (a Protocol's annotated attributes are not in its `vars`).
API = (*StrategyModule.__annotations__,
       *(name for name in vars(StrategyModule) if not name.startswith("_")))
# What every run but a program's ground truth has (the truth's state is the
# shared one, never placed): `from_host(host, placement, like, step,
# calls_per_step)`, its `to_host` view after `step` optimiser steps placed
# in its own layout, `like` its initial state (our programs: through their
# checkpoint layout, `shardport.training.checkpoints.from_host_of`).
OPTIONAL = ("from_host",)
