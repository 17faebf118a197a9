"""The ``turnrl`` command: list, check and play environments; the quickstart demo."""

from __future__ import annotations

import functools
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from rich.console import Console
from rich.table import Table

from turnrl.envs.registry import (
    EnvImportError,
    InvalidEnvKwargs,
    UnknownEnvironmentError,
    entry_point_problems,
    error_location,
    import_env_module,
    make,
    registered,
    resolve,
    source_of,
)

app = typer.Typer(help="turnrl: RL for multi-turn LLM agents.", no_args_is_help=True, add_completion=False)
envs_app = typer.Typer(help="Environments: list and check them.", no_args_is_help=True)
app.add_typer(envs_app, name="envs")
swirl_app = typer.Typer(help="SWiRL's data (ALGORITHMS.md §1): generate multi-step tool-use trajectories, filter "
                        "them, decompose them into steps.", no_args_is_help=True)
app.add_typer(swirl_app, name="swirl")
pag_app = typer.Typer(help="PAG's data (ALGORITHMS.md §7): rows for a verifier warm-up.", no_args_is_help=True)
app.add_typer(pag_app, name="pag")
console = Console()

KwOption = Annotated[
    list[str] | None,
    typer.Option("--kw", "-k", help="Environment keyword argument KEY=VALUE (VALUE read as YAML); repeatable."),
]


def fail(message: str) -> NoReturn:
    """Print ``error: MESSAGE`` on one line and exit with status 2 (bad input, nothing was run)."""
    console.print("[red]error:[/red] ", end="")
    console.print(" ".join(message.split()), soft_wrap=True, markup=False, highlight=False)
    raise typer.Exit(2)


def _import_modules(modules: list[str] | None) -> list[str] | None:
    for name in modules or []:
        try:
            import_env_module(name, [Path.cwd()])
        except EnvImportError as e:
            fail(str(e))
    return modules


ImportOption = Annotated[
    list[str] | None,
    typer.Option("--import", metavar="MODULE", callback=_import_modules, is_eager=True,
                 help="Import MODULE first (from sys.path or the current folder), e.g. one that registers "
                      "environments; repeatable."),
]


def parse_kwargs(pairs: list[str] | None) -> dict[str, Any]:
    """``["max_turns=3", "calculator=true"]`` → ``{"max_turns": 3, "calculator": True}``."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
    return out


def _make(env_id: str, kwargs: dict[str, Any], search: list[Path] | None = None) -> Any:
    """The environment, or the one-line ``error:`` (exit 2) saying what to change."""
    try:
        resolve(env_id, search if search is not None else [Path.cwd()])
        return make(env_id, **kwargs)
    except (UnknownEnvironmentError, InvalidEnvKwargs, EnvImportError, FileNotFoundError, ValueError, TypeError) as e:
        fail(str(e))
    except Exception as e:  # noqa: BLE001 — the environment's own constructor failed: say where, in one line
        fail(f"making {env_id} raised {type(e).__name__}: {e}{error_location(e)}")


def _say(text: str) -> None:
    console.print(text, soft_wrap=True, markup=False, highlight=False)


def _check_out(out: str) -> None:
    """A dataset path must name its format."""
    if not out.endswith((".parquet", ".jsonl")):
        fail(f"--out must end in .parquet or .jsonl, got {out!r}")


def _dataset_run(env: str, env_kwargs: dict[str, Any], out: str, agent: str, batch_size: int,
                 tokenizer: str | None, tasks: int, items: str) -> tuple[Any, Any, int]:
    """What `turnrl rollout` and `turnrl swirl generate` check before sampling: the environment (made first, to fail
    before a model loads), a warning when its ``items`` are held-out ones, the --out format, then the agent.
    Returns ``(env, agent, how many of the first ``tasks`` tasks exist)``."""
    from turnrl.agents import make_agent

    probe = _make(env, env_kwargs)
    split, held = getattr(probe, "split", None), getattr(probe, "held_out_split", None)
    if split is not None and split == held:
        _say(f"warning: these are {env}'s held-out ({split}) {items}; a policy trained on them is then evaluated on "
             "what it trained on (pass --kw split=train)")
    _check_out(out)
    try:
        if agent == "gold":
            the_agent = _gold_agent(probe, split, held, tokenizer)
        else:
            the_agent = make_agent(agent, batch_size=batch_size, tokenizer=tokenizer)
    except (ValueError, OSError, ImportError) as e:
        fail(str(e))
    return probe, the_agent, min(tasks, len(probe)) if hasattr(probe, "__len__") else tasks


def _gold_agent(env: Any, split: Any, held: Any, tokenizer: str | None) -> Any:
    """``--agent gold``: the teacher that writes each training question's gold search path (turnrl.swirl.gold)."""
    from turnrl.agents.template_check import load_tokenizer
    from turnrl.swirl.gold import GoldPathAgent

    if split is not None and split == held:
        raise ValueError(f"--agent gold reads the gold answers: it writes training data, and {split!r} is the "
                         "held-out split (pass --kw split=… for a training split)")
    return GoldPathAgent(load_tokenizer(tokenizer or "smollm2-135m-instruct"), getattr(env.unwrapped, "tasks", []))


