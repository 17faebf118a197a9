"""Placements: where the pieces of a run live. ``local`` (one process; agent and learner share the model object) and
``ray`` (rollout workers as Ray actors). The learner core, the algorithms and the driver are the same in both."""
