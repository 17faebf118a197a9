"""Training run configs (``turnrl train CONFIG.yaml key.sub=value …``): pydantic models, unknown keys are errors.

Over 400 lines: the whole top-level schema and its cross-key checks sit together, so that one file answers "which
keys exist and which combinations are refused" (the sub-configs of algorithms, tasks and rewards live elsewhere).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, field_validator, model_validator

from turnrl.lora import LoraConfig
from turnrl.rl.algorithms import AlgorithmConfig, parse_algorithm_config
from turnrl.rl.run.tracking import WandbConfig
from turnrl.rl.sources.reward_config import ProcessRewardConfig, RewardConfig
from turnrl.rl.sources.task_config import SequentialTasks, TaskConfig


class EnvConfig(BaseModel):
    """Training and held-out environments."""

    model_config = ConfigDict(extra="forbid")
    id: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    eval_kwargs: dict[str, Any] | None = Field(None, description=(
        "overrides for the held-out env (e.g. split: test); without a split, the env's held-out split where it "
        "declares one"))


class ContextConfig(BaseModel):
    """Keep each context of a long episode under a token budget by rewriting its history (a new segment of the
    episode): drop the oldest turns, or have the policy summarize them."""

    model_config = ConfigDict(extra="forbid")
    budget: int = Field(ge=16, description="the most tokens one context may hold before its history is rewritten")
    mode: Literal["drop", "summarize"] = Field("drop", description="drop the oldest turns, or replace the history "
                                               "with a summary the policy writes (trained like its other turns)")
    summary_tokens: int = Field(128, ge=1, description="the most tokens of a summary")


class RolloutConfig(BaseModel):
    """Sampling during training."""

    model_config = ConfigDict(extra="forbid")
    prompts_per_step: int = Field(4, ge=1)
    group_size: int = Field(8, ge=2)
    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1, description=(
        "nucleus sampling mass; below 1 the recorded log-probabilities are of the nucleus, renormalized (what was "
        "sampled), and optim.recompute_logprobs is required"))
    max_context: int = Field(2048, ge=16)
    env_timeout: float = Field(60.0, gt=0, description="seconds one environment step may take; then the episode "
                               "ends with an error (and is left out of training)")
    max_staleness: int = Field(0, ge=0, description=(
        "k: no token used in an update was sampled more than k policy versions before the weights being updated; "
        "older episodes are dropped and counted (`stale_episodes`). 0 = synchronous; ≥ 1 (placement ray): the next "
        "step's rollouts run while the learner updates, and workers load new weights between generation calls"))
    kv_cache_mb: float = Field(2048, ge=0, description=(
        "memory (MB) the HF backend may keep between turns for live episodes' KV caches, so each turn feeds only "
        "the new tokens instead of the whole conversation; past it the oldest episodes' caches are evicted and "
        "re-prefilled (`kv_evicted`); 0 re-prefills every turn"))
    continuous_batching: bool = Field(False, description=(
        "continuous batching across turns (HF backend, local placement): each episode's next turn joins the running "
        "batch as soon as its environment answered, instead of waiting for the round's slowest episode; episodes "
        "then sample from their own streams (as with seed_per_episode)"))
    context: ContextConfig | None = Field(None, description="context management for long episodes (see "
                                          "ContextConfig); max_context then applies to each context")
    seed_per_episode: bool = Field(False, description="sample each episode from its own random stream (seeded by "
                                   "step, task and sample), so trajectories do not depend on how episodes are "
                                   "batched or spread over workers; the ray placement always does")


class OptimConfig(BaseModel):
    """AdamW with linear warm-up, gradient clipping and accumulation."""

    model_config = ConfigDict(extra="forbid")
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    warmup_steps: int = Field(0, ge=0)
    epochs: int = Field(1, ge=1)
    minibatch_size: int = Field(8, ge=1, description="sequences per micro-batch")
    grad_accum: int = Field(1, ge=1, description="micro-batches per optimizer step; the loss is normalized over "
                            "all of them (token-mean stays a token mean)")
    micro_tokens: int | None = Field(None, ge=1, description=(
        "most tokens one forward pass holds, counted padded (rows × the longest row): a micro-batch of "
        "minibatch_size rows splits further where long rows would pass it (a longer row runs alone), and the scoring "
        "before the update (values, reference and recomputed log-probabilities) runs in pieces of this size; the "
        "loss is the same, only the memory of long answers is bounded. None: micro-batches by rows only"))
    shuffle: bool = Field(True, description="with epochs > 1, every epoch after the first takes the rows in a new "
                          "seeded order (the first keeps whole groups in one optimizer step)")
    share_prompts: bool = Field(True, description="run a group's common prompt once per forward/backward pass")
    lanes: bool = Field(True, description=(
        "cut the rows of a forward/backward pass into lanes of similar length, each its own call, so that short "
        "answers are not padded to the longest one beside them (the same numbers up to float rounding)"))
    recompute_logprobs: bool = Field(False, description=(
        "score the rollout's tokens with the learner's weights before the update and use those as the old "
        "log-probabilities of the ratio (for rollout engines whose numbers differ from the learner's: other "
        "kernels or precision, or a vLLM without processed logprobs); `rollout_logp_diff` reports the gap"))


class RayConfig(BaseModel):
    """The Ray placement: rollout workers as Ray actors (``placement: ray``)."""

    model_config = ConfigDict(extra="forbid")
    address: str | None = Field(None, description="'auto' or HOST:PORT joins a running cluster; "
                                "None starts a local one")
    rollout_workers: int = Field(2, ge=1)
    worker_cpus: float = Field(0.5, gt=0, description="CPUs reserved per worker (fractional on small machines); a "
                               "worker runs max(1, int(worker_cpus)) torch threads")
    num_cpus: float | None = Field(None, gt=0, description="CPUs of a local cluster (default: the machine's)")
    max_restarts: int = Field(2, ge=0, description="restarts of a worker that dies before the run fails")
    start_timeout: float = Field(120.0, gt=0, description="seconds a worker may take to start (load the model)")
    episode_timeout: float = Field(600.0, gt=0, description="seconds a worker may go without finishing an "
                                   "episode before it is restarted and its jobs re-run")
    connect_timeout: float = Field(30.0, gt=0, description="seconds to reach the cluster at `address`")
    rollout_backend: Literal["hf", "vllm"] = Field("hf", description="what generates in a worker: the policy in "
                                                   "transformers (CPU or GPU), or a vLLM engine (GPU; extra gpu)")
    worker_gpus: float = Field(0.0, ge=0, description="GPUs per rollout worker (fractional to share one GPU with "
                               "a learner rank)")
    vllm: dict[str, Any] = Field(default_factory=dict, description="vllm.LLM options of vLLM workers, e.g. "
                                 "{gpu_memory_utilization: 0.3, dtype: bfloat16, enforce_eager: true}")
    vllm_inflight_updates: bool = Field(True, description="vLLM workers take new weights while requests run "
                                        "(pause, load, resume: nothing is dropped, each token records the version "
                                        "that sampled it), where the installed vLLM can (>= 0.32); false: a load "
                                        "waits for the running generation call to finish")


class LearnerConfig(BaseModel):
    """Where the learner runs: in the driver's process (``torch``), or as a group of data-parallel DeepSpeed ranks
    on Ray (``deepspeed``; needs ``placement: ray`` and the ``deepspeed`` package)."""

    model_config = ConfigDict(extra="forbid")
    backend: Literal["torch", "deepspeed"] = "torch"
    ranks: int = Field(1, ge=1, description="data-parallel ranks (Ray actors), one DeepSpeed process group")
    zero_stage: int = Field(2, ge=0, le=3, description="ZeRO stage: 0 = plain data parallel, 1 optimizer states, "
                            "2 + gradients, 3 + parameters partitioned over the ranks")
    rank_cpus: float = Field(0.5, gt=0, description="CPUs reserved per rank; a rank runs max(1, int(rank_cpus)) "
                             "torch threads")
    rank_gpus: float = Field(0.0, ge=0, description="GPUs per rank (NCCL when > 0, gloo on CPU otherwise)")
    timeout: float = Field(600.0, gt=0, description="seconds any collective or any wait on a rank may take before "
                           "it is an error that names the rank and the operation")
    export_bucket_mb: float = Field(256.0, gt=0, description="weights are gathered and published in buckets of "
                                    "about this size, never all at once")
    start_timeout: float = Field(300.0, gt=0, description="seconds the ranks may take to start (load the model, "
                                 "build DeepSpeed's CPU ops the first time)")
    weight_sync: Literal["object_store", "nccl"] = Field(
        "object_store", description="how new weights reach the rollout workers: rank 0's CPU copy through Ray's "
        "object store (any backend), or NCCL broadcasts from rank 0 into one vLLM engine (GPU, "
        "ray.rollout_backend: vllm, ray.rollout_workers: 1)")
    lora: LoraConfig | None = Field(None, description="train low-rank adapters (peft) instead of the whole policy; "
                                    "checkpoints hold the adapters")

    @model_validator(mode="after")
    def _ranks_need_deepspeed(self) -> LearnerConfig:
        if self.backend == "torch" and self.ranks > 1:
            raise ValueError(f"learner.ranks={self.ranks} needs learner.backend=deepspeed (the torch learner is one "
                             "process)")
        return self


class DataConfig(BaseModel):
    """Stored training data, for algorithms whose experience source reads it: Trajectories (e.g. written by ``turnrl
    rollout``) or stored states."""

    model_config = ConfigDict(extra="forbid")
    path: str | list[str] = Field(description="JSONL or Parquet file(s) of token-exact Trajectories")
    batch_size: int = Field(32, ge=1, description="episodes per training step (whole tasks; dpo: whole pairs)")
    epochs: float | None = Field(None, gt=0, description="passes over the data; sets `steps` (leave steps unset); "
                                 "the run's config.yaml records the resulting steps")
    shuffle: bool = Field(True, description="reshuffle the units every epoch (seeded by `seed`)")


class ProgramConfig(BaseModel):
    """Train a user agent program through the OpenAI-compatible gateway instead of playing `env` natively: every
    episode is one run of the program on one of `env`'s tasks (the environment still poses the tasks and grades an
    answer the program returns)."""

    model_config = ConfigDict(extra="forbid")
    function: str | None = Field(None, description="'module:function' called as function(base_url, api_key, task) "
                                 "(the module is found on sys.path or in the current folder; --import works too)")
    command: str | list[str] | None = Field(None, description="a command run per episode with OPENAI_BASE_URL, "
                                            "OPENAI_API_KEY and TURNRL_TASK set; its last output line is the result")
    concurrency: int = Field(32, ge=1, description="episodes (program runs) at once; their calls share batches")
    timeout: float = Field(600.0, gt=0, description="seconds one program run may take; then its episode is left "
                           "out as an error (and its session refuses further calls)")
    model_name: str = Field("turnrl-policy", description="the model name the program asks for")
    host: str = Field("127.0.0.1", description="where the gateway listens (anything but a loopback address needs "
                      "api_key)")
    port: int = Field(0, ge=0, description="0 picks a free port")
    api_key: str | None = Field(None, description="the key programs must send (default: a random one per run)")
    mcp_tools: bool = Field(False, description="serve each episode's environment tools to the program as an MCP "
                            "server (streamable HTTP) at task['mcp_url'] (TURNRL_MCP_URL for a command); needs the "
                            "mcp extra")

    @model_validator(mode="after")
    def _one_program(self) -> ProgramConfig:
        if (self.function is None) == (self.command is None):
            raise ValueError("program: set exactly one of `function` ('module:function') or `command`")
        if self.host not in ("127.0.0.1", "localhost", "::1") and not self.api_key:
            raise ValueError(f"program.host={self.host!r} listens beyond this machine: set program.api_key (the key "
                             "your programs send), or keep 127.0.0.1")
        return self


class GuardConfig(BaseModel):
    """The consistency guard's settings (the guard itself: :mod:`turnrl.rl.run.guard`)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(True, description="check every training step's consistency (guard_* metrics, a warning "
                          "the first time each check fails)")
    logp_tolerance: float | None = Field(None, ge=0, description=(
        "the most mean |rollout − learner| log-probability gap, in nats, over the tokens sampled by the weights "
        "being updated; None: per rollout backend (HF agent 1e-3, vLLM 5e-2)"))
    logp_max_tolerance: float | None = Field(None, ge=0, description=(
        "the most gap on any one such token; None: per rollout backend (HF agent 5e-2; vLLM: not checked)"))
    strict: bool = Field(False, description="stop the run (after recording the step) when a check fails, instead "
                         "of warning")