def _summary(env_id: str) -> str:
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    entry = gym.spec(env_id).entry_point
    try:
        obj = load_env_creator(entry) if isinstance(entry, str) else entry
    except Exception as e:  # noqa: BLE001 — one broken package must not hide the others
        return f"(cannot import {entry}: {type(e).__name__}: {e})"
    doc = (obj.__doc__ or "").strip().splitlines()
    return doc[0].replace(f"``{env_id}``: ", "") if doc else ""


@envs_app.command("list")
def envs_list(imports: ImportOption = None) -> None:
    """List the registered environments: built-in, declared by installed packages, or from imported modules."""
    table = Table(title="turnrl environments")
    table.add_column("id", style="bold cyan")
    table.add_column("description")
    table.add_column("from", style="dim")
    for env_id in registered():
        table.add_row(env_id, _summary(env_id), source_of(env_id))
    console.print(table)
    for problem in entry_point_problems():
        console.print(f"[yellow]skipped[/yellow] {problem}", markup=True, highlight=False, soft_wrap=True)


@envs_app.command("check")
def envs_check(
    env_id: Annotated[str, typer.Argument(help="e.g. turnrl/GSM8K-v0, or mymodule:myproject/Name-v0")],
    kw: KwOption = None,
    seed: int = 0,
    call_tools: Annotated[bool, typer.Option(help="call each tool with generated arguments (off for tools with side "
                                                  "effects)")] = True,
    imports: ImportOption = None,
) -> None:
    """Run the conformance harness on one environment; exit 1 if it fails."""
    from turnrl.envs.testing import check_environment

    report = check_environment(_make(env_id, parse_kwargs(kw)), seed=seed, call_tools=call_tools)
    console.print(str(report), markup=False)
    if not report.ok:
        raise typer.Exit(1)


def _read_turn() -> str | None:
    """One agent turn from stdin: lines until an empty line (or a single line with no continuation)."""
    lines: list[str] = []
    while True:
        try:
            line = input("assistant> " if not lines else "        ... ")
        except EOFError:
            return "\n".join(lines) if lines else None
        if not lines and line.strip() in (":q", ":quit"):
            return None
        if line.endswith("\\"):
            lines.append(line[:-1])
            continue
        lines.append(line)
        return "\n".join(lines)


def _show_messages(messages: Any) -> None:
    for m in messages:
        who = m.role if m.name is None else f"{m.role}:{m.name}"
        console.print(f"[bold magenta]\\[{who}][/bold magenta] ", end="")
        console.print(m.content, markup=False, highlight=False)


@app.command()
def play(
    env_id: Annotated[str, typer.Argument(help="e.g. turnrl/Arithmetic-v0, or mymodule:myproject/Name-v0")],
    kw: KwOption = None,
    seed: int = 0,
    index: Annotated[int | None, typer.Option(help="task index (default: drawn from the seed)")] = None,
    imports: ImportOption = None,
) -> None:
    """Play an environment yourself: type the agent's turns (end a line with \\ to continue it; :q quits)."""
    env = _make(env_id, parse_kwargs(kw))
    try:
        obs, info = env.reset(seed=seed, options={"index": index} if index is not None else None)
    except ValueError as e:  # e.g. an index past the last task
        fail(str(e))
    console.print(f"[dim]task {info.get('task_id')} — type ':oracle' for the oracle's answer, ':q' to quit[/dim]")
    _show_messages(obs)
    total = 0.0
    while True:
        text = _read_turn()
        if text is None:
            console.print("[dim]bye[/dim]")
            return
        if text.strip() == ":oracle":
            text = env.oracle_action() or ""
            console.print(f"[dim](oracle)[/dim] {text}", markup=False)
        obs, reward, terminated, truncated, info = env.step(text)
        total += reward
        _show_messages(obs)
        shown = {k: v for k, v in info.items() if v not in (None, [], {})}
        console.print(f"[green]reward {reward:g}[/green] (total {total:g})  info {shown}", highlight=False)
        if terminated or truncated:
            console.print(f"[bold]episode over[/bold]: terminated={terminated} truncated={truncated}")
            return


