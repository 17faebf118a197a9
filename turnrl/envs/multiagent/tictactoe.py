"""``turnrl/TicTacToe-v0``: two seats, ``x`` (moves first) and ``o``, on a 3×3 board whose cells are numbered 1–9.

Each seat sees the rules and, at its turn, the board and the move its opponent just made; its reply's last cell
number (a digit 1–9 standing alone) is its move. A move the rules refuse (no cell named, or a taken one) is told
why and retried, up to ``retries`` times per turn; then the seat forfeits. A win pays +1 and the loser −1 (a forfeit
too), a draw 0; ``infos[seat]["outcome"]`` says ``win``, ``loss`` or ``draw``.

Starting states (``options={"index": i}``), held out by construction (:func:`openings`; docs/multi-agent.md). Two
positions that are rotations or reflections of one another (the board's 8 symmetries) are one position, named by
its :func:`canonical` form. With ``max_opening=k`` (default 3):

* ``train``: every position of exactly ``k`` moves without a winner, except those of the held-out classes (one class
  in four of the ``k``-move positions, by a hash of its canonical form), and every position of ``k + 1`` moves, in
  every orientation (so that each seat moves first in some training games);
* ``test``: one position per class (its canonical form) of every position of fewer than ``k`` moves, the empty
  board included, and of the held-out ``k``-move classes.

Each split's positions come in a fixed order drawn by hash, so that any first ``n`` of them are a fair sample;
training ones alternate a ``k``-move and a ``k + 1``-move position while both last (x and o move first in turn).

A move adds a mark, so a game from a training opening (``k`` moves or more) only passes through its own start and
positions of more than ``k`` marks: it can reach no test opening, whatever is played (:func:`held_out_reached`
checks it by playing every continuation of every training opening). A test game may go on into positions that
training games pass through too: what is held out is where a game starts, and what came before it. With ``max_opening=0`` every game of either
split starts from the empty board: no starting state is held out, and a held-out evaluation differs from training
by its opponent only (:meth:`TicTacToe.held_out_states` says so). Two opponents need no model: :func:`best_move`
(minimax: never loses) and :func:`random_move`.
"""

from __future__ import annotations

import functools
import itertools
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from turnrl.envs.multiagent.core import MultiAgentTextEnv
from turnrl.envs.splits import split_of_key, unit_hash

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
CELL = re.compile(r"(?<!\d)(?<!\d\.)[1-9](?!\d)(?!\.\d)")  # a digit standing alone (not part of 12 or 1.5)
RULES = (
    "You are playing tic-tac-toe as {mark}, against {other}. The board's cells are numbered:\n"
    " 1 | 2 | 3\n 4 | 5 | 6\n 7 | 8 | 9\n"
    "Three of your marks in a row, a column or a diagonal win. At your turn, reply with the number of a free "
    "cell; the last cell number in your reply is your move."
)


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


@functools.cache
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


def _symmetries() -> tuple[tuple[int, ...], ...]:
    """The board's 8 symmetries as permutations of its cells: 4 rotations, each with and without a reflection."""
    grid, found = [[r * 3 + c for c in range(3)] for r in range(3)], set()
    for _ in range(4):
        for g in (grid, [row[::-1] for row in grid]):
            found.add(tuple(cell for row in g for cell in row))
        grid = [[grid[2 - c][r] for c in range(3)] for r in range(3)]  # a quarter turn
    return tuple(sorted(found))


SYMMETRIES = _symmetries()
HELD_OUT_SHARE = 0.25  # of the classes of max_opening-move positions


@functools.cache
def canonical(board: str) -> str:
    """The name of a position's class under the board's 8 symmetries: the least of its rotations and reflections."""
    return min("".join(board[p[i]] for i in range(9)) for p in SYMMETRIES)


def split_of(board: str) -> Literal["train", "test"]:
    """The split a ``max_opening``-move position's class is held in: one class in four (by a hash of its canonical
    form) is held out for ``test``. (Positions of fewer moves are test openings whatever this says.)"""
    return "test" if split_of_key(f"tictactoe {canonical(board)}", {"test": HELD_OUT_SHARE}) == "test" else "train"


@functools.cache
def positions_of(moves: int) -> frozenset[str]:
    """Every position of exactly ``moves`` moves without a winner, in every orientation."""
    layer = {"." * 9}
    for _ in range(moves):
        layer = {b[:i] + to_move(b) + b[i + 1 :] for b in layer for i in range(9) if b[i] == "."}
        layer = {b for b in layer if winner(b) is None}
    return frozenset(layer)


@functools.cache
def openings(split: str, max_moves: int = 3) -> tuple[str, ...]:
    """The starting positions of ``split`` with ``max_opening=max_moves`` (see the module docstring; test ones one
    per class), in a fixed order drawn by hash, so that any first ``n`` are a fair sample (training ones: a position
    of ``max_moves`` moves and one of ``max_moves + 1`` in turn while both last). ``max_moves=0``: the empty board,
    in either split."""
    if max_moves == 0:
        return ("." * 9,)

    def drawn(boards: Iterable[str]) -> list[str]:
        return sorted(boards, key=lambda b: (unit_hash(f"tictactoe order {b}"), b))

    if split == "train":  # the two layers in turn, so that consecutive openings alternate who moves first
        layers = (
            drawn(b for b in positions_of(max_moves) if split_of(b) == "train"),
            drawn(positions_of(max_moves + 1)),
        )
        return tuple(b for pair in itertools.zip_longest(*layers) for b in pair if b is not None)
    found = {canonical(b) for m in range(max_moves) for b in positions_of(m)}
    return tuple(drawn(found | {canonical(b) for b in positions_of(max_moves) if split_of(b) == "test"}))