class TrainConfig(BaseModel):
    """A training run (``turnrl train CONFIG.yaml``); unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")
    model: str = "smollm2-135m-instruct"
    init_from: str | None = Field(None, description=(
        "start from another run's policy: its OUT_DIR (or OUT_DIR/checkpoint.pt) of a run of the same `model`, e.g. "
        "an SFT run before RL; the reference model (KL, DPO, DQO) is this starting policy"))
    env: EnvConfig
    algorithm: SerializeAsAny[AlgorithmConfig] = Field(default_factory=lambda: parse_algorithm_config({}))
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    tasks: TaskConfig = Field(default_factory=SequentialTasks, description="which tasks an on-policy run trains on: "
                              "strategy sequential (default), uniform, difficulty, pre-ppo or curriculum")
    reward: RewardConfig | None = Field(None, description="how an on-policy run scores its episodes: rule "
                                        "verifiers where they apply, a generative judge elsewhere (default: each "
                                        "environment's own reward)")
    process_reward: ProcessRewardConfig | None = Field(None, description=(
        "dense rewards at the line ends of every reply from a process reward model (`turnrl prm train`), for "
        "algorithms with a critic"))
    optim: OptimConfig = Field(default_factory=OptimConfig)
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$", description=(
        "where this process's policy generates and trains: auto (a CUDA GPU when torch sees one and placement is "
        "local, else cpu), cpu, cuda or cuda:N. On placement ray the workers and DeepSpeed ranks take GPUs through "
        "`ray` and `learner` options; there auto keeps the driver's copy on cpu"))
    placement: Literal["local", "ray"] = Field("local", description="where rollouts run: in this process, or on "
                                               "Ray rollout workers (options under `ray`)")
    ray: RayConfig = Field(default_factory=RayConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    steps: int = Field(20, ge=1)
    seed: int = 0
    eval_every: int = Field(0, ge=0, description="0 = only before and after training")
    eval_tasks: int = Field(32, ge=1)
    checkpoint_every: int = Field(0, ge=0, description="0 = only at the end")
    out_dir: str = "runs/train"
    save_trajectories: bool = Field(True, description=(
        "write each step's episodes, with per-token advantages and learner log-probabilities, to "
        "OUT_DIR/train/step-N/trajectories.jsonl (turnrl view OUT_DIR shows them)"))
    wandb: WandbConfig | None = Field(None, description="also log to Weights & Biases (extra wandb)")
    data: DataConfig | None = Field(None, description="stored training data, for algorithms that train from it "
                                    "(offline objectives: epochs over stored Trajectories; step-wise ones: stored "
                                    "states)")
    program: ProgramConfig | None = Field(None, description="train a user agent program through the OpenAI-"
                                          "compatible gateway (its episodes instead of native rollouts of `env`)")
    guard: GuardConfig = Field(default_factory=GuardConfig, description="the consistency guard: each step checks "
                               "that it trains what the policy sampled (guard_* metrics; strict stops the run)")

    @field_validator("algorithm", mode="before")
    @classmethod
    def _algorithm(cls, value: Any) -> AlgorithmConfig:
        return parse_algorithm_config(value)

    @model_validator(mode="after")
    def _placement_options(self) -> TrainConfig:
        c = self.rollout.context
        if c is not None and c.budget > self.rollout.max_context:
            raise ValueError(f"rollout.context.budget ({c.budget}) is larger than rollout.max_context "
                             f"({self.rollout.max_context}): episodes would be cut by max_context before their "
                             "history is ever rewritten; lower the budget or raise max_context")
        if self.placement == "local" and "ray" in self.model_fields_set:
            raise ValueError("`ray` options are set but placement is 'local'; add placement=ray (or drop them)")
        if self.rollout.max_staleness > 0 and self.placement != "ray":
            raise ValueError(f"rollout.max_staleness={self.rollout.max_staleness} lets rollouts of the next step run "
                             "while the learner updates, which needs rollout workers: add placement=ray (on "
                             "placement local every token is sampled by the weights being updated: use 0)")
        if self.rollout.continuous_batching and self.placement != "local":
            raise ValueError("rollout.continuous_batching runs on the local placement's HF agent; Ray workers decode "
                             "in rounds (a weight load falls between two generation calls): drop it or use "
                             "placement=local")
        if self.rollout.max_staleness > 0 and self.learner.weight_sync == "nccl":
            raise ValueError("rollout.max_staleness > 0 pushes weights to workers while they generate, which the NCCL "
                             "weight transfer does not do yet: use learner.weight_sync=object_store or max_staleness=0")
        if self.program is not None and self.placement != "local":
            raise ValueError("`program` runs the agent program against a gateway in the trainer's process: use "
                             "placement=local")
        if self.program is not None and self.rollout.max_staleness > 0:
            raise ValueError("`program` episodes are played while nothing updates the policy: use "
                             "rollout.max_staleness=0")
        if self.learner.lora is not None and self.learner.weight_sync == "nccl":
            raise ValueError("learner.lora sends rollout workers the adapters alone, through the object store: use "
                             "learner.weight_sync=object_store (the NCCL transfer streams whole models)")
        if self.learner.backend == "deepspeed" and self.placement != "ray":
            raise ValueError("learner.backend=deepspeed runs its ranks as Ray actors: add placement=ray")
        if self.learner.weight_sync == "nccl" and (self.learner.backend != "deepspeed" or self.ray.rollout_backend
                                                    != "vllm" or self.ray.rollout_workers != 1):
            raise ValueError("learner.weight_sync=nccl streams from a DeepSpeed rank into one vLLM engine: it needs "
                             "learner.backend=deepspeed, ray.rollout_backend=vllm and ray.rollout_workers=1")
        return self

    @model_validator(mode="after")
    def _algorithm_checks(self) -> TrainConfig:
        from turnrl.rl.algorithms import algorithm_class
        from turnrl.rl.algorithms.base import Algorithm

        cls = algorithm_class(self.algorithm.name)
        cls.check_config(self)  # its own checks and its experience source's
        check_guard(self, cls.source_class().sampled)
        if self.rollout.top_p < 1 and cls.source_class().sampled and not self.optim.recompute_logprobs:
            raise ValueError(f"rollout.top_p={self.rollout.top_p} samples from the nucleus, renormalized, so the "
                             "sampler's log-probabilities (μ) are not the policy's and a ratio over them is off from "
                             "the first step: set optim.recompute_logprobs=true (the learner's π_old in the ratio; "
                             "algorithm.behaviour_is_cap then weighs by π_old/μ), or rollout.top_p=1")
        if self.process_reward is not None and cls.critic is Algorithm.critic:
            raise ValueError(f"process_reward puts rewards on the line ends inside a reply, which only an algorithm "
                             f"with a critic credits token by token; {self.algorithm.name!r} has none: use ppo or "
                             "vapo")
        if self.rollout.context is not None and (cls.source != Algorithm.source or self.placement != "local"):
            raise ValueError("rollout.context (history rewriting) runs in the on-policy source's local rollouts: use "
                             "placement=local and an algorithm that samples whole episodes (grpo, dapo, rloo, "
                             "reinforce, ppo, vapo)")
        if self.rollout.context is not None and self.program is not None:
            raise ValueError("rollout.context rewrites turnrl's own environments' histories; a `program` manages its "
                             "own history (the gateway records its rewrites as segments): drop one")
        if self.program is not None:
            if cls.source != Algorithm.source:  # the on-policy source (its runner plays the program)
                raise ValueError(f"algorithm {self.algorithm.name!r} does not sample whole episodes on-policy, which "
                                 "is what a `program` gives; pick grpo, dapo, rloo, reinforce, ppo or vapo")
            if cls.rollout_hook is not Algorithm.rollout_hook:
                raise ValueError(f"algorithm {self.algorithm.name!r} rewrites turns while they are sampled, which "
                                 "cannot be done to a program's calls")
        return self


def parse_overrides(overrides: list[str] | None) -> list[tuple[list[str], Any, str]]:
    """``key.sub=value`` items as ``(["key", "sub"], value read as YAML, the item)``.

    Raises:
        ValueError: an item without ``=``.
    """
    out = []
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"override must be key.sub=value, got {item!r}")
        out.append((key.strip().split("."), yaml.safe_load(value), item))
    return out


def load_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Load a YAML config and apply dotted ``key.sub=value`` overrides (values read as YAML).

    Raises:
        pydantic.ValidationError: the config does not validate (:func:`config_error` says it in one line).
    """
    data = yaml.safe_load(Path(path).read_text()) or {}
    for (*parents, leaf), value, item in parse_overrides(overrides):
        node = data
        for n, p in enumerate(parents):
            node = node.setdefault(p, {})
            if not isinstance(node, dict):  # e.g. rollout.temperature.x=1: temperature is a value, not a section
                raise ValueError(f"override {item}: {'.'.join(parents[: n + 1])} is a value ({node!r}), not a "
                                 "section with keys")
        node[leaf] = value
    return TrainConfig.model_validate(data)