@app.command("eval")
def eval_cmd(
    env: Annotated[str, typer.Option("--env", help="e.g. turnrl/GSM8K-v0, or mymodule:myproject/Name-v0")],
    agent: Annotated[str, typer.Option(help="smollm2-135m-instruct, hf:PATH, vllm:PATH, openai:URL#MODEL, tiny:chatml, run:OUT_DIR (a trained run)")],
    limit: Annotated[int, typer.Option(help="evaluate tasks 0..limit-1 of the held-out split (--kw split=… for another)")] = 100,
    samples: Annotated[int, typer.Option(help="episodes per task (pass@k up to this k)")] = 1,
    out: Annotated[str, typer.Option(help="output folder")] = "runs/eval",
    seed: int = 0,
    temperature: Annotated[float | None, typer.Option(help="default: 0 for one sample, 1 for several")] = None,
    top_p: float = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="per turn")] = 256,
    batch_size: Annotated[int, typer.Option(help="episodes generated together")] = 32,
    max_context: int = 4096,
    tokenizer: Annotated[str | None, typer.Option(help="tokenizer path/name for openai: agents")] = None,
    kw: KwOption = None,
    imports: ImportOption = None,
) -> None:
    """Evaluate an agent on an environment; write items.jsonl, report.md, metrics.json and plot.png to --out."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from turnrl.agents import SamplingParams, make_agent
    from turnrl.rl.evaluate import evaluate, held_out_kwargs

    env_kwargs = parse_kwargs(kw)
    probe = _make(env, env_kwargs)  # fail fast, with the registry's message, before loading a model
    if (held := held_out_kwargs(probe, env_kwargs)) is not None:  # the held-out split unless --kw split=… says
        env_kwargs, probe = held, _make(env, held)
    n_tasks = len(probe) if hasattr(probe, "__len__") else None
    if n_tasks is not None and limit > n_tasks:
        console.print(f"note: --limit {limit} is more than the {n_tasks} task(s) of {env}; evaluating all {n_tasks}",
                      soft_wrap=True, markup=False, highlight=False)
        limit = n_tasks
    try:
        the_agent = make_agent(agent, batch_size=batch_size, tokenizer=tokenizer)
    except (ValueError, OSError, ImportError) as e:
        fail(str(e))
    temp = temperature if temperature is not None else (0.0 if samples == 1 else 1.0)
    params = SamplingParams(temperature=temp, top_p=top_p, max_new_tokens=max_new_tokens)
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[rate]} gen tok/s  acc {task.fields[acc]}")]
    with Progress(*columns, console=console) as progress:
        total = limit * samples
        task = progress.add_task(env, total=total, rate="-", acc="-")
        state = {"tokens": 0, "correct": 0, "done": 0}
        started = time.perf_counter()

        def on_episode(traj: Any) -> None:
            state["tokens"] += sum(traj.loss_mask or [])
            state["correct"] += bool(traj.correct)
            state["done"] += 1
            rate = state["tokens"] / max(time.perf_counter() - started, 1e-9)
            progress.update(task, advance=1, rate=f"{rate:.1f}", acc=f"{state['correct'] / state['done']:.3f}")

        metrics = evaluate(the_agent, env, env_kwargs=env_kwargs, limit=limit, samples=samples, params=params,
                           seed=seed, out=out, batch_episodes=batch_size, max_context=max_context,
                           on_episode=on_episode)
    console.print((Path(out) / "report.md").read_text(), markup=False, highlight=False)
    console.print(f"[dim]metrics: {json.dumps(metrics)}[/dim]", soft_wrap=True)


@app.command()
def rollout(
    env: Annotated[str, typer.Option("--env", help="e.g. turnrl/Arithmetic-v0, or mymodule:myproject/Name-v0")],
    agent: Annotated[str, typer.Option(help="smollm2-135m-instruct, hf:PATH, vllm:PATH, openai:URL#MODEL, tiny:chatml, run:OUT_DIR (a trained run)")],
    out: Annotated[str, typer.Option(help="the dataset file (.parquet or .jsonl); an existing one is resumed")],
    tasks: Annotated[int, typer.Option(min=1, help="sample tasks 0..tasks-1 of the environment's (training) split")] = 100,
    samples: Annotated[int, typer.Option(min=1, help="episodes per task")] = 8,
    seed: int = 0,
    temperature: Annotated[float, typer.Option(min=0.0, help="sampling temperature of the behaviour policy")] = 1.0,
    top_p: float = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="per turn")] = 256,
    batch_size: Annotated[int, typer.Option(help="episodes generated together")] = 64,
    max_context: int = 4096,
    tokenizer: Annotated[str | None, typer.Option(help="tokenizer path/name for openai: agents")] = None,
    kw: KwOption = None,
    imports: ImportOption = None,
) -> None:
    """Sample an offline dataset for dqo, dpo and rft: SAMPLES episodes of each task with their rewards, the agent's
    log-probabilities and identity, as Trajectories; resumable (tasks already in --out are skipped)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from turnrl.agents import SamplingParams
    from turnrl.rl.collect import rollout_dataset

    env_kwargs = parse_kwargs(kw)
    _, the_agent, n = _dataset_run(env, env_kwargs, out, agent, batch_size, tokenizer, tasks, "tasks")
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        bar = progress.add_task(env, total=n * samples)
        try:
            summary = rollout_dataset(the_agent, agent, env, out=out, tasks=tasks, samples=samples, params=params,
                                      env_kwargs=env_kwargs, seed=seed, batch_episodes=batch_size,
                                      max_context=max_context, on_episode=lambda _: progress.advance(bar))
        except ValueError as e:
            fail(str(e))
    g = summary
    console.print(f"{int(g['episodes'])} episodes of {int(g['tasks'])} tasks in {g['out']} "
                  f"({int(g['new_episodes'])} new, {int(g['skipped_tasks'])} tasks already written) by {agent}: "
                  f"success rate {g['success_rate']:.3f}, mean reward {g['mean_reward']:.3f}, "
                  f"{g['generated_tokens_per_episode']:.1f} generated tokens/episode, {int(g['errors'])} errors; "
                  f"groups with both outcomes {int(g['groups_both_outcomes'])} (all correct "
                  f"{int(g['groups_all_correct'])}, all incorrect {int(g['groups_all_incorrect'])}); "
                  f"{g['wall_seconds']:.1f} s", soft_wrap=True, markup=False, highlight=False)


