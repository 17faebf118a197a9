"""The shapes a method gives an episode: PAG's self-verification episodes (answer, verify, revise only after
"wrong") and their figures, and SWiRL's one-action-per-turn format. A method's algorithm lives in ``turnrl.methods``;
the episode shape it trains on lives here, below it, because environments never import from the trainer.
"""
