"""Moved: the OpenAI-compatible serving code has a room of its own, :mod:`turnrl.serving`; this module is
:mod:`turnrl.serving.streaming`. This path warns once and gives that module, for one release."""

from turnrl.utils import moved_module

moved_module(__name__, "turnrl.serving.streaming")
