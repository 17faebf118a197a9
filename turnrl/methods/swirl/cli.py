"""``turnrl swirl …``: SWiRL's data pipeline (docs/algorithms.md §1) — generate multi-step tool-use trajectories, filter
them step by step, relabel answers, decompose them into step rows."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from turnrl.cli.eval import dataset_progress
from turnrl.cli.shared import (
    DataTokenizerOption,
    ImportOption,
    KwOption,
    check_dataset_out,
    dataset_run,
    fail,
    parse_kwargs,
    say,
)

app = typer.Typer(
    help="SWiRL's data (docs/algorithms.md §1): generate multi-step tool-use trajectories, filter "
    "them, decompose them into steps.",
    no_args_is_help=True,
)


def _gold_agent(env: Any, tokenizer: str | None, tasks: int) -> Any:
    """``--agent gold``: a teacher that reads each training task's annotation — HotPotQA-style questions their gold
    search path (turnrl.methods.swirl.gold), generated arithmetic its calculator path (turnrl.methods.swirl.gold_steps)
    — for the first ``tasks`` tasks."""
    from turnrl.cli.template_check import load_tokenizer
    from turnrl.methods.swirl.gold import GoldPathAgent
    from turnrl.methods.swirl.gold_steps import GoldStepsAgent

    split, held = getattr(env, "split", None), getattr(env, "held_out_split", None)
    if split is not None and (split == held or split in ("validation", "test")):
        raise ValueError(
            f"--agent gold reads the gold answers: it writes training data, and {split!r} is a "
            "held-out split (pass --kw split=… for a training split)"
        )
    everything = getattr(env.unwrapped, "tasks", [])
    first = [everything[i] for i in range(min(tasks, len(everything)))]
    student = load_tokenizer(tokenizer or "smollm2-135m-instruct")
    if any(t.metadata.get("expression") for t in first):
        return GoldStepsAgent(student, first)
    return GoldPathAgent(student, first)


@app.command("generate")
def swirl_generate(
    ctx: typer.Context,
    env: Annotated[str, typer.Option("--env", help="e.g. turnrl/Arithmetic-v0 with --kw tool_style=swirl")],
    agent: Annotated[
        str,
        typer.Option(
            help="smollm2-135m-instruct, hf:PATH, vllm:PATH, openai:URL#MODEL, tiny:chatml, run:OUT_DIR (a trained run), or gold (a teacher reading the annotations: a multi-hop question's search path, a generated arithmetic problem's calculator steps; training splits only; --tokenizer the student's)"
        ),
    ],
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
    tokenizer: Annotated[
        str | None,
        typer.Option(help="tokenizer path/name for openai: agents and --agent gold (default smollm2-135m-instruct)"),
    ] = None,
    keep_demos: Annotated[
        bool,
        typer.Option(
            "--keep-demos",
            help="keep the few-shot demonstrations in the stored "
            "prompts (default: taken out, as the trained policy sees none)",
        ),
    ] = False,
    kw: KwOption = None,
    imports: ImportOption = None,
) -> None:
    """K trajectories per question with live tools, as token-exact Trajectories with the gold answer and the
    question in their metadata; resumable (questions already in --out are skipped); a question whose generation
    keeps failing is skipped after --retries rounds and counted. The environment's few-shot demonstrations help the
    generating model and are taken out of what is stored (--keep-demos keeps them). Ctrl-C or SIGTERM keeps what
    finished and prints the command that finishes the rest."""

    from turnrl.methods.swirl.generate import generate

    env_kwargs = parse_kwargs(kw)
    special = (lambda probe: _gold_agent(probe, tokenizer, tasks)) if agent == "gold" else None
    probe, the_agent, n = dataset_run(env, env_kwargs, out, agent, batch_size, tokenizer, tasks, "questions", special)
    if not getattr(probe.unwrapped, "stop", ()):
        say(
            f"note: {env} declares no stop strings, so a turn may hold several steps; SWiRL's format is "
            "--kw tool_style=swirl"
        )
    g = dataset_progress(
        ctx,
        out,
        env,
        n * samples,
        lambda on_episode: generate(
            the_agent,
            agent,
            env,
            env_kwargs,
            out=out,
            tasks=tasks,
            samples=samples,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            seed=seed,
            retries=retries,
            batch_episodes=batch_size,
            max_context=max_context,
            keep_demos=keep_demos,
            on_episode=on_episode,
        ),
        transient=True,
    )
    say(
        f"{int(g['episodes'])} trajectories of {int(g['tasks'])} questions in {g['out']} by {agent}: success rate "
        f"{g['success_rate']:.3f}, tool-call rate {g['tool_call_rate']:.3f}, {g['steps_per_trajectory']:.2f} steps per "
        f"trajectory, {int(g['errors'])} errors; {int(g['skipped_questions'])} questions skipped after {retries} "
        f"retries ({int(g['retried_questions'])} retried); {g['wall_seconds']:.1f} s"
    )


def _judge_spec(text: str) -> Any:
    """``--judge`` read once, as a config's ``algorithm.judge`` is (:class:`~turnrl.methods.swirl.judges.StepJudgeSpec`)."""
    from turnrl.methods.swirl.judges import StepJudgeSpec

    return StepJudgeSpec(text)


