"""Moved: the run configuration is :mod:`turnrl.rl.config`, at the bottom of ``turnrl.rl``. This path warns once
and gives that package, for one release."""

from turnrl.utils import moved_module

moved_module(__name__, "turnrl.rl.config")
