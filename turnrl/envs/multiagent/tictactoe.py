"""``turnrl/TicTacToe-v0``: two seats, ``x`` (moves first) and ``o``, on a 3×3 board whose cells are numbered 1–9.

Each seat sees the rules and, at its turn, the board and the move its opponent just made; its reply's last cell
number (a digit 1–9 standing alone) is its move. A move the rules refuse (no cell named, or a taken one) is told
why and retried, up to ``retries`` times per turn; then the seat forfeits. A win pays +1 and the loser −1 (a forfeit
too), a draw 0; ``infos[seat]["outcome"]`` says ``win``, ``loss`` or ``draw``.

Starting states (``options={"index": i}``): every position reachable by zero to three opening moves without a
winner, split by a hash of the position into ``train`` (nine in ten) and ``test``: held-out evaluation plays
openings training never saw. With ``max_opening=0`` every game of either split starts from the empty board (there is
no position to hold out): a held-out evaluation then differs from training by its opponent only. Two opponents need no model: :func:`best_move` (minimax: never loses) and
:func:`random_move`.
"""

from __future__ import annotations

import functools
import hashlib
import re
import zlib
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from turnrl.envs.multiagent.core import MultiAgentTextEnv

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
CELL = re.compile(r"(?<!\d)(?<!\d\.)[1-9](?!\d)(?!\.\d)")  # a digit standing alone (not part of 12 or 1.5)
RULES = ("You are playing tic-tac-toe as {mark}, against {other}. The board's cells are numbered:\n"
         " 1 | 2 | 3\n 4 | 5 | 6\n 7 | 8 | 9\n"
         "Three of your marks in a row, a column or a diagonal win. At your turn, reply with the number of a free "
         "cell; the last cell number in your reply is your move.")


def winner(board: str) -> str | None:
    """``"x"`` or ``"o"`` when one has three in a line, else None (``board``: 9 characters of ``x``, ``o``, ``.``)."""
    for a, b, c in LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


def to_move(board: str) -> str:
    """Whose turn it is: x moves first."""
    return "x" if board.count("x") == board.count("o") else "o"


def show(board: str) -> str:
    """The board as text: marks, and the numbers of the free cells."""
    cells = [board[i] if board[i] != "." else str(i + 1) for i in range(9)]
    return "\n---+---+---\n".join(" " + " | ".join(cells[r * 3 : r * 3 + 3]) for r in range(3))


@functools.lru_cache(maxsize=None)
def _value(board: str) -> int:
    """The game's value for the player to move under perfect play: 1 win, 0 draw, −1 loss."""
    if winner(board) is not None:
        return -1  # the previous move won
    free = [i for i in range(9) if board[i] == "."]
    if not free:
        return 0
    mark = to_move(board)
    return max(-_value(board[:i] + mark + board[i + 1 :]) for i in free)


def best_move(board: str) -> int:
    """A perfect move (0-based cell) for the player to move; the lowest such cell, so it is deterministic."""
    mark = to_move(board)
    free = [i for i in range(9) if board[i] == "."]
    return max(free, key=lambda i: (-_value(board[:i] + mark + board[i + 1 :]), -i))


def random_move(board: str, rng: np.random.Generator) -> int:
    """A uniformly random free cell (0-based)."""
    free = [i for i in range(9) if board[i] == "."]
    return int(rng.choice(free))


BOARD_ROW = re.compile(r"^ ([xo1-9]) \| ([xo1-9]) \| ([xo1-9])$", re.MULTILINE)


def board_in(text: str) -> str | None:
    """The last board shown in ``text`` (what a seat was told), as 9 characters of ``x``, ``o``, ``.``; None if it
    shows none."""
    rows = BOARD_ROW.findall(text)
    if len(rows) < 3:
        return None
    return "".join("." if c.isdigit() else c for row in rows[-3:] for c in row)


def text_player(kind: Literal["perfect", "random"], seed: int = 0) -> Callable[[str], str]:
    """An opponent that needs no model, as a function of the text a seat was told: ``perfect`` (minimax) or
    ``random`` on the last board shown. The random player draws its free cell from a stream of ``seed`` and the
    whole text (a CRC of it), so it keeps no state: the same game asks the same move whatever the batch, and a
    resumed run plays what an uninterrupted one would."""
    if kind not in ("perfect", "random"):
        raise ValueError(f"a tic-tac-toe player is 'perfect' or 'random', got {kind!r}")

    def play(text: str) -> str:
        board = board_in(text)
        if board is None or "." not in board:
            return "1"
        if kind == "perfect":
            return str(best_move(board) + 1)
        return str(random_move(board, np.random.default_rng([seed, zlib.crc32(text.encode())])) + 1)

    return play