def _config_error(e: Exception) -> str:
    """A config problem on one line: each pydantic error as ``field.path: message``."""
    from pydantic import ValidationError

    if not isinstance(e, ValidationError):
        return str(e) if isinstance(e, (OSError, ValueError, yaml.YAMLError)) else f"{type(e).__name__}: {e}"
    parts = []
    for err in e.errors():
        where = ".".join(str(x) for x in err["loc"]) or "(top level)"
        value = err.get("input")
        shown = f" (got {value!r})" if err["type"] != "missing" and isinstance(value, (str, int, float, bool)) else ""
        parts.append(f"{where}: {err['msg']}{shown}")
    return "; ".join(parts)


def _shares_tasks(train_env: Any, held_env: Any, n: int) -> bool:
    """Whether the first ``n`` held-out tasks are posed by the training env too (same prompts at the same index)."""
    try:
        n = min(n, 16, len(train_env), len(held_env))
        prompts = [[env.reset(seed=0, options={"index": i})[0][-1].content for i in range(n)]
                   for env in (train_env, held_env)]
    except Exception:  # noqa: BLE001 — no index option or no length: nothing to compare
        return False
    return bool(set(prompts[0]) & set(prompts[1]))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def train(
    config: Annotated[str, typer.Argument(help="YAML config, e.g. configs/quickstart.yaml")],
    overrides: Annotated[list[str] | None, typer.Argument(help="dotted overrides, e.g. optim.lr=1e-5 steps=10")] = None,
    resume: Annotated[bool, typer.Option(help="continue from OUT_DIR/checkpoint.pt if it exists")] = True,
    imports: ImportOption = None,
) -> None:
    """Train a policy with GRPO, DAPO, PPO or VAPO (algorithm.name: grpo, dapo, ppo, vapo), a self-verifying policy
    on a *-PAG-v0 env (pag, pag-grpo), or offline from a
    `turnrl rollout` dataset (data.path) with DQO, DPO, RFT or SFT (dqo, dpo, rft, sft), or step-wise from stored
    SWiRL states (swirl; data.path from `turnrl swirl decompose`); metrics to OUT_DIR/metrics.jsonl and TensorBoard. env.id may be mymodule:myproject/Name-v0, with mymodule.py next to the config."""
    from turnrl.rl.evaluate import run_eval_kwargs
    from turnrl.rl.trainer import Trainer, load_config

    try:
        cfg = load_config(config, overrides)
    except Exception as e:  # noqa: BLE001 — a config that does not load or validate: say why, in one line
        fail(f"{config}: {_config_error(e)}")
    search = [Path(config).resolve().parent, Path.cwd()]
    train_env = _make(cfg.env.id, cfg.env.kwargs, search)  # fail fast, before loading any model
    held_env = _make(cfg.env.id, run_eval_kwargs(train_env, cfg.env.kwargs, cfg.env.eval_kwargs), search)
    on_train = _shares_tasks(train_env, held_env, cfg.eval_tasks)
    if on_train:
        console.print(f"warning: {cfg.env.id} has no held-out split here (env.eval_kwargs poses the training tasks), "
                      "so the held-out success below is measured on training tasks; set env.eval_kwargs "
                      "(e.g. split: test) to tasks the policy does not train on", soft_wrap=True, markup=False,
                      highlight=False)
    from turnrl.rl.algorithms.offline import OfflineDataError
    from turnrl.rl.placement.ray import RayPlacementError

    try:
        trainer = Trainer(cfg)
    except (RayPlacementError, OfflineDataError) as e:
        fail(str(e))
    ckpt = Path(cfg.out_dir) / "checkpoint.pt"
    if resume and ckpt.exists():
        trainer.load(ckpt)
        console.print(f"resumed from {ckpt} at step {trainer.step}")
    from rich.progress import Progress

    with Progress(console=console) as progress:
        task = progress.add_task("training", total=trainer.cfg.steps, completed=trainer.step)

        def show(h: dict[str, float]) -> None:
            held_out = f" held-out {h['eval_success']:.3f}" if "eval_success" in h else ""
            line = f"step {trainer.step} reward {h.get('reward_mean', 0):.3f} success {h.get('success', 0):.3f}"
            progress.update(task, completed=trainer.step, description=line + held_out)
            if not console.is_terminal:  # a log file: no live bar, so one line per step
                secs = f" {h['seconds']:.1f} s" if "seconds" in h else ""
                console.print(f"{line if trainer.step else 'step 0'}{held_out}{secs}", highlight=False)
            elif held_out:  # keep each evaluation above the bar
                console.print(f"step {trainer.step}:{held_out}", highlight=False)

        try:
            trainer.train(on_step=show)
        except ImportError as e:  # an optional logger configured but not installed
            console.print(f"[red]{e}[/red]")
            raise typer.Exit(2) from e
        except RayPlacementError as e:  # workers gone for good: what was collected is in the run's journal
            fail(str(e))
        finally:
            trainer.close()
    first, last = trainer.history[0], trainer.history[-1]
    label = "success on training tasks (no held-out split)" if on_train else "held-out success"
    console.print(f"{label}: {first.get('eval_success')} -> {last.get('eval_success')} "
                  f"after {trainer.step} steps; run in {cfg.out_dir}")


