"""SWiRL (docs/algorithms.md §1): synthetic multi-step tool-use data, step-wise filtering and step-wise RL."""
