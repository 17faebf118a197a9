"""Scripted players of TextArena games that list their legal moves (TicTacToe-v0, KuhnPoker-v0), for the seats a
trained policy does not play: ``multi_agent: {eval_opponent: "script:examples.textarena_players:random_legal"}`` from
the repository (configs/textarena-tictactoe.yaml), or ``script:textarena_players:random_legal`` from examples/. Each is
``FUNCTION(text) -> move``: ``text`` is everything the seat was told so far, the move a bracketed action.

``random_legal`` draws uniformly among the legal moves the last turn listed, seeded by what its seat was told: a
fixed player, whose move in a position does not depend on what was played before in the process (validation, an
earlier evaluation, a resume), so two evaluations of one run meet the same opponent; ``first_legal`` always plays the
first one listed — a weak player with a fixed style, useful as a second held-out opponent.
"""

import random
import zlib

from turnrl.envs.multiagent.external import listed_moves


def random_legal(text: str) -> str:
    """A uniformly random legal move, the same for the same text ('' where none is listed: the game counts it
    invalid)."""
    moves = listed_moves(text)
    return random.Random(zlib.crc32(text.encode("utf-8"))).choice(moves) if moves else ""


def first_legal(text: str) -> str:
    """The first legal move the last turn listed ('' where none is listed: the game counts it invalid)."""
    moves = listed_moves(text)
    return moves[0] if moves else ""
