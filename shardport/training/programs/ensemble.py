"""ensemble: one CNN per member, every member on the whole global batch."""

import dataclasses

import numpy as np

from shardport.training.programs.base import Program
from shardport.workloads import configs
from shardport.workloads import ensemble


class EnsembleProgram(Program):
  """The HOWTO's ensemble: one CNN per member, the same batch for all."""

  name = "ensemble"
  program = "ensemble"
  config_class = configs.EnsembleConfig
  workloads = ("cnn",)
  # Seven epochs of the HOWTO's optimiser: the ensemble reaches 94.3% on
  # digits, above its best member (94.0%), measured with the reference.
  defaults = {"epochs": 7}
  # Each member's loss is its mean over the whole batch, on any device count.
  loss_depends_on_devices = False

  def make_config(self, options, data):
    """The config; `--epochs` sets the steps unless `--steps` is given."""
    config = super().make_config(options, data)
    if "steps" not in options:
      per_epoch = max(1, len(data.train_inputs) // config.global_batch)
      config = dataclasses.replace(config, steps=config.epochs * per_epoch)
    return config

  def check_layout(self, config, n_devices, n_processes):
    """Members must be a multiple of the devices; the loop must exist.

    This is the one check of the ensemble size for every backend; a backend
    that takes fewer layouts declares it (`check_module`).
    """
    # Members spread over every process's devices (each process loads the
    # whole batch).
    ensemble.check_members(config.members, n_devices * n_processes)
    if config.member_loop not in configs.MEMBER_LOOPS:
      raise configs.ConfigError(
          f"unknown --member-loop {config.member_loop!r}; choose one of "
          f"{', '.join(configs.MEMBER_LOOPS)}")

  def check_module(self, module, config, n_devices):
    """A backend that maps a fixed number of members per device (pmap: one)
    takes only that many."""
    ensemble.check_members(config.members, n_devices,
                           module.MEMBERS_PER_DEVICE)

  def eval_every(self, config, n_train):
    """After every epoch, as the classic program logs."""
    return max(1, n_train // config.global_batch)

  def summarize(self, sums, config):
    """The ensemble's test accuracy beside every member's.

    `test_loss` is the members' mean test loss (the classic program logs
    member 0's); `test_accuracy` is the ensemble's, as the classic program
    reports it.
    """
    del config
    count = float(sums["count"])
    members = np.asarray(sums["member_correct"], np.float64) / count
    ensemble_accuracy = float(sums["ensemble_correct"]) / count
    return {"test_loss": float(np.mean(sums["member_loss_sum"])) / count,
            "test_accuracy": ensemble_accuracy,
            "ensemble_accuracy": ensemble_accuracy,
            "member_accuracy": [round(float(a), 6) for a in members],
            "mean_member_accuracy": float(members.mean()),
            "best_member_accuracy": float(members.max())}
