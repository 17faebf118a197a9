"""Moved: the process reward model lives with its method, :mod:`turnrl.methods.prm.model` (the saved-critic format
it uses is :mod:`turnrl.rl.core.value_model`, its dense rewards :func:`turnrl.rl.formulas.rewards.dense_rewards`).
This path warns once and gives that module, for one release."""

from turnrl.utils import moved_module

moved_module(__name__, "turnrl.methods.prm.model")
