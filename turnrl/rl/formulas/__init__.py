"""Pure tensor functions shared by the algorithms (docs/algorithms.md §0): advantages, losses, reward shaping. Tensors
and scalars in, tensors out; no config objects, no ``.item()``, no logging."""
