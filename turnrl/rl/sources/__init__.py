"""Experience sources (docs/concepts.md §8): the token-exact rollout (:mod:`.rollout`), the one function that plays
(task, sample) jobs (:mod:`.play`), the on-policy source and its local runner (:mod:`.onpolicy`), stored data
(:mod:`.replay`) and dataset collection (:mod:`.collect`). The protocol is in :mod:`.base`."""