@app.command()
def plot(run_dir: Annotated[str, typer.Argument(help="a training run folder (with metrics.jsonl)")]) -> None:
    """Draw a training run's learning curves to RUN_DIR/curves.png."""
    from turnrl.rl.curves import plot_run

    try:
        out = plot_run(run_dir)
    except FileNotFoundError as e:
        fail(str(e))
    console.print(f"wrote {out}")


@app.command()
def serve(
    agent: Annotated[str, typer.Option(help="agent spec, e.g. smollm2-135m-instruct or hf:PATH")],
    name: Annotated[str | None, typer.Option(help="model name clients ask for (default: the agent spec)")] = None,
    host: str = "127.0.0.1",
    port: int = 8000,
) -> None:
    """Serve an agent over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions)."""
    from turnrl.agents import make_agent
    from turnrl.agents.server import AgentServer

    server = AgentServer(make_agent(agent), name or agent, host=host, port=port)
    console.print(f"serving {name or agent} at {server.url} (Ctrl-C stops)", soft_wrap=True, highlight=False)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        server.httpd.server_close()


@app.command()
def quickstart(
    model: Annotated[str, typer.Option(help="agent to train after the scripted episodes (a Hugging Face model)")] = "smollm2-135m-instruct",
    no_model: Annotated[bool, typer.Option("--no-model", help="only the scripted episodes")] = False,
    steps: Annotated[int, typer.Option(min=1, help="GRPO steps of the training demo")] = 10,
    eval_tasks: Annotated[int, typer.Option(min=1, help="held-out problems evaluated before and after")] = 64,
    out: Annotated[str, typer.Option(help="the training run's folder")] = "runs/quickstart",
) -> None:
    """List the environments, play scripted episodes, then train a real model briefly and show it improve."""
    from turnrl.quickstart import run

    envs_list()
    sys.exit(run(console, None if no_model else model, steps, eval_tasks, out))


