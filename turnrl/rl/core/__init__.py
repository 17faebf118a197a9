"""The learner core: trainable state (:mod:`.learner`), padded batches (:mod:`.batch`), log-probabilities and entropy
(:mod:`.forward`), critics (:mod:`.critic`) and the models an algorithm asks for (:mod:`.models`)."""
