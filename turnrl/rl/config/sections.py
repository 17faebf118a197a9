"""The sections of a training config about the training itself — what it plays or reads, how it samples and updates,
what it checks and logs (``env``, ``rollout``, ``optim``, ``data``, ``program``, ``guard``, ``wandb``, each of
``extra_evals``): pydantic models, unknown keys are errors.
:mod:`turnrl.rl.config.train` puts them together. Where the run runs (``ray``, ``learner``) is in
:mod:`turnrl.rl.config.cluster`; the ``tasks``, ``reward``, ``multi_agent`` and ``algorithm`` sections have modules of
their own beside these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from turnrl.rollout.opponents import Opponent

if TYPE_CHECKING:
    from turnrl.rollout.tree import TreeSpec


class EnvConfig(BaseModel):
    """Training and held-out environments."""

    model_config = ConfigDict(extra="forbid")
    id: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    eval_kwargs: dict[str, Any] | None = Field(
        None,
        description=(
            "overrides for the held-out env (e.g. split: test); without a split, the env's held-out split where it "
            "declares one"
        ),
    )


class ExtraEvalConfig(BaseModel):
    """Another environment the run's policy is evaluated on, beside its own held-out evaluation (``extra_evals``,
    :mod:`turnrl.rl.run.extra_evals`): wherever the run evaluates (and validates), greedy, with the run's
    ``eval_tasks`` (``validation_tasks``), ``rollout.max_new_tokens`` and ``rollout.max_context``; reports in
    ``OUT_DIR/NAME/eval/step-N`` (``OUT_DIR/NAME/validation/step-N``)."""

    model_config = ConfigDict(extra="forbid")
    env: str = Field(
        description="its environment id: one agent (turnrl/GSM8K-v0) or several "
        "(turnrl/SolverCritic-v0, the policy playing its seats)"
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "its keyword arguments; without a split, its held-out split (its validation split when validating)"
        ),
    )
    opponent: Opponent = Field(
        Opponent("self"),
        description=(
            "an environment with several agents: who plays the seats the policy does not — self (the policy in every "
            "seat: a cooperative game played by one policy), random or perfect (tic-tac-toe), or a frozen agent spec"
        ),
    )

    @field_validator("opponent")
    @classmethod
    def _fixed(cls, opponent: Opponent) -> Opponent:
        if opponent.kind == "league":
            raise ValueError(
                "the league is a training opponent; an evaluation needs a fixed one (self, random, "
                "perfect, script:MODULE:FUNCTION or an agent spec)"
            )
        return opponent

    seat: str | None = Field(
        None, description="an environment with several agents: the policy's seat (default: every seat in turn)"
    )


class ContextConfig(BaseModel):
    """Keep each context of a long episode under a token budget by rewriting its history (a new segment of the
    episode): drop the oldest turns, or have the policy summarize them."""

    model_config = ConfigDict(extra="forbid")
    budget: int = Field(ge=16, description="the most tokens one context may hold before its history is rewritten")
    mode: Literal["drop", "summarize"] = Field(
        "drop",
        description="drop the oldest turns, or replace the history "
        "with a summary the policy writes (trained like its other turns)",
    )
    summary_tokens: int = Field(128, ge=1, description="the most tokens of a summary")


class BranchConfig(BaseModel):
    """One branch point of a tree rollout: every live episode forks into ``children`` after ``turn`` turns."""

    model_config = ConfigDict(extra="forbid")
    turn: int = Field(ge=0, description="turns played before the fork (0: right after the reset)")
    children: int = Field(ge=2, description="episodes each one becomes")


class TreeConfig(BaseModel):
    """Tree rollouts (docs/algorithms.md §14): each root episode branches at turn boundaries; a task's
    ``group_size`` episodes are the leaves of ``group_size / leaves`` trees."""

    model_config = ConfigDict(extra="forbid")
    branches: list[BranchConfig] = Field(
        min_length=1,
        description="where episodes fork, at increasing turns (e.g. "
        "[{turn: 1, children: 2}, {turn: 2, children: 2}]: 4 leaves a root)",
    )

    @model_validator(mode="after")
    def _increasing(self) -> TreeConfig:
        try:
            self.spec()  # the rollout's own rule: turns increase
        except ValueError as e:
            raise ValueError(f"rollout.tree.branches: {e}") from None
        return self

    def spec(self) -> TreeSpec:
        """The rollout's :class:`~turnrl.rollout.tree.TreeSpec` of these branches."""
        from turnrl.rollout.tree import Branch, TreeSpec

        return TreeSpec(tuple(Branch(b.turn, b.children) for b in self.branches))

    @property
    def leaves(self) -> int:
        """The most leaves one root grows."""
        return self.spec().leaves


