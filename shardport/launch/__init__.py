"""Process start-up, shared by every shardport program; imports no jax.

- `emulation`: the emulated CPU device count, set before jax starts;
- `options`: the flags every program shares, and `UsageError` (exit 2);
- `distributed`: joining a `jax.distributed` job, barriers, process 0;
- `launcher`: `--processes P`, P local workers started and supervised;
- `baseline`: `--baseline`, the same command in one process to compare;
- `files`: reports and results written atomically, checked early.
"""
