"""Scripted players of TextArena games that list their legal moves (TicTacToe-v0, KuhnPoker-v0), for the seats a
trained policy does not play: ``multi_agent: {eval_opponent: "script:examples.textarena_players:random_legal"}`` from
the repository (configs/textarena-tictactoe.yaml), or ``script:textarena_players:random_legal`` from examples/. Each is
``FUNCTION(text) -> move``: ``text`` is everything the seat was told so far, the move a bracketed action.

``random_legal`` draws uniformly among the legal moves the last turn listed, from a stream of its own (seeded once
per process: the same games for the same evaluation); ``first_legal`` always plays the first one listed — a weak
player with a fixed style, useful as a second held-out opponent.
"""

from turnrl.envs.multiagent.external import listed_moves, random_legal_player

random_legal = random_legal_player(seed=1234)


def first_legal(text: str) -> str:
    """The first legal move the last turn listed ('' where none is listed: the game counts it invalid)."""
    moves = listed_moves(text)
    return moves[0] if moves else ""