def split_of(board: str) -> Literal["train", "test"]:
    """The split an opening belongs to: one in ten positions (by a hash of the board) is held out for test."""
    return "test" if hashlib.sha256(board.encode()).digest()[0] % 10 == 0 else "train"


@functools.lru_cache(maxsize=None)
def openings(split: str, max_moves: int = 3) -> tuple[str, ...]:
    """Every position reachable in at most ``max_moves`` moves without a winner, of ``split``, in a fixed order."""
    found, frontier = {"." * 9}, {"." * 9}
    for _ in range(max_moves):
        frontier = {b[:i] + to_move(b) + b[i + 1 :] for b in frontier for i in range(9) if b[i] == "."}
        frontier = {b for b in frontier if winner(b) is None}
        found |= frontier
    return tuple(sorted(b for b in found if split_of(b) == split))


class TicTacToe(MultiAgentTextEnv):
    """Tic-tac-toe for two text agents (see the module docstring).

    Args:
        split: ``"train"`` or ``"test"``: the openings ``options={"index": i}`` draws from.
        max_opening: the most opening moves a starting position has (0: always the empty board, in either split).
        retries: invalid moves a seat may retry per turn before it forfeits.
        max_turns, render_mode: as :class:`~turnrl.envs.multiagent.core.MultiAgentTextEnv`.
    """

    possible_agents = ["x", "o"]  # noqa: RUF012 — the seats
    held_out_split = "test"

    def __init__(self, *, split: Literal["train", "test"] = "train", max_opening: int = 3, retries: int = 1,
                 max_turns: int | None = None, render_mode: str | None = None) -> None:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if not 0 <= max_opening <= 3:
            raise ValueError(f"max_opening must be 0–3, got {max_opening}")
        if retries < 0:
            raise ValueError(f"retries must be ≥ 0, got {retries}")
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        self.split, self.max_opening, self.retries = split, max_opening, retries
        self.board = "." * 9
        self.tries = 0

    def positions(self) -> tuple[str, ...]:
        """The starting positions of the split: its openings, or the empty board alone with ``max_opening=0``."""
        return openings(self.split, self.max_opening) if self.max_opening else ("." * 9,)

    def __len__(self) -> int:
        """How many starting positions the split holds."""
        return len(self.positions())

    def _reset(self, options: dict[str, Any]) -> None:
        positions = self.positions()
        index = options.get("index")
        self.board = positions[int(index) % len(positions)] if index is not None else \
            positions[int(self.np_random.integers(len(positions)))]
        self.tries = 0
        for seat in self.possible_agents:
            other = "o" if seat == "x" else "x"
            self.tell(seat, RULES.format(mark=seat, other=other), role="system")
        self.agent_selection = to_move(self.board)
        opening = "" if self.board == "." * 9 else "The game starts from this position.\n"
        self.tell(self.agent_selection, f"{opening}{show(self.board)}\nYour move ({self.agent_selection}).")

    def _play(self, agent: str, action: str) -> None:
        other = "o" if agent == "x" else "x"
        cells = CELL.findall(action)
        cell = int(cells[-1]) - 1 if cells else None
        if cell is None or self.board[cell] != ".":
            why = "Your reply names no cell (a number 1–9)." if cell is None else f"Cell {cell + 1} is taken."
            if self.tries < self.retries:
                self.tries += 1
                self.refuse(agent, f"{why} Free cells: {self._free()}. Your move ({agent}).")
                return  # the same seat moves again
            self.refuse(agent, f"{why} That was your last try: you forfeit the game.")
            self.tell(other, f"{agent} made no valid move and forfeits: you win.")
            self.reward({agent: -1.0, other: 1.0})
            self.end({agent: "loss", other: "win"})
            return
        self.tries = 0
        self.board = self.board[:cell] + agent + self.board[cell + 1 :]
        won, full = winner(self.board), "." not in self.board
        if won or full:
            outcome = {agent: "win", other: "loss"} if won else {agent: "draw", other: "draw"}
            if won:
                self.reward({agent: 1.0, other: -1.0})
            self.tell(other, f"{agent} played {cell + 1}.\n{show(self.board)}\n"
                      + ("You lose." if won else "The board is full: a draw."))
            self.tell(agent, "You win." if won else "The board is full: a draw.")
            self.end(outcome)
            return
        self.agent_selection = other
        self.tell(other, f"{agent} played {cell + 1}.\n{show(self.board)}\nYour move ({other}).")

    def _free(self) -> str:
        return ", ".join(str(i + 1) for i in range(9) if self.board[i] == ".")