def config_error(e: Exception, path: str | Path, overrides: list[str] | None = None) -> str:
    """What :func:`load_config` raised, on one line that says where: each problem of a command-line override as
    ``override KEY=VALUE: …``, the others as ``PATH: field.path: …``; an unknown key with the keys that section
    takes ("did you mean" for a near miss)."""
    from pydantic import ValidationError

    if not isinstance(e, ValidationError):
        text = str(e) if isinstance(e, (OSError, ValueError, yaml.YAMLError)) else f"{type(e).__name__}: {e}"
        return text if text.startswith("override ") else f"{path}: {text}"
    try:
        parsed = parse_overrides(overrides)
        file_data = yaml.safe_load(Path(path).read_text()) or {}
    except Exception:  # noqa: BLE001 — the problem is the one to report
        parsed, file_data = [], {}
    parts = []
    for err in e.errors():
        loc = tuple(str(x) for x in err["loc"])
        value = err.get("input")
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = _unknown_key(loc)
        elif err["type"] != "missing" and isinstance(value, (str, int, float, bool)):
            msg += f" (got {value!r})"
        item = _override_of(loc, parsed, file_data)
        if item is not None:
            shown = "" if loc == tuple(item.partition("=")[0].strip().split(".")) else f"{'.'.join(loc)}: "
            parts.append(f"override {item}: {shown}{msg}")
        elif loc:
            parts.append(f"{path}: {'.'.join(loc)}: {msg}")
        else:
            with_ = f" (with {', '.join(o for *_, o in parsed)})" if parsed else ""
            parts.append(f"{path}{with_}: {msg}")
    return "; ".join(parts)


