"""``turnrl pag …``: PAG's data tools (docs/algorithms.md §7) — rows for a verifier warm-up."""

from __future__ import annotations

from typing import Annotated

import typer

from turnrl.cli_shared import DataTokenizerOption, _check_out, _say, fail

app = typer.Typer(help="PAG's data (docs/algorithms.md §7): rows for a verifier warm-up.", no_args_is_help=True)


@app.command("rows")
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
    from turnrl.methods.pag.rows import pag_rows
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
