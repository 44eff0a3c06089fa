"""flax's examples/imagenet train step as a `compare.Port`, so that
`python -m compare.rewrite train.py -o train_port.py --global --prove
imagenet_port:port` proves the rewrite of its `p_train_step` (run from the
example's folder, beside its train.py, models.py and configs/, as
nlp_seq_port.py is for nlp_seq): its `_ResNet1` on 32x32 images, its own
`create_train_state` and schedule, the state broadcast as the example's
`in_axes=(None, 0), out_axes=(None, 0)` pmap takes it."""
import functools

import compare, jax, models, numpy as np, train  # pylint: disable=multiple-imports
from configs import default


def port(steps=4):
  config = default.get_config()
  config.warmup_epochs, config.num_epochs = 1.0, 4.0
  model = train.create_model(model_cls=models._ResNet1, half_precision=False)  # pylint: disable=protected-access
  lr = train.create_learning_rate_fn(config, 0.1, steps_per_epoch=2)
  def init():
    return train.create_train_state(jax.random.key(0), config, model, 32, lr)
  def batches(i):
    rng = np.random.default_rng(i)
    return {"image": rng.standard_normal((16, 32, 32, 3), np.float32),
            "label": rng.integers(0, train.NUM_CLASSES, (16,))}
  step = functools.partial(train.train_step, learning_rate_fn=lr)
  return compare.Port(name="imagenet", init=init, port_step=None,
      pmap_step=jax.pmap(step, in_axes=(None, 0), out_axes=(None, 0),
                         axis_name="batch"),
      mesh=jax.make_mesh((8,), ("batch",)), batches=batches, steps=steps)
