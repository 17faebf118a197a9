"""The conformance harness: does an environment keep the contract of :class:`turnrl.envs.core.TextEnv`?

``check_environment(env)`` plays scripted episodes and checks spaces, seeding, tools and the verifier
(:mod:`.contract`, :mod:`.tool_checks`), reporting into a :class:`~.report.CheckReport`; ``check_splits(env_id)``
asks whether the held-out split is held out (:mod:`.split_check`). ``turnrl envs check ID`` runs both.
"""

from turnrl.envs.conformance.contract import check_environment
from turnrl.envs.conformance.report import CheckReport
from turnrl.envs.conformance.split_check import check_splits

__all__ = ["CheckReport", "check_environment", "check_splits"]
