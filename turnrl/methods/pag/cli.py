"""``turnrl pag …``: PAG's data tools (docs/algorithms.md §7) — rows for a verifier warm-up."""

from __future__ import annotations

from typing import Annotated

import typer

from turnrl.cli.shared import (
    DataTokenizerOption,
    KwOption,
    check_dataset_out,
    dataset_run,
    fail,
    parse_kwargs,
    say,
)

app = typer.Typer(help="PAG's data (docs/algorithms.md §7): rows for a verifier warm-up.", no_args_is_help=True)


@app.command("rows")
def pag_rows_command(
    data: Annotated[str, typer.Argument(help="PAG episodes (turnrl rollout on a *-PAG-v0 env)")],
    out: Annotated[str, typer.Option(help="where the rows go (.parquet or .jsonl)")],
    tokenizer: DataTokenizerOption,
    balance: Annotated[
        str,
        typer.Option(
            help="down: keep as many majority-verdict rows as the minority has; up: repeat the minority's rows; none"
        ),
    ] = "down",
    revisions: Annotated[bool, typer.Option(help="also the revisions that turned a wrong answer right")] = False,
    sibling_revisions: Annotated[
        bool,
        typer.Option(
            help="also, for each wrong first answer, a revision that is a "
            "right answer to the same question from another episode"
        ),
    ] = False,
    rationales: Annotated[
        bool,
        typer.Option(
            help="each verdict re-solves first: the shortest right answer to the "
            "same question from another episode, then the verdict"
        ),
    ] = False,
) -> None:
    """Rows for a verifier warm-up (ours): each episode's verify state with the TRUE verdict of its first answer as
    the action (relabelled from the environment's grade); train them with algorithm.name sft, then pag with
    init_from that run."""
    from turnrl.cli.template_check import load_tokenizer
    from turnrl.methods.pag.rows import pag_rows
    from turnrl.storage import load, save

    check_dataset_out(out)
    try:
        rows, report = pag_rows(
            load(data),
            load_tokenizer(tokenizer),
            balance=balance,  # type: ignore[arg-type]  # it refuses others
            revisions=revisions,
            sibling_revisions=sibling_revisions,
            rationales=rationales,
        )
    except (OSError, ValueError) as e:
        fail(str(e))
    save(rows, out)
    r = report
    say(
        f"{int(r['rows'])} rows in {out} from {int(r['episodes'])} episodes: {int(r['verdict_rows'])} verify turns "
        f"(true verdict correct {int(r['truth_correct'])}, wrong {int(r['truth_wrong'])}; the sampled verdict agreed "
        f"with the truth in {r['sampled_verdict_agreed']:.0%} and was unparseable in "
        f"{r['sampled_verdict_unparseable']:.0%}), {int(r.get('dropped_rows', 0))} left out and "
        f"{int(r.get('repeated_rows', 0))} repeated to balance, "
        f"{int(r.get('revision_rows', 0))} revisions, {int(r.get('sibling_revision_rows', 0))} sibling revisions"
        + (f"; {int(r['no_rationale'])} verify turns without a right answer to re-solve with" if rationales else "")
    )


@app.command("checks")
def pag_checks_command(
    env: Annotated[
        str,
        typer.Option(
            "--env",
            help="a *-PAG-v0 env with tools in its verify turn, e.g. "
            "turnrl/Arithmetic-PAG-v0 --kw calculator=true --kw verify_tools=true",
        ),
    ],
    agent: Annotated[
        str,
        typer.Option(
            help="the policy that writes the first answers: smollm2-135m-instruct, hf:PATH, run:OUT_DIR, tiny:chatml, …"
        ),
    ],
    out: Annotated[str, typer.Option(help="where the rows go (.parquet or .jsonl)")],
    tasks: Annotated[int, typer.Option(min=1, help="questions 0..tasks-1 of the environment's split")] = 200,
    samples: Annotated[int, typer.Option(min=1, help="episodes per question")] = 1,
    seed: int = 0,
    temperature: Annotated[float, typer.Option(min=0.0)] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(min=1)] = 128,
    batch_size: Annotated[int, typer.Option(min=1, help="episodes generated together")] = 64,
    balance: Annotated[
        str, typer.Option(help="down: as many episodes with a wrong first answer as with a right one; none")
    ] = "down",
    episodes: Annotated[str | None, typer.Option(help="also keep the whole checked episodes here")] = None,
    compare: Annotated[
        bool,
        typer.Option(
            help="check in two calls: the calculation, then the calculator on check - "
            "answer, so the verdict reads whether the tool said 0"
        ),
    ] = False,
    revisions: Annotated[
        bool,
        typer.Option(
            help="the teacher also revises after 'wrong' (the check's result, "
            "stated as an answer); the right revisions become rows too"
        ),
    ] = False,
    kw: KwOption = None,
) -> None:
    """Rows for a verifier that checks (ours): the policy answers, a teacher verifies by calling the environment's
    tool (its oracle calculation) and giving the true verdict; the verifier steps become SWiRL step rows, filtered
    step by step and balanced between right and wrong first answers. Train them with algorithm.name sft, then pag
    (env.kwargs verify_tools: true) with init_from that run."""
    from turnrl.methods.pag.check_rows import checking_rows, generate_checks
    from turnrl.storage import save

    env_kwargs = parse_kwargs(kw)
    probe, the_agent, n = dataset_run(env, env_kwargs, out, agent, batch_size, None, tasks, "questions")
    if not getattr(probe.unwrapped, "verify_tools", False):
        fail(
            f"{env} has no tools in its verify turn: pass --kw verify_tools=true (and the tool itself, e.g. --kw "
            "calculator=true)"
        )
    trajs = generate_checks(
        the_agent,
        env,
        env_kwargs,
        tasks=n,
        samples=samples,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
        batch_episodes=batch_size,
        on_batch=lambda done, total: say(f"{done}/{total} episodes"),
        compare=compare,
        revisions=revisions,
    )
    try:
        rows, r = checking_rows(trajs, balance=balance, seed=seed)  # type: ignore[arg-type]  # it refuses others
    except ValueError as e:
        fail(str(e))
    if episodes:
        save(trajs, episodes)
    save(rows, out)
    say(
        f"{int(r['rows'])} rows in {out} ({int(r['tool_rows'])} tool calls, {int(r['verdict_rows'])} verdicts, "
        f"{int(r['revision_rows'])} revisions) from "
        f"{int(r['episodes'])} episodes: first answers right {int(r['right_first'])}, wrong {int(r['wrong_first'])}; "
        f"{int(r.get('dropped_episodes', 0))} episodes left out to balance, {int(r['dropped_steps'])} steps "
        "filtered out"
    )
