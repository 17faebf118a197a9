"""PRM for code (docs/algorithms.md §8): line-level process labels by Monte-Carlo completion
(:mod:`turnrl.methods.prm.labels`), a process reward model trained on them (:mod:`turnrl.methods.prm.model`), and its use in
PPO as dense rewards (``process_reward:``) and as the critic's start (``algorithm.critic_init``). ``turnrl prm label``
and ``turnrl prm train`` (:mod:`turnrl.methods.prm.cli`)."""
