"""The checkpointed training program both backends' `train.py` run.

(What training needs of each program, by name, and the API every backend's
program module exposes are `shardport.strategies`'s.)

- `inputs`: every input of a run checked before compiling (`prepare`);
- `loop`: train, evaluate, checkpoint, resume (`train_and_evaluate`);
- `cli`: the training programs' command line;
- `checkpoints`, `workdir`, `handover`: Orbax checkpoints in one layout for
  both backends, the workdir, and moving a job between backends;
- `dispatch`, `metrics`: how steps are dispatched and what they report.

Nothing here imports a backend by name or `compare`: a backend's `train.py`
names itself.
"""
