"""The training machinery, in rooms that name no method, stacked in layers that point down (docs/ARCHITECTURE.md,
"Layers"; tests/house/test_imports.py holds them), from the bottom:

* :mod:`turnrl.rl.config` — the run configuration, at the bottom: every room may import it, it imports none;
* :mod:`turnrl.rl.formulas` — the shared pure tensor functions (advantages, losses, reward shaping);
* :mod:`turnrl.rl.core` — the learner core (policy, critic, reference, optimizer), batches and forward passes;
* :mod:`turnrl.rl.algorithms` — the algorithm interface, its registry and the general estimators (GRPO, DAPO, PPO,
  VAPO, RLOO, REINFORCE++);
* :mod:`turnrl.rl.sources` — where a step's episodes come from: the on-policy, windowed and replay sources, run-level
  rewards, task samplers, dataset collection (they play episodes through :mod:`turnrl.rollout`, below ``rl/``);
* :mod:`turnrl.rl.placement` — where the pieces run (this process, Ray workers, DeepSpeed ranks);
* :mod:`turnrl.rl.run` — a run: trainer, driver, evaluation, monitors, tracking.

Methods with their own algorithms, sources, hooks and tools (PAG, SWiRL, DQO, the offline baselines, PRM) live in
:mod:`turnrl.methods` and plug in from outside: entry points read by the registry and the monitors, and the interface
of :mod:`turnrl.rl.algorithms.base`.
"""

# The registry installs the configuration's algorithm hooks (turnrl.rl.config.algorithm) when it is imported; the
# package imports it so that every `import turnrl.rl.…` has them before a config validates.
from turnrl.rl import algorithms as _algorithms  # noqa: F401 — installs the algorithms' config hooks