# `turnrl view` and `turnrl check-template` live in their own modules; only their registration is here.
from turnrl.view.command import view_command  # noqa: E402

app.command("view")(view_command)
from turnrl.agents.template_check import check_template_command  # noqa: E402

app.command("check-template")(check_template_command)


# ---- turnrl swirl: SWiRL's data pipeline ----

@swirl_app.command("generate")
def swirl_generate(
    env: Annotated[str, typer.Option("--env", help="e.g. turnrl/Arithmetic-v0 with --kw tool_style=swirl")],
    agent: Annotated[str, typer.Option(help="smollm2-135m-instruct, hf:PATH, vllm:PATH, openai:URL#MODEL, tiny:chatml, run:OUT_DIR (a trained run), or gold (HotPotQA's annotated search path and answer, training splits only; --tokenizer the student's)")],
    out: Annotated[str, typer.Option(help="the dataset (.parquet or .jsonl); an existing one is resumed")],
    tasks: Annotated[int, typer.Option(min=1, help="questions 0..tasks-1 of the environment's split")] = 100,
    samples: Annotated[int, typer.Option(min=1, help="trajectories per question (the paper: 5)")] = 5,
    seed: int = 0,
    temperature: Annotated[float, typer.Option(min=0.0)] = 1.0,
    top_p: float = 1.0,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="per step")] = 128,
    batch_size: Annotated[int, typer.Option(min=1, help="episodes generated together")] = 64,
    max_context: int = 2048,
    retries: Annotated[int, typer.Option(min=0, help="rounds that re-ask questions whose generation failed")] = 2,
    tokenizer: Annotated[str | None, typer.Option(help="tokenizer path/name for openai: agents and --agent gold (default smollm2-135m-instruct)")] = None,
    keep_demos: Annotated[bool, typer.Option("--keep-demos", help="keep the few-shot demonstrations in the stored "
                                             "prompts (default: taken out, as the trained policy sees none)")] = False,
    kw: KwOption = None,
    imports: ImportOption = None,
) -> None:
    """K trajectories per question with live tools, as token-exact Trajectories with the gold answer and the
    question in their metadata; resumable (questions already in --out are skipped); a question whose generation
    keeps failing is skipped after --retries rounds and counted. The environment's few-shot demonstrations help the
    generating model and are taken out of what is stored (--keep-demos keeps them)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from turnrl.swirl.generate import generate

    env_kwargs = parse_kwargs(kw)
    probe, the_agent, n = _dataset_run(env, env_kwargs, out, agent, batch_size, tokenizer, tasks, "questions")
    if not getattr(probe.unwrapped, "stop", ()):
        _say(f"note: {env} declares no stop strings, so a turn may hold several steps; SWiRL's format is "
             "--kw tool_style=swirl")
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        bar = progress.add_task(env, total=n * samples)
        try:
            g = generate(the_agent, agent, env, env_kwargs, out=out, tasks=tasks, samples=samples,
                         temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed,
                         retries=retries, batch_episodes=batch_size, max_context=max_context,
                         keep_demos=keep_demos, on_episode=lambda _: progress.advance(bar))
        except ValueError as e:
            fail(str(e))
    _say(f"{int(g['episodes'])} trajectories of {int(g['tasks'])} questions in {g['out']} by {agent}: success rate "
         f"{g['success_rate']:.3f}, tool-call rate {g['tool_call_rate']:.3f}, {g['steps_per_trajectory']:.2f} steps per "
         f"trajectory, {int(g['errors'])} errors; {int(g['skipped_questions'])} questions skipped after {retries} "
         f"retries ({int(g['retried_questions'])} retried); {g['wall_seconds']:.1f} s")


@swirl_app.command("filter")
def swirl_filter(
    data: Annotated[str, typer.Argument(help="trajectories from `turnrl swirl generate`")],
    out: Annotated[str, typer.Option(help="where the kept trajectories go (.parquet or .jsonl)")],
    mode: Annotated[str, typer.Option(help="none, process, outcome or both (process ∧ outcome)")] = "process",
    judge: Annotated[str, typer.Option(help="the process judge: rule, or an agent (openai:URL#MODEL, hf:PATH, …)")] = "rule",
) -> None:
    """Keep the trajectories that pass the filter (process: every step GOOD; outcome: the answer is correct); print
    how many each criterion kept. Exit 2 when nothing is kept."""
    from turnrl.storage import load, save
    from turnrl.swirl.filters import MODES, EmptyFilterError, filter_trajectories, report_table

    if mode not in MODES:
        fail(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    _check_out(out)
    try:
        trajs = load(data)
    except (OSError, ValueError) as e:
        fail(f"cannot read {data}: {e}")
    try:
        from turnrl.swirl.judges import make_step_judge

        step_judge = make_step_judge(judge) if mode in ("process", "both") else None
        kept, report = filter_trajectories(trajs, mode, step_judge)  # type: ignore[arg-type]
    except EmptyFilterError as e:
        _say(report_table(e.report))
        fail(str(e))
    except (ValueError, OSError, ImportError) as e:
        fail(str(e))
    save(kept, out)
    _say(report_table(report))
    _say(f"kept {len(kept)} of {len(trajs)} trajectories ({report['kept_steps']} steps) in {out}")


DataTokenizerOption = Annotated[str, typer.Option(
    "--tokenizer", help="the tokenizer of the model that wrote the data: a model name or path, hf:PATH, tiny:TEMPLATE")]


@swirl_app.command("relabel")
def swirl_relabel(
    data: Annotated[str, typer.Argument(help="trajectories from `turnrl swirl generate` (training questions only)")],
    out: Annotated[str, typer.Option(help="where every trajectory goes, the relabelled ones changed")],
    tokenizer: DataTokenizerOption,
    max_answer_words: Annotated[int, typer.Option(help="the rule judge's longest GOOD answer")] = 8,
) -> None:
    """Hindsight answers (ours): where a trajectory's own tool results hold the gold answer, cut it at the earliest
    such step and answer there with the gold answer (a GOOD step for the rule judge); then filter and decompose as
    usual. Uses the gold answer, like the outcome filter."""
    from turnrl.agents.template_check import load_tokenizer
    from turnrl.storage import load, save
    from turnrl.swirl.judges import RuleStepJudge
    from turnrl.swirl.relabel import ground_answers

    _check_out(out)
    try:
        trajs, report = ground_answers(load(data), load_tokenizer(tokenizer), RuleStepJudge(max_answer_words))
    except (OSError, ValueError) as e:
        fail(str(e))
    save(trajs, out)
    r = report
    _say(f"relabelled {r['relabelled']} of {r['trajectories']} trajectories in {out} ({r['steps_dropped']} later steps "
         f"dropped); left as they were: {r['already_correct']} already correct, {r['not_grounded']} whose results hold "
         f"no gold answer, {r['no_gold']} without a gold label or tokens")


@swirl_app.command("decompose")
def swirl_decompose(
    data: Annotated[str, typer.Argument(help="(filtered) trajectories")],
    out: Annotated[str, typer.Option(help="where the step rows go (.parquet or .jsonl)")],
) -> None:
    """One row per step: the state (the token prefix, exactly as the model saw it) and the step's tokens, the only
    ones trained on; the input of `turnrl train` with algorithm.name swirl or sft."""
    from turnrl.storage import load, save
    from turnrl.swirl.steps import decompose_all

    _check_out(out)
    try:
        trajs = load(data)
        rows = decompose_all(trajs)
    except (OSError, ValueError) as e:
        fail(str(e))
    if not rows:
        fail(f"{data} holds no steps to decompose")
    save(rows, out)
    per = [t.num_turns for t in trajs]
    _say(f"{len(rows)} step rows from {len(trajs)} trajectories in {out}: {len(rows) / max(len(trajs), 1):.2f} steps "
         f"per trajectory (min {min(per)}, max {max(per)})")


@pag_app.command("rows")
def pag_rows_command(
    data: Annotated[str, typer.Argument(help="PAG episodes (turnrl rollout on a *-PAG-v0 env)")],
    out: Annotated[str, typer.Option(help="where the rows go (.parquet or .jsonl)")],
    tokenizer: DataTokenizerOption,
    balance: Annotated[str, typer.Option(help="down: keep as many majority-verdict rows as the minority has; up: "
                                         "repeat the minority's rows; none")] = "down",
    revisions: Annotated[bool, typer.Option(help="also the revisions that turned a wrong answer right")] = False,
    sibling_revisions: Annotated[bool, typer.Option(help="also, for each wrong first answer, a revision that is a "
                                                    "right answer to the same question from another episode")] = False,
    rationales: Annotated[bool, typer.Option(help="each verdict re-solves first: the shortest right answer to the "
                                             "same question from another episode, then the verdict")] = False,
) -> None:
    """Rows for a verifier warm-up (ours): each episode's verify state with the TRUE verdict of its first answer as
    the action (relabelled from the environment's grade); train them with algorithm.name sft, then pag with
    init_from that run."""
    from turnrl.agents.template_check import load_tokenizer
    from turnrl.rl.pag_rows import pag_rows
    from turnrl.storage import load, save

    _check_out(out)
    try:
        rows, report = pag_rows(load(data), load_tokenizer(tokenizer), balance=balance, revisions=revisions,
                               sibling_revisions=sibling_revisions, rationales=rationales)
    except (OSError, ValueError) as e:
        fail(str(e))
    save(rows, out)
    r = report
    _say(f"{int(r['rows'])} rows in {out} from {int(r['episodes'])} episodes: {int(r['verdict_rows'])} verify turns "
         f"(true verdict correct {int(r['truth_correct'])}, wrong {int(r['truth_wrong'])}; the sampled verdict agreed "
         f"with the truth in {r['sampled_verdict_agreed']:.0%} and was unparseable in "
         f"{r['sampled_verdict_unparseable']:.0%}), {int(r.get('dropped_rows', 0))} left out and "
         f"{int(r.get('repeated_rows', 0))} repeated to balance, "
         f"{int(r.get('revision_rows', 0))} revisions, {int(r.get('sibling_revision_rows', 0))} sibling revisions"
         + (f"; {int(r['no_rationale'])} verify turns without a right answer to re-solve with" if rationales else ""))


def _with_import_option(fn: Any) -> Any:
    """``fn`` with the ``--import`` option appended, for commands defined without it (e.g. in other modules)."""
    signature = inspect.signature(fn, eval_str=True)
    if any(p.annotation is ImportOption for p in signature.parameters.values()):
        return fn

    @functools.wraps(fn)
    def command(*args: Any, imports: list[str] | None = None, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)  # the modules were imported by the option's callback

    extra = inspect.Parameter("imports", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ImportOption)
    command.__signature__ = signature.replace(parameters=[*signature.parameters.values(), extra])
    command.__annotations__ = {p.name: p.annotation for p in command.__signature__.parameters.values()}
    return command


for _info in (app.registered_commands + envs_app.registered_commands + swirl_app.registered_commands
              + pag_app.registered_commands):  # --import
    _info.callback = _with_import_option(_info.callback)


def main() -> None:
    """Entry point for ``python -m turnrl``."""
    app()


if __name__ == "__main__":
    main()