class RolloutConfig(BaseModel):
    """Sampling during training."""

    model_config = ConfigDict(extra="forbid")
    prompts_per_step: int = Field(4, ge=1)
    group_size: int = Field(8, ge=2)
    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description=(
            "nucleus sampling mass; below 1 the recorded log-probabilities are of the nucleus, renormalized (what was "
            "sampled), and optim.recompute_logprobs is required"
        ),
    )
    max_context: int = Field(2048, ge=16)
    env_timeout: float = Field(
        60.0,
        gt=0,
        description="seconds one environment step may take; then the episode "
        "ends with an error (and is left out of training)",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        description=(
            "k: no token used in an update was sampled more than k policy versions before the weights being updated; "
            "older episodes are dropped and counted (`stale_episodes`). 0 = synchronous; ≥ 1 (placement ray): the next "
            "step's rollouts run while the learner updates, and workers load new weights between generation calls"
        ),
    )
    warn_error_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description=(
            "warn on the console, with the first failed episode's error, when at least this share of a step's episodes "
            "failed (the environment, the model or the agent program raised or timed out); a step whose episodes all "
            "failed stops the run before its update, whatever this says"
        ),
    )
    kv_cache_mb: float = Field(
        2048,
        ge=0,
        description=(
            "memory (MB) the HF backend may keep between turns for live episodes' KV caches, so each turn feeds only "
            "the new tokens instead of the whole conversation; past it the oldest episodes' caches are evicted and "
            "re-prefilled (`kv_evicted`); 0 re-prefills every turn"
        ),
    )
    continuous_batching: bool = Field(
        False,
        description=(
            "continuous batching across turns (HF backend, local placement): each episode's next turn joins the running "
            "batch as soon as its environment answered, instead of waiting for the round's slowest episode; episodes "
            "then sample from their own streams (as with seed_per_episode)"
        ),
    )
    context: ContextConfig | None = Field(
        None,
        description="context management for long episodes (see "
        "ContextConfig); max_context then applies to each context",
    )
    seed_per_episode: bool = Field(
        False,
        description="sample each episode from its own random stream (seeded by "
        "step, task and sample), so trajectories do not depend on how episodes are "
        "batched or spread over workers; the ray placement always does",
    )
    tree: TreeConfig | None = Field(
        None,
        description=(
            "tree rollouts: episodes fork at turn boundaries (their environment, tokens and KV cache copied), so a "
            "task's group_size episodes are the leaves of group_size / leaves trees sharing their history; train them "
            "with algorithm.advantage: tree for turn-level credit (docs/algorithms.md §14)"
        ),
    )

    @model_validator(mode="after")
    def _tree_fits_the_group(self) -> RolloutConfig:
        if self.tree is not None and self.group_size % self.tree.leaves:
            raise ValueError(
                f"rollout.group_size={self.group_size} is not a multiple of the tree's "
                f"{self.tree.leaves} leaves a root (rollout.tree.branches); a task's group is the "
                "leaves of whole trees"
            )
        return self


class OptimConfig(BaseModel):
    """AdamW with linear warm-up, gradient clipping and accumulation."""

    model_config = ConfigDict(extra="forbid")
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    warmup_steps: int = Field(0, ge=0)
    epochs: int = Field(1, ge=1)
    minibatch_size: int = Field(8, ge=1, description="sequences per micro-batch")
    grad_accum: int = Field(
        1,
        ge=1,
        description="micro-batches per optimizer step; the loss is normalized over "
        "all of them (token-mean stays a token mean)",
    )
    micro_tokens: int | None = Field(
        None,
        ge=1,
        description=(
            "most tokens one forward pass holds, counted padded (rows × the longest row): a micro-batch of "
            "minibatch_size rows splits further where long rows would pass it (a longer row runs alone), and the scoring "
            "before the update (values, reference and recomputed log-probabilities) runs in pieces of this size; the "
            "loss is the same, only the memory of long answers is bounded. None: micro-batches by rows only"
        ),
    )
    shuffle: bool = Field(
        True,
        description="with epochs > 1, every epoch after the first takes the rows in a new "
        "seeded order (the first keeps whole groups in one optimizer step)",
    )
    share_prompts: bool = Field(True, description="run a group's common prompt once per forward/backward pass")
    prefix_tree: bool | None = Field(
        None,
        description=(
            "run every prefix that rows of a micro-batch share once per forward/backward pass, not only whole prompts: "
            "a tree's trunk and inner nodes, a system prompt common to several tasks; the rows below continue from its "
            "keys and values (the same loss and gradients up to float rounding; needs a full-attention model, else "
            "share_prompts applies). None: on with rollout.tree. Trees share most when micro-batches hold whole trees "
            "(minibatch_size a multiple of rollout.tree's leaves)"
        ),
    )
    lanes: bool = Field(
        True,
        description=(
            "cut the rows of a forward/backward pass into lanes of similar length, each its own call, so that short "
            "answers are not padded to the longest one beside them (the same numbers up to float rounding)"
        ),
    )
    recompute_logprobs: bool = Field(
        False,
        description=(
            "score the rollout's tokens with the learner's weights before the update and use those as the old "
            "log-probabilities of the ratio (for rollout engines whose numbers differ from the learner's: other "
            "kernels or precision, or a vLLM without processed logprobs); `rollout_logp_diff` reports the gap"
        ),
    )


