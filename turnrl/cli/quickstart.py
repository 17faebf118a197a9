"""The quickstart demo: scripted agents play a few episodes (transcripts and per-turn rewards printed), then a
real model (SmolLM2-135M-Instruct by default) is trained briefly with GRPO and its held-out success is shown
before and after. Returns a non-zero exit code if an episode did not go as scripted.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel

import turnrl
from turnrl.envs.data import DATA_ENV_VAR, DataNotFoundError
from turnrl.episode import play_episode
from turnrl.types import Message, Trajectory


def _show(console: Console, title: str, traj: Trajectory) -> None:
    lines = []
    for m in traj.prompt:
        lines.append(f"[bold magenta]\\[{m.role}][/] {_esc(m.content)}")
    for turn in traj.turns:
        lines.append(f"[bold cyan]\\[assistant · {turn.role}][/] {_esc(turn.action.content)}")
        lines.append(f"    [green]→ reward {turn.reward:g}[/]  correct={turn.info.get('correct')}")
        for m in turn.observation:
            who = m.role if m.name is None else f"{m.role}:{m.name}"
            lines.append(f"[bold magenta]\\[{who}][/] {_esc(m.content)}")
    end = "terminated" if traj.terminated else "truncated" if traj.truncated else f"error: {traj.error}"
    lines.append(f"[bold]total reward {traj.total_reward:g}[/] over {traj.num_turns} turn(s), {end}")
    console.print(Panel("\n".join(lines), title=title, expand=False))


def _esc(text: str) -> str:
    return text.replace("[", "\\[")


def calculator_agent(conversation: list[Message], env: turnrl.envs.TextEnv) -> str:
    """Calls the calculator on the task's expression, then answers with the tool's result."""
    last = conversation[-1]
    if last.role == "tool":
        return f"The calculator says {last.content}, so the answer is \\boxed{{{last.content}}}."
    expr = env.task.metadata["expression"]
    return f"Let me compute {expr}. <calculator>{expr}</calculator>"


def self_correcting_agent(conversation: list[Message], env: turnrl.envs.TextEnv) -> str:
    """Answers wrong first, then judges its answer wrong, then gives the right one (a PAG episode)."""
    phase = env.phase
    answer = env.task.answer
    if phase == "answer":
        return f"Quick guess: \\boxed{{{int(answer) + 1}}}."
    if phase == "verify":
        return f"I added one too many at the end, so the guess {int(answer) + 1} is off. The answer is wrong"
    return f"Redoing it carefully gives \\boxed{{{answer}}}."


def oracle_agent(conversation: list[Message], env: turnrl.envs.TextEnv) -> str:
    """Gives the environment's reference answer."""
    return env.oracle_action() or ""


# The quickstart's training run (embedded so the installed package needs no files; configs/quickstart.yaml holds
# the same run, kept equal by a test). Level-1 sums with the calculator offered; the lenient answer format, since
# the base model rarely boxes its answers (with the strict one every group has zero reward variance).
QUICKSTART: dict[str, Any] = {
    "model": "smollm2-135m-instruct",
    "env": {
        "id": "turnrl/Arithmetic-v0",
        "kwargs": {
            "level": 1,
            "split": "train",
            "answer_format": "auto",
            "calculator": True,
            "tool_style": "tags",
            "max_turns": 2,
        },
        "eval_kwargs": {"split": "test"},
    },
    "algorithm": {"name": "grpo"},
    "rollout": {"prompts_per_step": 4, "group_size": 8, "max_new_tokens": 48, "temperature": 0.8},
    "optim": {"lr": 2.0e-5, "minibatch_size": 8, "grad_accum": 4},
    "steps": 10,
    "eval_tasks": 102,
    "out_dir": "runs/quickstart",
}


def run(
    console: Console,
    model: str | None = QUICKSTART["model"],
    steps: int = QUICKSTART["steps"],
    eval_tasks: int = QUICKSTART["eval_tasks"],
    out_dir: str = QUICKSTART["out_dir"],
) -> int:
    """Play the demo episodes, then (with ``model``) train it briefly; return 0 if everything went as expected."""
    failures = run_scripted(console)
    if model is None:
        return int(failures > 0)
    train_demo(console, model, steps, eval_tasks, out_dir)
    return int(failures > 0)


