"""The ``multi_agent:`` section of a run on an environment with several agents (docs/multi-agent.md): which seats the
trained policy plays, who plays the others, the league of its past versions, and the held-out opponent."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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
    latest: float = Field(0.25, ge=0, le=1, description="the share of steps played against the current policy "
                          "itself instead of a past version")


class MultiAgentConfig(BaseModel):
    """Seats, opponents and the held-out opponent of a multi-agent run."""

    model_config = ConfigDict(extra="forbid")
    train_seats: list[str] | None = Field(None, description=(
        "the seats whose episodes train the policy (default: every seat). Against a frozen opponent the policy "
        "plays one of them per group of episodes, in turn by task and step, and the opponent the others"))
    opponent: str = Field("self", description=(
        "who plays the other seats: self (the current policy: every seat is the policy), league (its past versions, "
        "see `league`), random or perfect (tic-tac-toe players that need no model), or a frozen agent spec "
        "(hf:PATH, run:OUT_DIR, openai:URL#MODEL)"))
    league: LeagueConfig = Field(default_factory=LeagueConfig)
    eval_opponent: str = Field("random", description=(
        "the opponent of the held-out evaluation (the same names as `opponent`; never train against the one you "
        "report)"))
    eval_seat: str | None = Field(None, description="the seat the policy plays in held-out games (default: every "
                                  "seat in turn)")