class DataConfig(BaseModel):
    """Stored training data, for algorithms whose experience source reads it: Trajectories (e.g. written by ``turnrl
    rollout``) or stored states."""

    model_config = ConfigDict(extra="forbid")
    path: str | list[str] = Field(description="JSONL or Parquet file(s) of token-exact Trajectories")
    batch_size: int = Field(32, ge=1, description="episodes per training step (whole tasks; dpo: whole pairs)")
    epochs: float | None = Field(
        None,
        gt=0,
        description="passes over the data; sets `steps` (leave steps unset); "
        "the run's config.yaml records the resulting steps",
    )
    shuffle: bool = Field(True, description="reshuffle the units every epoch (seeded by `seed`)")


class ProgramConfig(BaseModel):
    """Train a user agent program through the OpenAI-compatible gateway instead of playing `env` natively: every
    episode is one run of the program on one of `env`'s tasks (the environment still poses the tasks and grades an
    answer the program returns)."""

    model_config = ConfigDict(extra="forbid")
    function: str | None = Field(
        None,
        description="'module:function' called as function(base_url, api_key, task) "
        "(the module is found on sys.path or in the current folder; --import works too)",
    )
    command: str | list[str] | None = Field(
        None,
        description="a command run per episode with OPENAI_BASE_URL, "
        "OPENAI_API_KEY and TURNRL_TASK set; its last output line is the result",
    )
    concurrency: int = Field(32, ge=1, description="episodes (program runs) at once; their calls share batches")
    timeout: float = Field(
        600.0,
        gt=0,
        description="seconds one program run may take; then its episode is left "
        "out as an error (and its session refuses further calls)",
    )
    model_name: str = Field("turnrl-policy", description="the model name the program asks for")
    host: str = Field(
        "127.0.0.1", description="where the gateway listens (anything but a loopback address needs api_key)"
    )
    port: int = Field(0, ge=0, description="0 picks a free port")
    api_key: str | None = Field(None, description="the key programs must send (default: a random one per run)")
    mcp_tools: bool = Field(
        False,
        description="serve each episode's environment tools to the program as an MCP "
        "server (streamable HTTP) at task['mcp_url'] (TURNRL_MCP_URL for a command); needs the "
        "mcp extra",
    )

    @model_validator(mode="after")
    def _one_program(self) -> ProgramConfig:
        if (self.function is None) == (self.command is None):
            raise ValueError("program: set exactly one of `function` ('module:function') or `command`")
        if self.host not in ("127.0.0.1", "localhost", "::1") and not self.api_key:
            raise ValueError(
                f"program.host={self.host!r} listens beyond this machine: set program.api_key (the key "
                "your programs send), or keep 127.0.0.1"
            )
        return self


class GuardConfig(BaseModel):
    """The consistency guard's settings (the guard itself: :mod:`turnrl.rl.run.guard`)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(
        True,
        description="check every training step's consistency (guard_* metrics, a warning "
        "the first time each check fails)",
    )
    logp_tolerance: float | None = Field(
        None,
        ge=0,
        description=(
            "the most mean |rollout − learner| log-probability gap, in nats, over the tokens sampled by the weights "
            "being updated; None: per rollout backend (HF agent 1e-3, vLLM 5e-2)"
        ),
    )
    logp_max_tolerance: float | None = Field(
        None,
        ge=0,
        description=(
            "the most gap on any one such token; None: per rollout backend (HF agent 5e-2; vLLM: not checked)"
        ),
    )
    strict: bool = Field(
        False, description="stop the run (after recording the step) when a check fails, instead of warning"
    )


class WandbConfig(BaseModel):
    """Weights & Biases logging. A resumed run continues the same W&B run (its id is kept in the run folder)."""

    model_config = ConfigDict(extra="forbid")
    project: str = "turnrl"
    entity: str | None = None
    name: str | None = Field(None, description="default: the run folder's name")
    mode: Literal["online", "offline", "disabled"] = "online"
    tags: list[str] = Field(default_factory=list)