def reachable(starts: Iterable[str]) -> frozenset[str]:
    """The canonical forms of every position a game from ``starts`` can pass through, whatever is played (the
    starts included; a game ends at a win or a full board)."""
    seen: set[str] = set()
    frontier = set(starts)
    while frontier:
        seen |= frontier
        frontier = {
            b[:i] + to_move(b) + b[i + 1 :] for b in frontier if winner(b) is None for i in range(9) if b[i] == "."
        } - seen
    return frozenset(canonical(b) for b in seen)


def held_out_reached(max_opening: int = 3) -> list[str]:
    """The test openings (canonical forms) that some game from a training opening passes through, by playing every
    continuation of every training opening; ``[]`` when training cannot reach any (symmetric positions count as one).
    ``max_opening=0``: the empty board (both splits start there)."""
    reached = reachable(openings("train", max_opening))
    return sorted({canonical(b) for b in openings("test", max_opening)} & reached)


@dataclass(frozen=True)
class HeldOutStates:
    """Whether a game's held-out starting states are ones training cannot reach: ``claimed`` (the game holds some
    out), ``reached`` (held-out states a training game can pass through: a failure where claimed) and the ``rule``
    (what "cannot reach" means for this game)."""

    claimed: bool
    reached: tuple[str, ...]
    rule: str

    @property
    def ok(self) -> bool:
        """Held out: claimed, and none reached."""
        return self.claimed and not self.reached


class TicTacToe(MultiAgentTextEnv):
    """Tic-tac-toe for two text agents (see the module docstring).

    Args:
        split: ``"train"`` or ``"test"``: the openings ``options={"index": i}`` draws from.
        max_opening: test openings have at most this many moves, training openings this many (outside the held-out
            classes) or one more (see the module docstring; 0: always the empty board, in either split).
        retries: invalid moves a seat may retry per turn before it forfeits.
        max_turns, render_mode: as :class:`~turnrl.envs.multiagent.core.MultiAgentTextEnv`.
    """

    possible_agents = ["x", "o"]  # noqa: RUF012 — the seats
    held_out_split = "test"

    def __init__(
        self,
        *,
        split: Literal["train", "test"] = "train",
        max_opening: int = 3,
        retries: int = 1,
        max_turns: int | None = None,
        render_mode: str | None = None,
    ) -> None:
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

    def state_key(self, index: int) -> str:
        """The item starting state ``index`` counts as: its canonical form (symmetric positions are one item)."""
        positions = self.positions()
        return f"tictactoe:{canonical(positions[int(index) % len(positions)])}"

    @staticmethod
    def random_player(seed: int = 0) -> Callable[[str], str]:
        """A player of uniformly random *legal* moves, as a function of the text a seat was told (the floor a
        held-out evaluation reports beside a policy's figures): :func:`text_player` ``"random"``."""
        return text_player("random", seed)

    def reached_by(self, train: TicTacToe) -> list[str]:
        """This split's starting positions (canonical forms) that a game from one of ``train``'s can pass through
        (a run's held-out game against its training game, whatever either was made with)."""
        return sorted({canonical(b) for b in self.positions()} & reachable(train.positions()))

    def held_out_states(self) -> HeldOutStates:
        """Whether the test openings are ones a training game cannot reach (checked by :func:`held_out_reached`)."""
        if self.max_opening == 0:
            return HeldOutStates(
                False,
                ("." * 9,),
                "max_opening 0: every game of either split starts from the empty "
                "board, so no starting state is held out (held out by the opponent only)",
            )
        k = self.max_opening
        rule = (
            f"training starts from positions of {k} moves outside the held-out classes and of {k + 1} moves; a "
            f"move adds a mark, so no training game passes through a position of {k} moves or fewer but its own "
            f"start; test openings are the positions of fewer than {k} moves and the held-out classes of {k} "
            "(rotations and reflections count as one position)"
        )
        return HeldOutStates(True, tuple(held_out_reached(self.max_opening)), rule)

    def _reset(self, options: dict[str, Any]) -> None:
        positions = self.positions()
        index = options.get("index")
        self.board = (
            positions[int(index) % len(positions)]
            if index is not None
            else positions[int(self.np_random.integers(len(positions)))]
        )
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
            self.tell(
                other,
                f"{agent} played {cell + 1}.\n{show(self.board)}\n"
                + ("You lose." if won else "The board is full: a draw."),
            )
            self.tell(agent, "You win." if won else "The board is full: a draw.")
            self.end(outcome)
            return
        self.agent_selection = other
        self.tell(other, f"{agent} played {cell + 1}.\n{show(self.board)}\nYour move ({other}).")

    def _free(self) -> str:
        return ", ".join(str(i + 1) for i in range(9) if self.board[i] == ".")
