"""The local trainer: agent and learner share one model object in one process (CPU or one GPU).

Each step: pick ``prompts_per_step`` training tasks (a data cursor walks the env's task indices) → roll out
``group_size`` episodes per task with the current weights (the HF agent holds the very model being trained) →
rewards → advantages → ``epochs`` passes of minibatch updates with gradient accumulation → metrics (JSONL and
TensorBoard) → periodic held-out evaluation → checkpoint. A killed run resumes from its last checkpoint and
continues exactly like an uninterrupted one (model, optimizer, scheduler, RNG, cursor, metrics history).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field

from turnrl.agents.base import SamplingParams
from turnrl.agents.hf import HFAgent
from turnrl.envs.registry import make
from turnrl.rl.algorithms import (
    AlgorithmConfig,
    critic_advantages,
    group_advantages,
    policy_loss,
    sequence_rewards,
    zero_variance_groups,
)
from turnrl.rl.batch import Batch, collate
from turnrl.rl.critic import SeparateCritic, ValueHead
from turnrl.rl.forward import forward_tokens, token_logprobs
from turnrl.rl.losses import clipped_value_loss, masked_nll
from turnrl.rl.monitors import check_health
from turnrl.rl.rollout import Rollout
from turnrl.rl.tracking import Tracker, WandbConfig

logger = logging.getLogger(__name__)


class EnvConfig(BaseModel):
    """Training and held-out environments."""

    model_config = ConfigDict(extra="forbid")
    id: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    eval_kwargs: dict[str, Any] | None = Field(None, description="overrides for the held-out env (e.g. split: test)")


class RolloutConfig(BaseModel):
    """Sampling during training."""

    model_config = ConfigDict(extra="forbid")
    prompts_per_step: int = Field(4, ge=1)
    group_size: int = Field(8, ge=2)
    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_context: int = Field(2048, ge=16)


class OptimConfig(BaseModel):
    """AdamW with linear warm-up, gradient clipping and accumulation."""

    model_config = ConfigDict(extra="forbid")
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    warmup_steps: int = Field(0, ge=0)
    epochs: int = Field(1, ge=1)
    minibatch_size: int = Field(8, ge=1)
    grad_accum: int = Field(1, ge=1)
    share_prompts: bool = Field(True, description="run a group's common prompt once per forward/backward pass")


class TrainConfig(BaseModel):
    """A training run (``turnrl train CONFIG.yaml``); unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")
    model: str = "smollm2-135m-instruct"
    env: EnvConfig
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    steps: int = Field(20, ge=1)
    seed: int = 0
    eval_every: int = Field(0, ge=0, description="0 = only before and after training")
    eval_tasks: int = Field(32, ge=1)
    checkpoint_every: int = Field(0, ge=0, description="0 = only at the end")
    out_dir: str = "runs/train"
    wandb: WandbConfig | None = Field(None, description="also log to Weights & Biases (extra wandb)")


def load_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Load a YAML config and apply dotted ``key.sub=value`` overrides (values read as YAML)."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"override must be key.sub=value, got {item!r}")
        node = data
        *parents, leaf = key.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = yaml.safe_load(value)
    return TrainConfig.model_validate(data)


