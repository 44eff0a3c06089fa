"""shardport's shared core, in the project's own namespace.

`shardport.workloads` (models, data, configs; no devices), `shardport.launch`
(process start-up; no jax at import) and `shardport.training` (programs,
loop, checkpoints), under the twin backends `legacy_pmap` and `sharded` and
the harness `compare`. Importing this package imports nothing else.
"""
