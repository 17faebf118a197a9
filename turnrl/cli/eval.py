"""``turnrl eval`` and ``turnrl rollout`` (registered on :data:`turnrl.cli.app`), each playing its episodes under a
progress bar: an evaluation's shows its generated tokens per second and its accuracy so far; :func:`dataset_progress`
is the one every command that writes a dataset shares (``turnrl rollout``, ``turnrl swirl generate``). What they do
when stopped — write what finished and print the command that finishes the rest — is in :mod:`turnrl.cli.interrupt`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from turnrl.cli.interrupt import dataset_interrupted, interrupted_evaluation, interruptible, resume_command
from turnrl.cli.shared import (
    ImportOption,
    KwOption,
    console,
    dataset_run,
    fail,
    make_env,
    parse_kwargs,
    parse_opponent,
    say,
)

AGENT_HELP = "smollm2-135m-instruct, hf:PATH, vllm:PATH, openai:URL#MODEL, tiny:chatml, run:OUT_DIR (a trained run)"


def dataset_progress(
    ctx: typer.Context,
    out: str,
    what: str,
    total: int,
    work: Callable[[Callable[[Any], None]], dict[str, Any]],
    *,
    transient: bool = False,
) -> dict[str, Any]:
    """Run ``work(on_episode)`` — a dataset command's episodes — under a progress bar of ``total`` episodes: a bad
    setting (``ValueError``) is one error line, Ctrl-C or SIGTERM says what was kept and how to finish
    (:func:`~turnrl.cli.interrupt.dataset_interrupted`)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with (
        interruptible() as stop,
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=transient,
        ) as progress,
    ):
        bar = progress.add_task(what, total=total)
        try:
            return work(lambda _: progress.advance(bar))
        except ValueError as e:
            fail(str(e))
        except KeyboardInterrupt:
            progress.stop()
            raise dataset_interrupted(ctx, out, total, stop["code"]) from None


@dataclass(frozen=True)
class EvalRun:
    """What one ``turnrl eval`` plays, whatever the environment: the agent (its spec, where it runs, its tokenizer),
    the environment and its options, how many tasks or games from which seed, how many episodes at once within what
    context, and where the report goes."""

    env: str
    agent: str
    env_kwargs: dict[str, Any]
    limit: int
    seed: int
    out: str
    batch_size: int
    max_context: int
    tokenizer: str | None
    device: str


def _eval_multi_agent(run: EvalRun, params: Any, *, opponent: str, seat: str | None) -> None:
    """``turnrl eval`` on an environment with several agents (:mod:`turnrl.rl.run.evaluate_multi`)."""
    from turnrl.agents import make_agent
    from turnrl.envs.multiagent import make_multi_agent
    from turnrl.rl.run.evaluate_multi import evaluate_multi_agent, run_not_held_out

    env, out = run.env, run.out
    try:
        make_multi_agent(env, **run.env_kwargs).close()  # fail fast, before loading a model
    except (ImportError, ValueError, TypeError) as e:
        fail(f"cannot make {env}: {e}")
    policy = make_agent(
        run.agent,
        batch_size=run.batch_size,
        device=run.device,
        **({"tokenizer": run.tokenizer} if run.tokenizer else {}),
    )
    checked, why = run_not_held_out(run.agent, env, opponent)  # a run: agent's training opponents against --opponent
    try:
        m = evaluate_multi_agent(
            policy,
            env,
            run.env_kwargs,
            opponent=opponent,
            seat=seat,
            episodes=run.limit,
            seed=run.seed,
            params=params,
            max_context=run.max_context,
            batch_size=run.batch_size,
            out_dir=out,
            not_held_out=why,
            opponent_checked=checked,
            agent_name=run.agent,
        )
    except ValueError as e:
        fail(str(e))
    say(f"{env} ({m['env_kwargs']}), {m['episodes']} games as {m['seat']} against {opponent}:")
    for outcome in [
        k.removesuffix("_rate") for k in m if k.endswith("_rate") and not k.startswith("floor_") and m[k] > 0
    ]:
        lo, hi = m[f"{outcome}_ci95"]
        say(f"  {outcome}: {m[f'{outcome}_rate']:.1%} (95 % CI {lo:.1%}–{hi:.1%})")
    say(f"  invalid moves per game {m['invalid_moves_mean']:.2f}, moves per game {m['moves_mean']:.1f}; {out}/")
    floor = m.get("floor") or {}
    if floor.get("player"):
        lo, hi = floor["win_ci95"]
        say(
            f"  floor: a random legal player wins {floor['win_rate']:.1%} (95 % CI {lo:.1%}–{hi:.1%}), draws "
            f"{floor['draw_rate']:.1%} from the same states against the same opponent ({out}/floor/)"
        )
    elif floor:
        say(f"  floor: none ({floor.get('why')})")
    say(f"  {m['held_out']}: " + "; ".join(m["held_out_notes"]))