class Trainer:
    """Train a policy on an environment with GRPO, DAPO, PPO or VAPO (see the module docstring)."""

    def __init__(self, config: TrainConfig, *, model: Any = None, tokenizer: Any = None) -> None:
        self.cfg = config
        if model is None:
            from turnrl.agents import make_agent

            agent = make_agent(config.model, batch_size=config.rollout.prompts_per_step * config.rollout.group_size)
            model, tokenizer = agent.model, agent.tokenizer
        self.model, self.tokenizer = model, tokenizer
        self.agent = HFAgent(model, tokenizer, batch_size=config.rollout.prompts_per_step * config.rollout.group_size)
        self.ref_model = None
        if config.algorithm.kl_coef > 0:
            import copy

            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        groups: list[dict[str, Any]] = [{"params": list(model.parameters()), "lr": config.optim.lr}]
        self.value_head: ValueHead | None = None
        self.critic: SeparateCritic | None = None
        if config.algorithm.uses_critic:
            if config.algorithm.critic_model:
                from turnrl.agents import make_agent

                self.critic = SeparateCritic(make_agent(config.algorithm.critic_model, batch_size=1).model, len(tokenizer))
            else:
                self.value_head = ValueHead(model.config.hidden_size)
            groups.append({"params": list((self.critic or self.value_head).parameters()),
                           "lr": config.algorithm.critic_lr or 2 * config.optim.lr, "weight_decay": 0.0})
        # The fused kernel is ~9x faster than the per-tensor loop on CPU (0.09 s vs 0.78 s per SmolLM2 step).
        fused = all(p.device.type in ("cpu", "cuda") and p.dtype.is_floating_point for g in groups for p in g["params"])
        self.optimizer = torch.optim.AdamW(groups, lr=config.optim.lr, weight_decay=config.optim.weight_decay,
                                           fused=fused or None)
        warm = config.optim.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        self.step, self.cursor, self.history = 0, 0, []
        self.out = Path(config.out_dir)
        self.n_tasks = len(make(config.env.id, **config.env.kwargs))

    # ---- one step ----

    def _rollout(self, first_task: int, n_prompts: int, round_: int):  # noqa: ANN202
        r = self.cfg.rollout
        tasks = [(first_task + k) % self.n_tasks for k in range(n_prompts)]
        envs = [make(self.cfg.env.id, **self.cfg.env.kwargs) for _ in range(n_prompts * r.group_size)]
        params = SamplingParams(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens,
                                seed=self.cfg.seed * 1_000_003 + self.step * 101 + round_)
        rollout = Rollout(self.agent, params, max_context=r.max_context)
        jobs = [t for t in tasks for _ in range(r.group_size)]
        trajs = rollout.run(envs, seeds=[self.cfg.seed + t for t in jobs], options=[{"index": t} for t in jobs],
                            group_ids=[f"{self.step}-{round_}-{t}" for t in jobs])
        return trajs, rollout.stats

    def collect(self) -> tuple[list[Any], dict[str, float]]:
        """Roll out this step's groups (with DAPO's dynamic sampling: keep groups with reward variance)."""
        r, algo = self.cfg.rollout, self.cfg.algorithm
        kept, seen, gen_tokens, gen_s = [], [], 0, 0.0
        for round_ in range(algo.max_resample if algo.dynamic else 1):
            trajs, stats = self._rollout(self.cursor, r.prompts_per_step, round_)
            self.cursor = (self.cursor + r.prompts_per_step) % self.n_tasks
            gen_tokens, gen_s = gen_tokens + stats.generated_tokens, gen_s + stats.generate_s
            seen += trajs
            if not algo.dynamic:
                kept = trajs
                break
            batch = collate(trajs, self.tokenizer.pad_token_id)
            zero = zero_variance_groups(sequence_rewards(batch, algo, r.max_new_tokens), batch.group_ids)
            kept += [t for t, z in zip(trajs, zero.tolist()) if not z]
            if len(kept) >= r.prompts_per_step * r.group_size:
                kept = kept[: r.prompts_per_step * r.group_size]
                break
        rewards = torch.tensor([t.total_reward for t in seen])
        info = {"generated_tokens": float(gen_tokens), "generate_s": gen_s, "rollout_episodes": float(len(seen)),
                "reward_mean": float(rewards.mean()), "reward_std": float(rewards.std(correction=0)),
                "success": sum(bool(t.correct) for t in seen) / len(seen),
                "rewarded_incorrect": sum(t.total_reward > 0 and t.correct is False for t in seen) / len(seen),
                "turns": sum(t.num_turns for t in seen) / len(seen),
                "tool_calls": sum(len(turn.info.get("tool_calls") or []) for t in seen for turn in t.turns) / len(seen)}
        return kept, info

    def update(self, trajs: list[Any]) -> dict[str, float]:
        """Advantages and ``epochs`` of minibatch updates on the collected trajectories."""
        cfg, o = self.cfg, self.cfg.optim
        if not trajs:
            return {"skipped": 1.0}
        batch = collate(trajs, self.tokenizer.pad_token_id)
        scores = sequence_rewards(batch, cfg.algorithm, cfg.rollout.max_new_tokens)
        old_values = returns = None
        if cfg.algorithm.uses_critic:
            with torch.no_grad():
                hidden = None
                if self.value_head is not None:
                    hidden = forward_tokens(self.model, batch.input_ids, batch.attention_mask, hidden=True,
                                            loss_mask=batch.loss_mask, share_prefix=o.share_prompts)[2]
                old_values = self._values(batch, hidden) * batch.loss_mask
            adv, returns = critic_advantages(batch, old_values, cfg.algorithm)
        else:
            adv = group_advantages(batch, scores)
        policy_on = self.step >= cfg.algorithm.warmup  # VAPO's value pretraining: the critic learns first
        ref_logp = self._ref_logp(batch)
        sums: dict[str, float] = {}
        count = 0
        self.model.train()
        if self.critic is not None:
            self.critic.train()
        for _ in range(o.epochs):
            order = torch.arange(len(batch))
            chunks = [order[i : i + o.minibatch_size] for i in range(0, len(batch), o.minibatch_size)]
            for k, idx in enumerate(chunks):
                mb = batch.select(idx)
                logp, entropy, hidden = forward_tokens(self.model, mb.input_ids, mb.attention_mask,
                                                       cfg.rollout.temperature, hidden=self.value_head is not None,
                                                       loss_mask=mb.loss_mask, share_prefix=o.share_prompts)
                loss, metrics = policy_loss(logp, mb, adv[idx], cfg.algorithm,
                                            ref_logp[idx] if ref_logp is not None else None)
                if not policy_on:
                    loss = loss * 0.0
                if policy_on and cfg.algorithm.mu > 0:  # VAPO: imitate the correct samples
                    nll = masked_nll(logp, mb.loss_mask * mb.correct[:, None], cfg.algorithm.aggregation)
                    loss = loss + cfg.algorithm.mu * nll
                    metrics["nll"] = nll.detach()
                if cfg.algorithm.uses_critic:
                    values = self._values(mb, hidden)
                    vloss, vmetrics = clipped_value_loss(values, old_values[idx], returns[idx], mb.loss_mask,
                                                         cfg.algorithm.eps_value, cfg.algorithm.aggregation)
                    loss = loss + cfg.algorithm.vf_coef * vloss
                    metrics.update(vmetrics, value_loss=vloss.detach())
                (loss / o.grad_accum).backward()
                if (k + 1) % o.grad_accum == 0 or k + 1 == len(chunks):
                    params = [p for g in self.optimizer.param_groups for p in g["params"]]
                    grad_norm = torch.nn.utils.clip_grad_norm_(params, o.grad_clip)
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
                    sums["grad_norm"] = sums.get("grad_norm", 0.0) + float(grad_norm)
                m = mb.loss_mask
                metrics["entropy"] = (entropy.detach() * m).sum() / m.sum().clamp(min=1)
                metrics["loss"] = loss.detach()
                for key, v in metrics.items():
                    sums[key] = sums.get(key, 0.0) + float(v)
                count += 1
        self.scheduler.step()
        self.model.eval()
        out = {k: v / count for k, v in sums.items()}
        out["response_length"] = float(batch.response_lengths.mean())
        out["train_tokens"] = float(batch.attention_mask.sum())
        out["zero_variance_groups"] = float(zero_variance_groups(scores, batch.group_ids).float().mean())
        return out

    def _values(self, batch: Batch, policy_hidden: torch.Tensor | None) -> torch.Tensor:
        """``V(s_t)`` per position from the separate critic, or from the value head on the policy's features."""
        if self.critic is not None:
            return self.critic(batch.input_ids, batch.attention_mask)
        assert self.value_head is not None and policy_hidden is not None
        return self.value_head(policy_hidden)

    def _ref_logp(self, batch: Batch) -> torch.Tensor | None:
        if self.ref_model is None:
            return None
        with torch.no_grad():
            return token_logprobs(self.ref_model, batch.input_ids, batch.attention_mask, self.cfg.rollout.temperature,
                                  loss_mask=batch.loss_mask, share_prefix=self.cfg.optim.share_prompts)[0]

    def evaluate(self, out: str | Path | None = None) -> float:
        """Greedy success rate on the first ``eval_tasks`` tasks of the held-out env (report, items and
        trajectories in ``out`` when given; :meth:`train` uses ``OUT_DIR/eval/step-N``)."""
        from turnrl.rl.evaluate import evaluate

        kwargs = {**self.cfg.env.kwargs, **(self.cfg.env.eval_kwargs or {})}
        m = evaluate(self.agent, self.cfg.env.id, env_kwargs=kwargs, limit=self.cfg.eval_tasks, seed=self.cfg.seed,
                     params=SamplingParams(temperature=0.0, max_new_tokens=self.cfg.rollout.max_new_tokens),
                     batch_episodes=64, max_context=self.cfg.rollout.max_context, out=out)
        return m["accuracy"]

    # ---- the loop ----

    def train(self, *, stop_after: int | None = None,
              on_step: Callable[[dict[str, float]], None] | None = None) -> list[dict[str, float]]:
        """Run until ``cfg.steps`` (or ``stop_after`` more steps, to simulate an interruption); return the history.

        ``on_step`` is called with each step's metrics (after the held-out evaluation, if any, ran), and with the
        step-0 evaluation's record when the run starts fresh.
        """
        self.out.mkdir(parents=True, exist_ok=True)
        tracker = Tracker(self.out, self.cfg.wandb, self.cfg.model_dump())
        if self.step == 0 and not self.history:
            self.history.append({"step": 0.0, "eval_success": self.evaluate(self.out / "eval" / "step-0")})
            with (self.out / "metrics.jsonl").open("w") as f:
                f.write(json.dumps(self.history[0]) + "\n")
            tracker.log(self.history[0], 0)
            if on_step is not None:
                on_step(self.history[0])
        end = self.cfg.steps if stop_after is None else min(self.cfg.steps, self.step + stop_after)
        while self.step < end:
            t0 = time.perf_counter()
            trajs, info = self.collect()
            info.update(self.update(trajs))
            self.step += 1
            info["step"] = float(self.step)
            info["seconds"] = time.perf_counter() - t0
            info["tokens_per_s"] = info["generated_tokens"] / max(info["seconds"], 1e-9)
            info["train_tokens_per_s"] = info.get("train_tokens", 0.0) / max(info["seconds"], 1e-9)
            info["lr"] = self.scheduler.get_last_lr()[0]
            evaluate_now = self.step == self.cfg.steps or (self.cfg.eval_every and self.step % self.cfg.eval_every == 0)
            if evaluate_now:
                info["eval_success"] = self.evaluate(self.out / "eval" / f"step-{self.step}")
            warnings = check_health(self.history, info, self.cfg.rollout.max_new_tokens)
            for w in warnings:
                logger.warning("step %d: %s", self.step, w)
            info["warnings"] = float(len(warnings))
            self.history.append(info)
            with (self.out / "metrics.jsonl").open("a") as f:
                f.write(json.dumps(info) + "\n")
            tracker.log(info, self.step)
            if on_step is not None:
                on_step(info)
            if self.step == self.cfg.steps or (self.cfg.checkpoint_every and self.step % self.cfg.checkpoint_every == 0):
                self.save(self.out / "checkpoint.pt")
        tracker.close()
        return self.history

    # ---- checkpoints ----

    def save(self, path: str | Path) -> None:
        """Everything needed to continue exactly: weights, optimizer, scheduler, RNG, cursor, history."""
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "value_head": self.value_head.state_dict() if self.value_head is not None else None,
                    "critic": self.critic.state_dict() if self.critic is not None else None,
                    "scheduler": self.scheduler.state_dict(), "rng": torch.get_rng_state(), "step": self.step,
                    "cursor": self.cursor, "history": self.history, "config": self.cfg.model_dump()}, path)

    def load(self, path: str | Path) -> None:
        """Resume from :meth:`save`'s file."""
        state = torch.load(path, weights_only=False)
        self.model.load_state_dict(state["model"])
        if self.value_head is not None:
            self.value_head.load_state_dict(state["value_head"])
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        self.step, self.cursor, self.history = state["step"], state["cursor"], state["history"]


__all__ = ["Trainer", "TrainConfig", "load_config"]
