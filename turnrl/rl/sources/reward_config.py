"""Moved: the ``reward`` section of a training config is :mod:`turnrl.rl.config.rewards`. This path warns once and gives
that module, for one release."""

from turnrl.utils import moved_module

moved_module(__name__, "turnrl.rl.config.rewards")
