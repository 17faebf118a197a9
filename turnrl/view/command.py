"""Moved: ``turnrl view`` lives with the other commands, :mod:`turnrl.cli.view`. This path warns once and gives that
module, for one release."""

from turnrl.utils import moved_module

moved_module(__name__, "turnrl.cli.view")
