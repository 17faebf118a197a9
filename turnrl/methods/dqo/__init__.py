"""DQO: Direct Q-function Optimization, offline soft-Q learning (docs/algorithms.md §2): the algorithm
(:mod:`.algorithm`) and its formulas (:mod:`.soft_q`). Trained from stored data through :mod:`turnrl.methods.offline`'s
source."""