def _override_of(loc: tuple[str, ...], parsed: list[tuple[list[str], Any, str]], file_data: Any) -> str | None:
    """The override that set ``loc`` (or a section around it, or a value inside it), or that made the section in
    which a required field is missing; None: the file's."""
    for keys, _, item in reversed(parsed):  # the last override of a key wins
        n = min(len(keys), len(loc))
        if n and tuple(keys[:n]) == loc[:n]:
            return item
    node = file_data
    for part in loc[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if loc[:-1] and node is None:  # the file has no such section: an override made it
        for keys, _, item in parsed:
            if tuple(keys[: len(loc) - 1]) == loc[:-1]:
                return item
    return None


def _unknown_key(loc: tuple[str, ...]) -> str:
    """'unknown key 'x'; did you mean 'y'?' (or the keys the section takes)."""
    from difflib import get_close_matches
    from typing import get_args

    cls: Any = TrainConfig
    for part in loc[:-1]:
        field = cls.model_fields.get(part) if cls is not None else None
        kinds = [field.annotation, *get_args(field.annotation)] if field is not None else []
        cls = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
    if cls is None:
        return f"unknown key {loc[-1]!r}"
    names = list(cls.model_fields)
    close = get_close_matches(loc[-1], names, n=1, cutoff=0.6)
    section = ".".join(loc[:-1]) or "the top level"
    if close:
        return f"unknown key {loc[-1]!r}; did you mean {close[0]!r}?"
    return f"unknown key {loc[-1]!r}; {section} takes: {', '.join(names)}"


def check_guard(cfg: TrainConfig, sampled: bool) -> None:
    """Raise ValueError where a strict guard cannot do its work (``sampled``: the source's episodes are the policy's
    own samples, with their log-probabilities)."""
    g = cfg.guard
    if g.strict and not g.enabled:
        raise ValueError("guard.strict stops the run when a check fails, but guard.enabled is false: drop one")
    if g.strict and not sampled:
        raise ValueError(f"guard.strict compares the policy's own samples with the learner's scores, and algorithm "
                         f"{cfg.algorithm.name!r} trains from stored data whose log-probabilities are not this run's "
                         "policy's: drop guard.strict (the guard's other checks still run)")
