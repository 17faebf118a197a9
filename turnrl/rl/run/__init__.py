"""A training run: its config (:mod:`.config`), assembly (:mod:`.trainer`), the loop (:mod:`.driver`), held-out
evaluation (:mod:`.evaluate`), health checks (:mod:`.monitors`), logging (:mod:`.tracking`) and plots (:mod:`.curves`)."""
