"""Moved: the command line is one room, :mod:`turnrl.cli`; this module is :mod:`turnrl.cli.shared`. This path warns
once and gives that module, for one release."""

from turnrl.utils import moved_module

moved_module(__name__, "turnrl.cli.shared")
