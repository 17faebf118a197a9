"""The ``multi_agent:`` section of a run on an environment with several agents (docs/multi-agent.md): which seats the
trained policy plays, who plays the others, the league of its past versions, and the held-out opponent."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from turnrl.rollout.opponents import Opponent


class LeagueConfig(BaseModel):
    """A pool of the policy's own past versions to play against (``opponent: league``).

    How versions enter: a snapshot of the trained weights (the adapters alone under LoRA) enters before step 0 (the
    starting policy) and then before every ``every``-th step; once the pool holds ``size`` versions the oldest
    leaves. How they are drawn: each step draws its opponent once, from a random stream of the run's seed and the
    step (a resumed run draws the same): the current policy itself with probability ``latest`` (pure self-play:
    every seat is the trained policy and every seat trains), otherwise one version of the pool, uniformly.
    """

    model_config = ConfigDict(extra="forbid")
    size: int = Field(4, ge=1, description="past versions kept; the oldest leaves when a new one enters")
    every: int = Field(2, ge=1, description="a snapshot of the policy enters the pool before every N-th step")
    latest: float = Field(
        0.25,
        ge=0,
        le=1,
        description="the share of steps played against the current policy itself instead of a past version",
    )


class PolicyConfig(BaseModel):
    """One trainable policy of a run with several: the seats it plays, and where its weights start."""

    model_config = ConfigDict(extra="forbid")
    seats: list[str] = Field(min_length=1, description="the seats this policy plays (and trains on)")
    init_from: str | None = Field(
        None,
        description="its starting weights: another run's OUT_DIR or checkpoint of "
        "the same `model` (default: the run's starting policy)",
    )


class MultiAgentConfig(BaseModel):
    """Seats, opponents and the held-out opponent of a multi-agent run."""

    model_config = ConfigDict(extra="forbid")
    train_seats: list[str] | None = Field(
        None,
        description=(
            "the seats whose episodes train the policy (default: every seat). Against a frozen opponent the policy "
            "plays one of them per group of episodes, in turn by task and step, and the opponent the others"
        ),
    )
    opponent: Opponent = Field(
        Opponent("self"),
        description=(
            "who plays the other seats: self (the current policy: every seat is the policy), league (its past versions, "
            "see `league`), random or perfect (tic-tac-toe players that need no model), or a frozen agent spec "
            "(hf:PATH, run:OUT_DIR, openai:URL#MODEL)"
        ),
    )
    league: LeagueConfig = Field(default_factory=LeagueConfig)
    eval_opponent: Opponent | None = Field(
        None,
        description=(
            "the opponent of the held-out evaluation: self, random or perfect (tic-tac-toe), or a frozen agent spec. "
            "One the run trains against (see eval_not_held_out) is refused before a model loads. Default: random on "
            "tic-tac-toe, else self (every seat the policy, as a cooperative game is played)"
        ),
    )
    eval_not_held_out: bool = Field(
        False,
        description=(
            "evaluate against an opponent the run trains against anyway (the policies of a cooperative game playing "
            "together, self-play read as self-play): its figures are labelled 'not held out' (metrics.json `held_out`: "
            "false, with the reason). Without it such a run is refused"
        ),
    )
    eval_seat: str | None = Field(
        None, description="the seat the policy plays in held-out games (default: every seat in turn)"
    )
    eval_temperature: float = Field(
        0.0,
        ge=0.0,
        le=2.0,
        description=(
            "the sampling temperature of the held-out and validation games (0: greedy). A game that always starts from "
            "one state, played greedily against a fixed player, is the same game every time from a seat (the report "
            "counts `distinct_games`); above 0 every game samples its moves from its own seed, the same seeds at every "
            "evaluation, so the games differ and two evaluations pair game by game"
        ),
    )
    policies: dict[str, PolicyConfig] | None = Field(
        None,
        description=(
            "separate trainable policies, by name, each playing its own seats with its own weights (a LoRA adapter each "
            "under learner.lora, all on one copy of the base model), optimizer, version and checkpoint; every seat "
            "belongs to exactly one. Default: one policy in every seat"
        ),
    )

    @model_validator(mode="after")
    def _policies(self) -> MultiAgentConfig:
        if self.eval_opponent is not None and self.eval_opponent.kind == "league":
            raise ValueError(
                "multi_agent.eval_opponent: the league is the training opponent; held-out games need a "
                "fixed one (random, perfect, self or an agent spec)"
            )
        if self.policies is None:
            return self
        if len(self.policies) < 2:
            raise ValueError(
                "multi_agent.policies names one policy: drop it (one policy plays every seat by default) "
                "or name two or more"
            )
        owner: dict[str, str] = {}
        for name, p in self.policies.items():
            if not name or "::" in name or "/" in name:
                raise ValueError(
                    f"policy name {name!r}: use letters, digits, - and _ (it names the policy's metrics, "
                    "checkpoint entry and weights)"
                )
            for seat in p.seats:
                if seat in owner:
                    raise ValueError(
                        f"seat {seat!r} is played by two policies ({owner[seat]!r} and {name!r}): give each seat to one"
                    )
                owner[seat] = name
        if self.opponent.kind != "self":
            raise ValueError(
                f"multi_agent.policies plays every seat with its own policy, so there is no opponent "
                f"to set (opponent: {self.opponent!r}); drop `opponent`"
            )
        if self.train_seats is not None:
            raise ValueError("multi_agent.policies trains every policy on its own seats: drop train_seats")
        return self

    def held_out_opponent(self, env_id: str) -> Opponent:
        """``eval_opponent``, or its default for ``env_id``."""
        if self.eval_opponent is not None:
            return self.eval_opponent
        return Opponent("random" if env_id == "turnrl/TicTacToe-v0" else "self")

    def trained_against(self) -> set[str]:
        """Who the run's policy trains against, as :func:`who` names them: ``self`` (the policy being trained, a past
        version of it, another trainable policy of the run) and ``start`` (its starting weights, which self-play
        and the league play at step 0), or the frozen opponent."""
        if self.policies is not None or self.opponent.is_policy:
            return {"self", "start"}
        return {who(self.opponent)}

    def not_held_out(self, env_id: str, model: str | None = None, out_dir: str | None = None) -> str | None:
        """Why the held-out evaluation's opponent is one the run trains against (None: it is not), naming both: the
        evaluation's opponent (``eval_opponent`` or its default) against ``opponent`` or ``policies``. ``model``
        and ``out_dir`` are the run's: an agent spec of its starting model or of its own folder is the policy."""
        name = self.held_out_opponent(env_id)
        if who(name, model, out_dir) not in self.trained_against():
            return None
        evaluated = f"multi_agent.eval_opponent {name!r}" + (
            "" if self.eval_opponent is not None else f" (the default on {env_id})"
        )
        if self.policies is not None:
            trained = f"multi_agent.policies ({', '.join(self.policies)}), which train together"
        elif self.opponent.is_policy:
            trained = f"multi_agent.opponent {self.opponent!r}: the policy itself and its past versions"
        else:
            trained = f"multi_agent.opponent {self.opponent!r}"
        return f"{evaluated} is an opponent this run trains against ({trained})"

    def policy_of_seat(self) -> dict[str, str]:
        """Each seat's policy (``{}`` with one policy)."""
        return {seat: name for name, p in (self.policies or {}).items() for seat in p.seats}


def who(name: str, model: str | None = None, out_dir: str | None = None) -> str:
    """The player an opponent name stands for, so that two names of one player compare equal: ``self`` for the
    trained policy (``self``; ``run:`` this run's ``out_dir`` or a folder in it, any of its policies), ``start`` for
    its starting weights (``model``, with or without ``hf:``), else the name without ``hf:`` and a trailing ``/``."""
    if name == "self":
        return "self"
    kind, sep, rest = name.partition(":")
    if sep and kind == "run":
        path = Path(rest.partition("#")[0]).expanduser().resolve()
        if out_dir is not None and (
            path == Path(out_dir).expanduser().resolve() or Path(out_dir).expanduser().resolve() in path.parents
        ):
            return "self"
        return f"run:{path}"
    bare = (rest if sep and kind == "hf" else name).rstrip("/")
    if model is not None and bare == model.removeprefix("hf:").rstrip("/"):
        return "start"
    return bare