@app.command("filter")
def swirl_filter(
    data: Annotated[str, typer.Argument(help="trajectories from `turnrl swirl generate`")],
    out: Annotated[str, typer.Option(help="where the kept trajectories go (.parquet or .jsonl)")],
    mode: Annotated[str, typer.Option(help="none, process, outcome or both (process ∧ outcome)")] = "process",
    judge: Annotated[
        str,
        typer.Option(parser=_judge_spec, help="the process judge: rule, or an agent (openai:URL#MODEL, hf:PATH, …)"),
    ] = "rule",
) -> None:
    """Keep the trajectories that pass the filter (process: every step GOOD; outcome: the answer is correct); print
    how many each criterion kept. Exit 2 when nothing is kept."""
    from turnrl.methods.swirl.filters import (
        MODES,
        EmptyFilterError,
        filter_trajectories,
        report_table,
    )
    from turnrl.storage import load, save

    if mode not in MODES:
        fail(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    check_dataset_out(out)
    try:
        trajs = load(data)
    except (OSError, ValueError) as e:
        fail(f"cannot read {data}: {e}")
    try:
        from turnrl.methods.swirl.judges import make_step_judge

        step_judge = make_step_judge(judge) if mode in ("process", "both") else None
        kept, report = filter_trajectories(trajs, mode, step_judge)  # type: ignore[arg-type]  # it refuses others
    except EmptyFilterError as e:
        say(report_table(e.report))
        fail(str(e))
    except (ValueError, OSError, ImportError) as e:
        fail(str(e))
    save(kept, out)
    say(report_table(report))
    say(f"kept {len(kept)} of {len(trajs)} trajectories ({report['kept_steps']} steps) in {out}")


@app.command("relabel")
def swirl_relabel(
    data: Annotated[str, typer.Argument(help="trajectories from `turnrl swirl generate` (training questions only)")],
    out: Annotated[str, typer.Option(help="where every trajectory goes, the relabelled ones changed")],
    tokenizer: DataTokenizerOption,
    max_answer_words: Annotated[int, typer.Option(help="the rule judge's longest GOOD answer")] = 8,
) -> None:
    """Hindsight answers (ours): where a trajectory's own tool results hold the gold answer, cut it at the earliest
    such step and answer there with the gold answer (a GOOD step for the rule judge); then filter and decompose as
    usual. Uses the gold answer, like the outcome filter."""
    from turnrl.cli.template_check import load_tokenizer
    from turnrl.methods.swirl.judges import RuleStepJudge
    from turnrl.methods.swirl.relabel import ground_answers
    from turnrl.storage import load, save

    check_dataset_out(out)
    try:
        trajs, report = ground_answers(load(data), load_tokenizer(tokenizer), RuleStepJudge(max_answer_words))
    except (OSError, ValueError) as e:
        fail(str(e))
    save(trajs, out)
    r = report
    say(
        f"relabelled {r['relabelled']} of {r['trajectories']} trajectories in {out} ({r['steps_dropped']} later steps "
        f"dropped); left as they were: {r['already_correct']} already correct, {r['not_grounded']} whose results hold "
        f"no gold answer, {r['no_gold']} without a gold label or tokens"
    )


@app.command("decompose")
def swirl_decompose(
    data: Annotated[str, typer.Argument(help="(filtered) trajectories")],
    out: Annotated[str, typer.Option(help="where the step rows go (.parquet or .jsonl)")],
) -> None:
    """One row per step: the state (the token prefix, exactly as the model saw it) and the step's tokens, the only
    ones trained on; the input of `turnrl train` with algorithm.name swirl or sft."""
    from turnrl.methods.swirl.steps import decompose_all
    from turnrl.storage import load, save

    check_dataset_out(out)
    try:
        trajs = load(data)
        rows = decompose_all(trajs)
    except (OSError, ValueError) as e:
        fail(str(e))
    if not rows:
        fail(f"{data} holds no steps to decompose")
    save(rows, out)
    per = [t.num_turns for t in trajs]
    say(
        f"{len(rows)} step rows from {len(trajs)} trajectories in {out}: {len(rows) / max(len(trajs), 1):.2f} steps "
        f"per trajectory (min {min(per)}, max {max(per)})"
    )
