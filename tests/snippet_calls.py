"""Small inputs for the guide's blocks whose functions the block only defines.

`tests/test_snippets.py` runs each block as pasted, then its entry here in
the block's own namespace (after its page's imports): every function the
block defines must have run by then. Keyed by page and the reference on the
block's link line: `PAGE#TAG` (a region; `A+B` for regions shown as one
block) or `PAGE::NAME` (one def). An entry that names no block fails the
test, so a renamed region cannot leave its calls behind. Each entry asserts
something of what it got, so a call that returns nonsense fails too.
"""

_MESH = ("mesh = jax.make_mesh((8,), ('data',), "
         "axis_types=(jax.sharding.AxisType.Auto,))\n")

_PORTS = "p = port(steps=2)\nassert p.steps == 2 and p.mesh.size == 8\n"

CALLS = {
    "APPENDIX.md#prove-the-tutorial": _PORTS,
    "APPENDIX.md#prove-a-tuple-state": _PORTS,
    "APPENDIX.md#prove-an-nnx-program": _PORTS,
    "BEYOND-ONE-AXIS.md::shard_axis": (
        "assert shard_axis((3, 16), 8) == 1\n"
        "assert shard_axis((3, 5), 8) == REPLICATED\n"),
    "BEYOND-ONE-AXIS.md#fsdp-helpers": _MESH + (
        "params = {'w': np.arange(32, dtype=np.float32).reshape(16, 2),\n"
        "          'b': np.ones(3, np.float32)}\n"
        "axes = shard_axes(params, 8)\n"
        "assert axes == {'w': 0, 'b': REPLICATED}\n"
        "specs = {'w': P('data'), 'b': P()}\n"
        "round_trip = jax.jit(jax.shard_map(\n"
        "    lambda p: scatter_mean(gather(p, axes, 'data'), axes, 'data', 8),\n"
        "    mesh=mesh, in_specs=(specs,), out_specs=specs, check_vma=False))\n"
        "out = round_trip(params)\n"
        "assert np.array_equal(out['w'], params['w'])\n"
        "assert np.array_equal(out['b'], params['b'])\n"),
    "BEYOND-ONE-AXIS.md#flax-fsdp": _MESH + (
        "state, shardings = sharded_state(mesh, jax.random.key(0))\n"
        "kernel = state.params['Dense_0']['kernel'].value\n"
        "assert kernel.addressable_shards[0].data.shape == (64, 1)\n"
        "batch = {'inputs': np.ones((16, 512), np.float32),\n"
        "         'targets': np.zeros((16, 1), np.float32)}\n"
        "state, loss = make_step(mesh, shardings)(state, batch)\n"
        "assert int(state.step) == 1 and np.isfinite(loss)\n"),
    "BEYOND-ONE-AXIS.md#fsdp-specs": (
        "specs = _state_specs({'w': np.zeros((16, 2)), 'b': np.zeros(3)}, 8)\n"
        "assert specs == {'w': P(devices.AXIS), 'b': P()}, specs\n"),
    "MANY-HOSTS.md#many-hosts-place": (
        "mesh = global_mesh()\n"
        "x, = place_batch(mesh, (np.arange(16, dtype=np.float32),))\n"
        "assert x.sharding.spec == P('data') and x.shape == (16,)\n"),
    "MANY-HOSTS.md#many-hosts-checkpoint": (
        "import tempfile\n"
        "state = {'w': jnp.arange(3.0)}\n"
        "with ocp.CheckpointManager(tempfile.mkdtemp()) as manager:\n"
        "  assert resume(manager, state) == (0, state)\n"
        "  save(manager, 2, state)\n"
        "  manager.wait_until_finished()\n"
        "  step, back = resume(manager, state)\n"
        "assert step == 2 and np.array_equal(back['w'], state['w'])\n"),
    "MOVING-A-RUNNING-JOB.md#pmap-checkpoint": _MESH + (
        "with tempfile.TemporaryDirectory() as workdir:\n"
        "  old = pmap_program(workdir + '/ckpt', calls=1)\n"
        "  new = restore_in_port(workdir + '/ckpt', mesh)\n"
        "assert int(new.opt_state.mini_step) == 1 and new.rng.shape == ()\n"
        "new, loss = port_step(mesh)(new, *batch(1))\n"
        "assert int(new.opt_state.mini_step) == 2 and np.isfinite(loss)\n"),
    "MIGRATION.md#trap-gradient": _MESH + (
        "params = {'w': np.ones((3, 1), np.float32),\n"
        "          'b': np.zeros(1, np.float32)}\n"
        "x = np.ones((16, 3), np.float32)\n"
        "y = np.zeros((16, 1), np.float32)\n"
        "right = sharded_grad(pmean_of_loss, mesh)(params, x, y)\n"
        "also = sharded_grad(pcast_then_grad, mesh)(params, x, y)\n"
        "wrong = sharded_grad(pmean_of_grads, mesh)(params, x, y)\n"
        "assert np.allclose(also['w'], right['w'])\n"
        "assert np.allclose(wrong['w'], 8 * right['w'])  # the trap, N x\n"),
    "MIGRATION.md#trap-loss-normalisation": (
        "params = {'w': np.ones((3, 1), np.float32),\n"
        "          'b': np.zeros(1, np.float32)}\n"
        "x = np.ones((16, 3), np.float32)\n"
        "y = np.zeros((16, 1), np.float32)\n"
        "g2 = data_parallel_grad(classic, 2, params, x, y)\n"
        "g8 = data_parallel_grad(classic, 8, params, x, y)\n"
        "assert np.allclose(g2['w'], 4 * g8['w'])  # scales with 1/devices\n"
        "m2 = data_parallel_grad(local_mean, 2, params, x, y)\n"
        "assert np.allclose(m2['w'], data_parallel_grad(\n"
        "    local_mean, 8, params, x, y)['w'])\n"),
    "MIGRATION.md#trap-microbatch-reshape": (
        "batch = np.arange(N * 4 * 2 * 3, dtype=np.float32).reshape(-1, 3)\n"
        "assert split_naive(batch, 4).shape == (4, N * 2, 3)\n"
        "assert split_per_device(batch, 4).shape == (4, N * 2, 3)\n"
        "assert np.isclose(accumulate(batch, split_per_device, 4),\n"
        "                  np.sum(batch ** 2))\n"),
    "MIGRATION.md#rank": _MESH + (
        "seen, out = pmap_sees(np.ones((N, 2, 3), np.float32))\n"
        "assert seen['shape'] == (2, 3) and out.shape == (N,)\n"
        "seen, out = shard_map_sees(np.ones((N * 2, 3), np.float32), mesh)\n"
        "assert seen['shape'] == (2, 3) and out.shape == (N,)\n"),
    "MIGRATION.md#batchnorm-axis-name": _MESH + (
        "variables = nn.BatchNorm(use_running_average=False).init(\n"
        "    jax.random.key(0), np.ones((2, 3), np.float32))\n"
        "x = np.random.default_rng(0).normal(size=(N * 2, 3)).astype('f4')\n"
        "pmapped, ported = batchnorms(mesh)\n"
        "y_pmap, stats_pmap = pmapped(variables, x.reshape(N, 2, 3))\n"
        "y_port, stats_port = ported(variables, x)\n"
        "assert np.array_equal(np.asarray(y_pmap).reshape(-1, 3), y_port)\n"),
    "MIGRATION.md#dropout-keys": _MESH + (
        "x = np.ones((N * 2, 3), np.float32)\n"
        "pmapped, ported = dropouts(mesh)\n"
        "by_pmap = pmapped(jax.random.key(0), x.reshape(N, 2, 3))\n"
        "by_port = ported(jax.random.key(0), x)\n"
        "assert by_port.shape == x.shape and by_pmap.shape == (N, 2, 3)\n"
        "assert not np.array_equal(by_port[:2], by_port[2:4])  # own masks\n"),
    "MIGRATION.md#prefetch": _MESH + (
        "got = list(prefetch(({'x': np.full((N, 2), i)} for i in range(3)),\n"
        "                    mesh))\n"
        "assert [int(b['x'][0, 0]) for b in got] == [0, 1, 2]\n"),
    "MIGRATION.md#reshard": (
        "mesh = jax.make_mesh((8,), ('data',))\n"
        "x = jax.device_put(np.arange(16.0), NamedSharding(mesh, P()))\n"
        "assert np.array_equal(doubled(AxisType.Explicit)(x), 2 * np.arange(16.0))\n"
        "assert np.array_equal(doubled(AxisType.Auto)(np.arange(16.0)),\n"
        "                      2 * np.arange(16.0))\n"),
    "MIGRATION.md#build-once-pmap": (
        "w = pmap_steps(np.zeros(3, np.float32), 2)\n"
        "assert np.array_equal(w, np.full((N, 3), 2.0))\n"),
    "MIGRATION.md#cheap-fetch": _MESH + (
        "x = np.ones((N, 2, 3), np.float32)\n"
        "assert np.array_equal(pmap_fetch(x), np.full(3, 2.0 * N))\n"
        "assert np.array_equal(port_fetch(x.reshape(N * 2, 3), mesh),\n"
        "                      np.full(3, 2.0 * N))\n"),
    "MIGRATION.md#scan-carry-vma": _MESH + (
        "sums = per_device_sums(mesh)(np.ones(N * 2, np.float32))\n"
        "assert np.array_equal(sums, np.full(N, 2.0))\n"),
    "MIGRATION.md#plain-jit-port": _MESH + (
        "import optax\n"
        "model = Net()\n"
        "variables = model.init({'params': jax.random.key(0),\n"
        "                        'dropout': jax.random.key(1)},\n"
        "                       np.ones((2, 4), np.float32))\n"
        "state = jax.device_put(State.create(\n"
        "    apply_fn=model.apply, params=variables['params'],\n"
        "    tx=optax.sgd(0.1), batch_stats=variables['batch_stats']),\n"
        "    NamedSharding(mesh, P()))\n"
        "batch = {'x': np.ones((N * 2, 4), np.float32),\n"
        "         'y': np.zeros((N * 2, 1), np.float32)}\n"
        "state, loss = make_jit_step(mesh, model)(state, batch)\n"
        "assert int(state.step) == 1 and np.isfinite(float(loss))\n"),
    "MIGRATION.md#prove-your-port": (
        "p = port(steps=2)\n"
        "assert p.steps == 2 and p.mesh.size == 8\n"
        "assert callable(reference_step(8))\n"),
    "MORE-IDIOMS.md#ensemble-members": (
        "mesh = jax.make_mesh((8,), ('ensemble',),\n"
        "                     axis_types=(AxisType.Auto,))\n"
        "x = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)\n"
        "y = (np.arange(16) % 10).astype(np.int32)\n"
        "old = member_states(jax.random.key(0), 8, x[:1])\n"
        "new = jax.device_put(old, NamedSharding(mesh, P('ensemble')))\n"
        "pmapped, port = ensemble_steps(mesh)\n"
        "for _ in range(2):\n"
        "  (old, l0), (new, l1) = pmapped(old, x, y), port(new, x, y)\n"
        "  assert l0.shape == (8,) and np.array_equal(l0, l1)\n"
        "assert all(np.array_equal(a, b) for a, b in\n"
        "           zip(jax.tree.leaves(old), jax.tree.leaves(new)))\n"
        "assert int(new.step[0]) == 2\n"),
    "MORE-IDIOMS.md#staged": _MESH + (
        "devs = pmap_devices()\n"
        "stacked = put_replicated(np.arange(3.0), devs)\n"
        "assert stacked.shape == (N, 3)\n"
        "rows = put_sharded([np.full(2, float(i)) for i in range(N)], devs)\n"
        "flat = stacked_to_global(rows, mesh)\n"
        "assert np.array_equal(flat, np.repeat(np.arange(N), 2))\n"
        "assert np.array_equal(global_to_stacked(flat, devs), rows)\n"),
    "MORE-IDIOMS.md#static-helper+static-before": (
        "x = np.eye(3, dtype=np.float32)[np.arange(N * 2) % 3]\n"
        "batch = (x.reshape(N, 2, 3), np.ones((N, 2, 1), np.float32))\n"
        "w = flax.jax_utils.replicate(np.ones((3, 1), np.float32))\n"
        "assert loss_pmap(w, batch, True).shape == (N,)\n"),
    "MORE-IDIOMS.md#static-helper+static-after": (
        "mesh = jax.make_mesh((8,), ('batch',),\n"
        "                     axis_types=(AxisType.Auto,))\n"
        "x = np.eye(3, dtype=np.float32)[np.arange(N * 2) % 3]\n"
        "batch = (x, np.ones((N * 2, 1), np.float32))\n"
        "w = np.ones((3, 1), np.float32)\n"
        "loss = make_loss(mesh)\n"
        "assert loss(w, batch, CLASS_WEIGHTS, True).shape == ()\n"),
    "MORE-IDIOMS.md#count-collectives": _MESH + (
        "step = jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, 'data'),\n"
        "    mesh=mesh, in_specs=P('data'), out_specs=P()))\n"
        "found = collectives(step, np.ones((N, 4), np.float32))\n"
        "assert [op for op, _, _ in found] == ['all-reduce'], found\n"),
    "MORE-IDIOMS.md#ragged-helper+ragged-before": (
        "params = {'w': np.ones((5, 3), np.float32),\n"
        "          'b': np.zeros(3, np.float32)}\n"
        "x = np.ones((37, 5), np.float32)\n"
        "logits = predict_pmap(flax.jax_utils.replicate(params), x)\n"
        "assert logits.shape == (37, 3)\n"),
    "MORE-IDIOMS.md#ragged-helper+ragged-after": _MESH + (
        "params = {'w': np.ones((5, 3), np.float32),\n"
        "          'b': np.zeros(3, np.float32)}\n"
        "logits = predict_on_mesh(params, np.ones((37, 5), np.float32), mesh)\n"
        "assert logits.shape == (37, 3) and np.all(logits == 5.0)\n"),
    "MORE-IDIOMS.md#objects-helper+objects-before": (
        "text, wrapped = inspect_pmap(np.ones((N, 2), np.float32))\n"
        "assert 'all-reduce' in text and wrapped is step\n"),
    "MORE-IDIOMS.md#objects-helper+objects-after": _MESH + (
        "text, wrapped = inspect_port(mesh, (N * 2,))\n"
        "assert 'all-reduce' in text and wrapped is step\n"),
    "MORE-IDIOMS.md#uneven-helper+uneven-before": (
        "rows = np.stack([np.full(2, 2.0 ** d) for d in range(N)])\n"
        "counts, trips = per_device_pmap(rows)\n"
        "assert list(trips) == [d + 1 for d in range(N)]\n"),
    "MORE-IDIOMS.md#uneven-helper+uneven-after": _MESH + (
        "x = np.concatenate([np.full(2, 2.0 ** d) for d in range(N)])\n"
        "counts, trips = per_device_port(mesh, x)\n"
        "assert list(trips) == [d + 1 for d in range(N)]\n"),
    "MORE-IDIOMS.md#uneven-helper+uneven-global": _MESH + (
        "x = np.concatenate([np.full(2, 2.0 ** d) for d in range(N)])\n"
        "counts, trips = global_jit(mesh, x)\n"
        "assert int(trips) == N\n"),
    "MORE-IDIOMS.md#donate-helper+donate-wrong": _MESH + (
        "import warnings\n"
        "with warnings.catch_warnings():\n"
        "  warnings.simplefilter('ignore')  # the warning the section shows\n"
        "  state, new = donate_replicated(mesh, np.ones((N * 2, 4), 'f4'))\n"
        "assert not state.is_deleted() and np.all(new == 0.5)\n"),
    "MORE-IDIOMS.md#donate-helper+donate-right": _MESH + (
        "state, new = donate_in_place(mesh, np.ones((N * 2, 4), 'f4'))\n"
        "assert state.is_deleted() and np.all(new == 0.5)\n"),
    "MORE-IDIOMS.md#nested-pmap": (
        "mesh, (flat, nested, smap) = ports(2, 4)\n"
        "x = np.arange(2 * 4 * 2 * 3, dtype=np.float32).reshape(-1, 3)\n"
        "assert np.array_equal(flat(x), nested(x))\n"
        "with jax.set_mesh(mesh):\n"
        "  assert np.array_equal(smap(x), flat(x))\n"
        "assert np.allclose(flat(x).reshape(2, 3),\n"
        "                   x.reshape(2, 8, 3).mean(1))\n"),
    "MORE-IDIOMS.md#escape-hatch": (
        "assert check_pmap_runtime() in ('original', 'shard_map')\n"),
    # The whole port's proof in 1 x 8 (tests/test_trainstate_port.py: 2 x 4).
    "TRAINSTATE-PORT.md#trainstate-shared+trainstate-pmap+trainstate-port"
    "+trainstate-check": (
        "leaves, (history, evaluation) = check()\n"
        "assert leaves == 24 and history['loss'].shape == (4,)\n"
        "assert 0 < evaluation['accuracy'] <= 1, evaluation\n"),
}
