"""Offline objectives on stored Trajectories (docs/algorithms.md §9): the base class and source (:mod:`.base`,
:mod:`.source`), SFT, RFT and DPO (:mod:`.algorithms`) and DPO's formulas (:mod:`.preference`). Data comes from
``turnrl rollout`` (:mod:`turnrl.rl.sources.collect`)."""