def eval_cmd(
    ctx: typer.Context,
    env: Annotated[str, typer.Option("--env", help="e.g. turnrl/GSM8K-v0, or mymodule:myproject/Name-v0")],
    agent: Annotated[str, typer.Option(help=AGENT_HELP)],
    limit: Annotated[
        int, typer.Option(help="evaluate tasks 0..limit-1 of the held-out split (--kw split=… for another)")
    ] = 100,
    samples: Annotated[int, typer.Option(help="episodes per task (pass@k up to this k)")] = 1,
    out: Annotated[str, typer.Option(help="output folder")] = "runs/eval",
    seed: int = 0,
    temperature: Annotated[float | None, typer.Option(help="default: 0 for one sample, 1 for several")] = None,
    top_p: float = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="per turn")] = 256,
    batch_size: Annotated[int, typer.Option(help="episodes generated together")] = 32,
    max_context: int = 4096,
    tokenizer: Annotated[str | None, typer.Option(help="tokenizer path/name for openai: agents")] = None,
    device: Annotated[
        str,
        typer.Option(
            help="where an hf:, tiny: or run: agent runs: auto (a CUDA GPU when torch sees one), cpu, cuda or cuda:N"
        ),
    ] = "auto",
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="finish an interrupted evaluation in --out: keep its "
            "finished episodes and play the rest (the same options)",
        ),
    ] = False,
    kw: KwOption = None,
    imports: ImportOption = None,
    opponent: Annotated[
        str,
        typer.Option(
            parser=parse_opponent,
            help="an environment with several agents: who plays the other seats — "
            "perfect or random (tic-tac-toe players), script:MODULE:FUNCTION, self, or an "
            "agent spec",
        ),
    ] = "random",
    seat: Annotated[
        str | None,
        typer.Option(
            help="an environment with several agents: the evaluated agent's seat (default: every seat in turn)"
        ),
    ] = None,
) -> None:
    """Evaluate an agent on an environment; write items.jsonl, report.md, metrics.json and plot.png to --out.
    Ctrl-C (or SIGTERM) writes them for the episodes that finished; --resume then plays the rest. On an environment
    with several agents: the agent's wins, draws and losses against --opponent, with 95 % confidence intervals."""
    from turnrl.agents import SamplingParams
    from turnrl.envs.multiagent import is_multi_agent

    if is_multi_agent(env):
        what = EvalRun(env, agent, parse_kwargs(kw), limit, seed, out, batch_size, max_context, tokenizer, device)
        _eval_multi_agent(
            what,
            SamplingParams(temperature=temperature or 0.0, max_new_tokens=max_new_tokens),
            opponent=opponent,
            seat=seat,
        )
        return
    from turnrl.rl.run.evaluate import (
        EvaluationInterrupted,
        held_out_kwargs,
        held_out_warning,
        previous_episodes,
    )
    from turnrl.rl.run.evaluate import eval_settings as settings_of

    env_kwargs = parse_kwargs(kw)
    probe = make_env(env, env_kwargs)  # fail fast, with the registry's message, before loading a model
    if (held := held_out_kwargs(probe, env_kwargs)) is not None:  # the held-out split unless --kw split=… says
        probe.close()
        env_kwargs, probe = held, make_env(env, held)
    if (warning := held_out_warning(probe, env)) is not None:
        say(warning)
    n_tasks = len(probe) if hasattr(probe, "__len__") else None
    probe.close()  # the evaluation makes its own environments
    if n_tasks is not None and limit > n_tasks:
        say(f"note: --limit {limit} is more than the {n_tasks} task(s) of {env}; evaluating all {n_tasks}")
        limit = n_tasks
    temp = temperature if temperature is not None else (0.0 if samples == 1 else 1.0)
    try:
        params = SamplingParams(temperature=temp, top_p=top_p, max_new_tokens=max_new_tokens)
    except ValueError as e:
        fail(f"sampling options: {e}")
    settings = settings_of(env, env_kwargs, samples, seed, params, max_context, agent)
    if resume:  # refuse a mismatch before loading a model
        try:
            previous_episodes(Path(out), settings)
        except ValueError as e:
            fail(str(e))
        if not (Path(out) / "run.json").is_file():
            say(f"note: --resume: {out} holds no earlier evaluation; evaluating every episode")
    elif (old := interrupted_evaluation(out)) is not None:
        say(f"note: {out} holds an interrupted evaluation ({old}); this run starts it over (--resume would finish it)")
    started = time.time()
    with interruptible() as stop:
        try:
            metrics = _run_eval(
                EvalRun(env, agent, env_kwargs, limit, seed, out, batch_size, max_context, tokenizer, device),
                samples,
                params,
                resume,
            )
        except EvaluationInterrupted as e:
            console.print((Path(out) / "report.md").read_text(), markup=False, highlight=False)
            say(
                f"interrupted: {e.done} of {e.total} episodes finished; {out}/report.md, items.jsonl, metrics.json "
                "and plot.png cover those"
            )
            say(f"to finish the other {e.total - e.done}: {resume_command(ctx, '--resume')}")
            raise typer.Exit(stop["code"]) from None
        except KeyboardInterrupt:
            run = Path(out) / "run.json"
            if run.is_file() and run.stat().st_mtime >= started - 1:  # this run began writing to --out
                say(
                    f"interrupted before the report was written; to finish the evaluation from the episodes in "
                    f"{out}: {resume_command(ctx, '--resume')}"
                )
            else:
                say("interrupted before any episode was played; nothing was written")
            raise typer.Exit(stop["code"]) from None
    console.print((Path(out) / "report.md").read_text(), markup=False, highlight=False)
    console.print(f"[dim]metrics: {json.dumps(metrics)}[/dim]", soft_wrap=True)


