"""The quickstart demo: scripted agents play a few episodes; transcripts and rewards are printed.

No model is involved yet: the agents are short scripts, so the demo shows what an environment asks, how tools
answer, and how each turn is rewarded. Returns a non-zero exit code if an episode did not go as scripted.
"""

from __future__ import annotations

import os

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
    expr = env.task.metadata["expression"]  # type: ignore[attr-defined]
    return f"Let me compute {expr}. <calculator>{expr}</calculator>"


def self_correcting_agent(conversation: list[Message], env: turnrl.envs.TextEnv) -> str:
    """Answers wrong first, then judges its answer wrong, then gives the right one (a PAG episode)."""
    phase = env.phase  # type: ignore[attr-defined]
    answer = env.task.answer  # type: ignore[union-attr]
    if phase == "answer":
        return f"Quick guess: \\boxed{{{int(answer) + 1}}}."
    if phase == "verify":
        return f"I added one too many at the end, so the guess {int(answer) + 1} is off. The answer is wrong"
    return f"Redoing it carefully gives \\boxed{{{answer}}}."


def oracle_agent(conversation: list[Message], env: turnrl.envs.TextEnv) -> str:
    """Gives the environment's reference answer."""
    return env.oracle_action() or ""


def run(console: Console, model: str | None = "smollm2-135m-instruct", limit: int = 16) -> int:
    """Play the demo episodes, then (with ``model``) evaluate the model; return 0 if everything went as expected."""
    failures = run_scripted(console)
    if model is None:
        return int(failures > 0)
    from turnrl.agents import SamplingParams, make_agent
    from turnrl.rl.evaluate import evaluate

    console.rule(f"Evaluating {model} on turnrl/Arithmetic-v0 (level 1, {limit} held-out problems, greedy)")
    agent = make_agent(model, batch_size=limit)
    out = "runs/quickstart"
    metrics = evaluate(agent, "turnrl/Arithmetic-v0", env_kwargs={"level": 1, "split": "test"}, limit=limit,
                       params=SamplingParams(temperature=0.0, max_new_tokens=96), out=out)
    console.print(open(f"{out}/report.md").read(), markup=False, highlight=False)
    console.print(f"[bold]accuracy {metrics['accuracy']:.3f}[/], {metrics['generated_tokens_per_second']:.1f} "
                  f"generated tokens/s; report, items, trajectories and plot in {out}/")
    failures += metrics["errors"] > 0
    return int(failures > 0)


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
        console.print(f"[yellow]GSM8K skipped: set {DATA_ENV_VAR} to a folder with gsm8k/test.jsonl "
                      "(e.g. ../shared/data) to include it.[/]")
    else:
        traj = play_episode(env, oracle_agent, seed=0)
        _show(console, f"GSM8K-v0 from {os.environ.get(DATA_ENV_VAR)}: the oracle agent", traj)
        failures += traj.total_reward != 1.0

    console.print("[bold green]scripted episodes OK[/]" if not failures else f"[bold red]{failures} demo episode(s) failed[/]")
    return failures
