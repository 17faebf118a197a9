"""Moved: PAG's episode figures live with the self-verification environments,
:mod:`turnrl.envs.self_verify_metrics`. This path warns once and gives that module, for one release."""

from turnrl.utils import moved_module

moved_module(__name__, "turnrl.envs.self_verify_metrics")