def _run_eval(run: EvalRun, samples: int, params: Any, resume: bool) -> dict[str, Any]:
    """Load the agent and evaluate, with a progress bar."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from turnrl.agents import make_agent
    from turnrl.rl.run.evaluate import evaluate

    env, limit = run.env, run.limit
    try:
        the_agent = make_agent(run.agent, batch_size=run.batch_size, tokenizer=run.tokenizer, device=run.device)
    except (ValueError, OSError, ImportError) as e:
        fail(str(e))
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[rate]} gen tok/s  acc {task.fields[acc]}"),
    ]
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(env, total=limit * samples, rate="-", acc="-")
        state = {"tokens": 0, "correct": 0, "done": 0}
        started = time.perf_counter()

        def on_episode(traj: Any) -> None:
            state["tokens"] += sum(traj.loss_mask or [])
            state["correct"] += bool(traj.correct)
            state["done"] += 1
            rate = state["tokens"] / max(time.perf_counter() - started, 1e-9)
            progress.update(task, advance=1, rate=f"{rate:.1f}", acc=f"{state['correct'] / state['done']:.3f}")

        return evaluate(
            the_agent,
            env,
            env_kwargs=run.env_kwargs,
            limit=limit,
            samples=samples,
            params=params,
            seed=run.seed,
            out=run.out,
            batch_episodes=run.batch_size,
            max_context=run.max_context,
            on_episode=on_episode,
            resume=resume,
            agent_name=run.agent,
            on_start=lambda done, total: progress.update(task, completed=done, total=total),
        )


def rollout(
    ctx: typer.Context,
    env: Annotated[str, typer.Option("--env", help="e.g. turnrl/Arithmetic-v0, or mymodule:myproject/Name-v0")],
    agent: Annotated[str, typer.Option(help=AGENT_HELP)],
    out: Annotated[str, typer.Option(help="the dataset file (.parquet or .jsonl); an existing one is resumed")],
    tasks: Annotated[
        int, typer.Option(min=1, help="sample tasks 0..tasks-1 of the environment's (training) split")
    ] = 100,
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
    log-probabilities and identity, as Trajectories; resumable (tasks already in --out are skipped; Ctrl-C or
    SIGTERM keeps what finished and prints the command that finishes the rest)."""

    from turnrl.agents import SamplingParams
    from turnrl.rl.sources.collect import rollout_dataset

    env_kwargs = parse_kwargs(kw)
    _, the_agent, n = dataset_run(env, env_kwargs, out, agent, batch_size, tokenizer, tasks, "tasks")
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    g = dataset_progress(
        ctx,
        out,
        env,
        n * samples,
        lambda on_episode: rollout_dataset(
            the_agent,
            agent,
            env,
            out=out,
            tasks=tasks,
            samples=samples,
            params=params,
            env_kwargs=env_kwargs,
            seed=seed,
            batch_episodes=batch_size,
            max_context=max_context,
            on_episode=on_episode,
        ),
    )
    say(
        f"{int(g['episodes'])} episodes of {int(g['tasks'])} tasks in {g['out']} "
        f"({int(g['new_episodes'])} new, {int(g['skipped_tasks'])} tasks already written) by {agent}: "
        f"success rate {g['success_rate']:.3f}, mean reward {g['mean_reward']:.3f}, "
        f"{g['generated_tokens_per_episode']:.1f} generated tokens/episode, {int(g['errors'])} errors; "
        f"groups with both outcomes {int(g['groups_both_outcomes'])} (all correct "
        f"{int(g['groups_all_correct'])}, all incorrect {int(g['groups_all_incorrect'])}); "
        f"{g['wall_seconds']:.1f} s"
    )