def train_demo(console: Console, model: str, steps: int, eval_tasks: int, out_dir: str) -> None:
    """A short GRPO run of :data:`QUICKSTART`; prints held-out success before and after and sample answers."""
    from turnrl.rl.run.curves import plot_run
    from turnrl.rl.run.trainer import TrainConfig, Trainer

    cfg = TrainConfig.model_validate(
        {**QUICKSTART, "model": model, "steps": steps, "eval_tasks": eval_tasks, "out_dir": out_dir}
    )
    r = cfg.rollout
    console.rule(
        f"Training {model} with GRPO on turnrl/Arithmetic-v0 (level 1, calculator offered): {steps} steps "
        f"of {r.prompts_per_step} problems x {r.group_size} samples"
    )
    t0 = time.perf_counter()
    trainer = Trainer(cfg)

    def show(h: dict[str, float]) -> None:
        if h["step"] == 0:
            console.print(f"held-out success before training: [bold]{h['eval_success']:.1%}[/] ({_spread(h)}, greedy)")
            return
        held_out = f", held-out {h['eval_success']:.1%}" if "eval_success" in h else ""
        console.print(
            f"step {int(h['step'])}/{steps}: reward {h['reward_mean']:.2f}, success {h['success']:.1%} "
            f"of {int(h['rollout_episodes'])} samples, {h['response_length']:.0f} tokens/answer, "
            f"{h['seconds']:.1f} s{held_out}"
        )

    from turnrl.cli.shared import fail
    from turnrl.rl.run.monitors import EpisodeFailures

    try:
        history = trainer.train(on_step=show)
    except EpisodeFailures as e:  # nothing to train on: say why, in one line
        fail(str(e))
    finally:
        trainer.close()
    before, after = history[0]["eval_success"], history[-1]["eval_success"]
    out = Path(out_dir)
    plot_run(out)
    for label, step in (("before", 0), ("after", steps)):
        items = [json.loads(x) for x in (out / "eval" / f"step-{step}" / "items.jsonl").read_text().splitlines()]
        console.print(f"[dim]{label}:[/dim] " + " | ".join(_esc(repr(_reply(i))) for i in items[:3]), soft_wrap=True)
    from turnrl.cli.compare import gain_line

    console.print(
        Panel(
            f"held-out success {before:.1%} -> {after:.1%} after {steps} GRPO steps in "
            f"{time.perf_counter() - t0:.0f} s ({_spread(history[-1])})\n{gain_line(out_dir, steps)}\n"
            f"run folder {out}/: metrics.jsonl, curves.png, eval/step-*/report.md, checkpoint.pt, tb/",
            expand=False,
        )
    )


def _spread(h: dict[str, float]) -> str:
    """How many distinct test problems an evaluation read, and its 95 % interval."""
    if "eval_success_low" not in h:
        return "held-out test problems"
    return (
        f"{h['eval_items']:.0f} distinct test problems, 95 % interval {h['eval_success_low']:.1%}–"
        f"{h['eval_success_high']:.1%}"
    )


def _reply(item: dict[str, Any]) -> str:
    """The last reply of an evaluated episode."""
    return (item.get("final_response") or "")[-100:]


def run_scripted(console: Console) -> int:
    """Play the scripted demo episodes; return the number that did not go as scripted."""
    failures = 0

    env = turnrl.make("turnrl/Arithmetic-v0", level=5, calculator=True, tool_style="tags")
    traj = play_episode(env, calculator_agent, seed=7)
    _show(console, "Arithmetic-v0 (level 5, calculator tool): a scripted tool-using agent", traj)
    failures += traj.total_reward != 1.0

    env = turnrl.make("turnrl/Arithmetic-PAG-v0", level=4)
    traj = play_episode(env, self_correcting_agent, seed=3)
    _show(console, "Arithmetic-PAG-v0: answer → self-verify → revise (rewards 0, 1, 2)", traj)
    failures += [t.reward for t in traj.turns] != [0.0, 1.0, 2.0]

    try:
        env = turnrl.make("turnrl/GSM8K-v0")
    except DataNotFoundError:
        console.print(
            f"[yellow]GSM8K skipped: set {DATA_ENV_VAR} to a folder with gsm8k/test.jsonl "
            "to include it (docs/environments.md, 'Where the data comes from').[/]"
        )
    else:
        traj = play_episode(env, oracle_agent, seed=0)
        _show(console, f"GSM8K-v0 from {os.environ.get(DATA_ENV_VAR)}: the oracle agent", traj)
        failures += traj.total_reward != 1.0

    console.print(
        "[bold green]scripted episodes OK[/]" if not failures else f"[bold red]{failures} demo episode(s) failed[/]"
    )
    return failures
