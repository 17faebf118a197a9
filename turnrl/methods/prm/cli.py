"""``turnrl prm …``: process labels for code and the process reward model (docs/algorithms.md §8)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from turnrl.cli.shared import check_dataset_out, fail, say

if TYPE_CHECKING:
    from turnrl.types import Trajectory

app = typer.Typer(
    help="PRM for code (docs/algorithms.md §8): label line prefixes by Monte-Carlo completion, train a "
    "process reward model.",
    no_args_is_help=True,
)


@app.command("label")
def prm_label_command(
    data: Annotated[
        str,
        typer.Argument(
            help="one-reply episodes of a code environment (turnrl rollout on turnrl/Functions-v0, HumanEval, …)"
        ),
    ],
    out: Annotated[str, typer.Option(help="where the labeled episodes go (.parquet or .jsonl)")],
    agent: Annotated[str, typer.Option(help="the prover that completes prefixes (default: the dataset's agent)")] = "",
    completions: Annotated[int, typer.Option(min=1, help="completions sampled per probed prefix")] = 4,
    temperature: Annotated[float, typer.Option(min=0.0)] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(min=1)] = 256,
    batch: Annotated[int, typer.Option(min=1, help="episodes searched together")] = 32,
    limit: Annotated[int | None, typer.Option(min=1, help="label only the first LIMIT episodes")] = None,
) -> None:
    """Label every line end of each episode's reply: 1 if some completion from there passes the tests (binary search
    over the lines of failing replies; replies that pass are positive everywhere)."""
    from turnrl.agents import make_agent
    from turnrl.envs.registry import make
    from turnrl.methods.prm.labels import PRMDataError, check_env, label_episodes
    from turnrl.storage import load, save
    from turnrl.types import SamplingParams

    check_dataset_out(out)
    try:
        trajs = load(data)
    except (OSError, ValueError) as e:
        fail(str(e))
    trajs = trajs[:limit] if limit is not None else trajs
    if not trajs:
        fail(f"{data} holds no episodes")
    meta = trajs[0].metadata.get("dataset") or {}
    if "env_id" not in meta:
        fail(f"{data} does not say which environment its episodes played (make it with turnrl rollout)")
    env = make(meta["env_id"], **(meta.get("env_kwargs") or {}))
    try:
        check_env(env)
    except PRMDataError as e:
        fail(str(e))
    spec = agent or trajs[0].metadata.get("agent")
    if not spec:
        fail("which agent completes the prefixes? pass --agent")
    prover = make_agent(spec)
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens)
    labeled: list[Trajectory] = []
    totals: dict[str, float] = {}
    for s in range(0, len(trajs), batch):
        try:
            part, figures = label_episodes(trajs[s : s + batch], prover, env, completions=completions, params=params)
        except PRMDataError as e:
            fail(str(e))
        labeled += part
        totals = {k: totals.get(k, 0.0) + v for k, v in figures.items() if k != "positive_share"}
        say(f"{len(labeled)} / {len(trajs)} episodes labeled")
    save(labeled, out)
    positive = sum(y for t in labeled for _, y in t.metadata["prm_labels"])
    say(
        f"{int(totals['episodes'])} episodes ({int(totals['passing_episodes'])} passing) in {out}: "
        f"{int(totals['line_ends'])} line ends, {positive / max(totals['line_ends'], 1):.0%} positive; "
        f"{int(totals['probes'])} probes, {int(totals['completions_sampled'])} completions; "
        f"{int(totals['rescued'])} failing replies had a positive prefix"
    )


@app.command("train")
def prm_train_command(
    data: Annotated[str, typer.Argument(help="labeled episodes (turnrl prm label)")],
    out: Annotated[str, typer.Option(help="the PRM's folder")],
    base: Annotated[
        str, typer.Option(help="the model the PRM starts from (the policy's, so that PPO's critic can start as it)")
    ] = "smollm2-135m-instruct",
    epochs: Annotated[int, typer.Option(min=1)] = 3,
    lr: Annotated[float, typer.Option(min=0.0)] = 1e-5,
    batch_size: Annotated[int, typer.Option(min=1)] = 8,
    held_out: Annotated[float, typer.Option(min=0.0, max=0.5, help="share of episodes held out for its figures")] = 0.1,
    select: Annotated[
        str,
        typer.Option(
            help="all: every labeled episode; revised: only failing replies with a "
            "positive prefix (the paper's best subset)"
        ),
    ] = "all",
    seed: int = 0,
) -> None:
    """Train a process reward model: the base model's backbone and a value head, fit by regression to the line
    labels (and each reply's outcome at its last token)."""
    from turnrl.methods.prm.model import ProcessRewardModel
    from turnrl.storage import load

    try:
        trajs = load(data)
    except (OSError, ValueError) as e:
        fail(str(e))
    if select not in ("all", "revised"):
        fail(f"--select must be all or revised, got {select!r}")
    if select == "revised":
        trajs = [
            t
            for t in trajs
            if not t.metadata.get("prm_outcome") and any(y for _, y in t.metadata.get("prm_labels") or [])
        ]
        say(f"{len(trajs)} revised episodes (failing, with a positive prefix)")
    prm = ProcessRewardModel.new(base)

    def log(m: dict[str, float]) -> None:
        say(" ".join(f"{k} {v:.4g}" for k, v in m.items()))

    try:
        prm.train(trajs, epochs=epochs, lr=lr, batch_size=batch_size, held_out=held_out, seed=seed, log=log)
    except ValueError as e:
        fail(str(e))
    say(f"process reward model in {prm.save(out).parent}")
