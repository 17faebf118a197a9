"""Moved: the rollout engine has a room of its own, :mod:`turnrl.rollout`; this module is
:mod:`turnrl.rollout.play`. This path warns once and gives that module, for one release."""

from turnrl.utils import moved_module

moved_module(__name__, "turnrl.rollout.play")
