"""The import block each page of the guide states once, as tagged regions.

Every python block on a page runs pasted into an empty file after its
page's block (`tests/test_snippets.py` runs them all), on 8 devices: on CPU
the block's `XLA_FLAGS` emulates them. Nothing imports this file;
`python docs/page_imports.py` runs every block at once.
"""
# Each block is a page's, read alone: the second imports the first's again.
# pylint: disable=reimported,wrong-import-position,ungrouped-imports
# pylint: disable=g-bad-import-order,unused-import

# region: migration-imports
import logging
import os  # XLA_FLAGS below: 8 emulated CPU devices, set before jax starts
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
import flax.jax_utils
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

N = jax.device_count()  # the devices the snippets spread over
# endregion


# region: more-idioms-imports
import functools
import logging
import os  # XLA_FLAGS below: 8 emulated CPU devices, set before jax starts
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
import equinox as eqx  # the test extras install it (pyproject.toml)
import flax.jax_utils
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

N = jax.device_count()  # the devices the snippets spread over
# endregion


# region: many-hosts-imports
import os  # XLA_FLAGS below: 8 emulated CPU devices, set before jax starts
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding, PartitionSpec as P
# endregion


# region: beyond-imports
import os  # XLA_FLAGS below: 8 emulated CPU devices, set before jax starts
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
import jax
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from sharded import devices  # the mesh's axis names: devices.AXIS
from shardport.strategies import fsdp  # fsdp.shard_axis, below
from shardport.strategies.fsdp import REPLICATED  # -1: a leaf not split
# endregion


# region: moving-imports
import os  # XLA_FLAGS below: 8 emulated CPU devices, set before jax starts
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
import tempfile

import flax.jax_utils
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax.training import train_state
from jax.sharding import NamedSharding, PartitionSpec as P

import compare  # this repository's public API: compare.from_pmap_checkpoint
# endregion


# region: trainstate-imports
import functools
import os  # XLA_FLAGS below: 8 emulated CPU devices, set before jax starts
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
import tempfile

import flax.jax_utils
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax.training import common_utils, train_state
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P
# endregion
