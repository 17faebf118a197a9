"""The ``turnrl`` command: list, check and play environments, evaluate, collect datasets, train, serve, view; the
quickstart demo. Each method's own subcommands (``turnrl swirl …``, ``turnrl pag …``) live in its folder and are
mounted from :data:`COMMANDS` (the ``turnrl.commands`` entry points); the shared options and errors are in :mod:`turnrl.cli.shared`;
``eval`` and ``rollout`` are in :mod:`turnrl.cli.eval`. Each command's work lives in the module it calls.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from turnrl.cli.compare import compare_command
from turnrl.cli.env_serve import envs_serve
from turnrl.cli.eval import eval_cmd, rollout
from turnrl.cli.play import play
from turnrl.cli.shared import (
    ImportOption,
    KwOption,
    add_import_option,
    check_game_id,
    console,
    fail,
    make_env,
    parse_kwargs,
)
from turnrl.cli.template_check import check_template_command
from turnrl.cli.view import view_command
from turnrl.envs.registry import (
    ENV_ADAPTERS,
    entry_point_problems,
    registered,
    source_of,
)
from turnrl.plugins import Registry
from turnrl.rollout.opponents import Opponent

app = typer.Typer(help="turnrl: RL for multi-turn LLM agents.", no_args_is_help=True, add_completion=False)
envs_app = typer.Typer(help="Environments: list, check and serve them.", no_args_is_help=True)
app.add_typer(envs_app, name="envs")
app.add_typer(envs_app, name="env", hidden=True)  # `turnrl env serve ID` reads as well


def _summary(env_id: str) -> str:
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    entry = gym.spec(env_id).entry_point
    try:
        obj = load_env_creator(entry) if isinstance(entry, str) else entry
    except Exception as e:  # one broken package must not hide the others
        return f"(cannot import {entry}: {type(e).__name__}: {e})"
    doc = (obj.__doc__ or "").strip().splitlines()
    return doc[0].replace(f"``{env_id}``: ", "") if doc else ""


@envs_app.command("list")
def envs_list(imports: ImportOption = None) -> None:
    """List the registered environments: built-in, declared by installed packages, or from imported modules."""
    table = Table(title="turnrl environments")
    table.add_column("id", style="bold cyan", overflow="fold")
    table.add_column("description", min_width=24)
    table.add_column("from", style="dim")
    for env_id in registered():
        table.add_row(env_id, _summary(env_id), source_of(env_id))
    from turnrl.envs.multiagent import multi_agent_ids

    for env_id in multi_agent_ids():
        table.add_row(env_id, "several agents (turnrl/envs/multiagent)", "turnrl")
    for prefix in ENV_ADAPTERS.names():  # ids that name an environment written elsewhere, by their adapter's prefix
        try:
            usage = ENV_ADAPTERS.get(prefix).usage or f"{prefix}:… — (an adapter's id)"
        except Exception as e:  # a package's adapter that does not load must not hide the others
            usage = f"{prefix}:… — (cannot load its adapter: {e})"
        form, _, what = usage.partition(" — ")
        table.add_row(form, what, "adapter")
    console.print(table)
    for problem in entry_point_problems():
        console.print(f"[yellow]skipped[/yellow] {problem}", markup=True, highlight=False, soft_wrap=True)


@envs_app.command("check")
def envs_check(
    env_id: Annotated[str, typer.Argument(help="e.g. turnrl/GSM8K-v0, or mymodule:myproject/Name-v0")],
    kw: KwOption = None,
    seed: int = 0,
    call_tools: Annotated[
        bool, typer.Option(help="call each tool with generated arguments (off for tools with side effects)")
    ] = True,
    imports: ImportOption = None,
) -> None:
    """Run the conformance harness on one environment (with several agents too), then check its splits: no problem
    of the training split in the held-out or validation split, by canonical form; exit 1 if either fails."""
    from turnrl.envs.conformance.contract import check_environment
    from turnrl.envs.multiagent import is_multi_agent

    if is_multi_agent(env_id):
        from turnrl.envs.multiagent import make_multi_agent
        from turnrl.envs.multiagent.checks import check_multi_agent_environment

        try:
            env = make_multi_agent(env_id, **parse_kwargs(kw))
        except (ImportError, ValueError, TypeError) as e:
            fail(f"cannot make {env_id}: {e}")
        report = check_multi_agent_environment(env, seed=seed)
        splits = None
    else:
        from turnrl.envs.conformance.split_check import check_splits

        env = make_env(env_id, parse_kwargs(kw))
        report = check_environment(env, seed=seed, call_tools=call_tools)
        splits = check_splits(env_id, parse_kwargs(kw))
    env.close()
    console.print(str(report), markup=False, highlight=False, soft_wrap=True)
    if splits is not None:
        console.print(str(splits), markup=False, highlight=False, soft_wrap=True)
    if not report.ok or (splits is not None and not splits.ok):
        raise typer.Exit(1)


# `turnrl envs serve` lives in its own module (the server's options and checks); only its registration is here.

envs_app.command("serve")(envs_serve)


lora_app = typer.Typer(
    help="LoRA runs (learner.lora): merge a run's adapters into its base model.", no_args_is_help=True
)
app.add_typer(lora_app, name="lora")


@lora_app.command("merge")
def lora_merge(
    run: Annotated[str, typer.Argument(help="the out_dir of a `turnrl train` run with learner.lora")],
    out: Annotated[str, typer.Option(help="the folder to write the merged model and its tokenizer to")],
) -> None:
    """Write a LoRA run's policy as one model (its base with the adapters merged in): a folder that --agent, model:
    and `turnrl serve` load by path."""
    import torch

    from turnrl.agents import make_agent

    ckpt = Path(run) / "checkpoint.pt"
    if not ckpt.is_file():
        fail(f"{run}: no checkpoint.pt there (the out_dir of a `turnrl train` run holds one)")
    if not torch.load(ckpt, map_location="cpu", weights_only=False, mmap=True).get("lora"):  # no full read
        fail(f"{run} was trained without learner.lora: its checkpoint holds the whole model (use run:{run} as is)")
    try:
        agent = make_agent(f"run:{run}", batch_size=1)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    Path(out).mkdir(parents=True, exist_ok=True)
    agent.model.save_pretrained(out)
    agent.tokenizer.save_pretrained(out)
    console.print(f"merged {run} into {out}: use --agent {out}", markup=False, highlight=False, soft_wrap=True)


app.command()(play)  # turnrl/cli/play.py


# `turnrl eval` and `turnrl rollout` live in turnrl/cli/eval.py (what an interrupted run of either does: cli/interrupt.py).
app.command("eval")(eval_cmd)
app.command()(rollout)


def _opponent(h: dict[str, float], frozen: str = "self") -> str:
    """A step's opponent, as the progress line says it (``frozen``: the run's ``multi_agent.opponent``)."""
    v = h.get("opponent_version", -1.0)
    return ("self" if Opponent(frozen).is_policy else frozen) if v < 0 else f"v{int(v)}"


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def train(
    config: Annotated[str, typer.Argument(help="YAML config, e.g. configs/quickstart.yaml")],
    overrides: Annotated[list[str] | None, typer.Argument(help="dotted overrides, e.g. optim.lr=1e-5 steps=10")] = None,
    resume: Annotated[bool, typer.Option(help="continue from OUT_DIR/checkpoint.pt if it exists")] = True,
    imports: ImportOption = None,
) -> None:
    """Train a policy with a registered algorithm (algorithm.name: {algorithms}; yours with --import MODULE): on-policy
    from the environment, offline from a `turnrl rollout` dataset (data.path), or step-wise from stored states
    (data.path); metrics to OUT_DIR/metrics.jsonl and TensorBoard. env.id may be mymodule:myproject/Name-v0, with
    mymodule.py next to the config."""
    from turnrl.rl.config import config_error
    from turnrl.rl.run.evaluate import run_eval_kwargs
    from turnrl.rl.run.held_out import HeldOutError, check_run
    from turnrl.rl.run.trainer import Trainer, load_config

    try:
        cfg = load_config(config, overrides)
    except Exception as e:  # a config that does not load or validate: say why, in one line
        fail(config_error(e, config, overrides))
    search = [Path(config).resolve().parent, Path.cwd()]
    check_game_id(config, str(cfg.env.id), search)
    if cfg.multi_agent is None:  # a game's seats and splits are checked when its source opens, before a model loads
        train_env = make_env(cfg.env.id, cfg.env.kwargs, search)  # fail fast, before loading any model
        held_env = make_env(cfg.env.id, run_eval_kwargs(train_env, cfg.env.kwargs, cfg.env.eval_kwargs), search)
    try:  # before a model loads: the run evaluates (and validates on) no problem it trains on
        on_train = check_run(cfg, None if cfg.multi_agent else train_env, None if cfg.multi_agent else held_env)
    except (HeldOutError, ValueError) as e:
        fail(f"{config}: {e}")
    if on_train:
        console.print(on_train, soft_wrap=True, markup=False, highlight=False)
    from turnrl.agents.models import ModelNotFoundError
    from turnrl.gateway.program import ProgramError, load_function
    from turnrl.rl.placement.ray import RayPlacementError
    from turnrl.rl.run.guard import ConsistencyError
    from turnrl.rl.run.monitors import EpisodeFailures
    from turnrl.rl.sources.replay import OfflineDataError

    if cfg.program is not None and cfg.program.function is not None:  # fail fast; its folder joins sys.path
        try:
            load_function(cfg.program.function, search)
        except ProgramError as e:
            fail(f"{config}: program.function: {e}")
    try:
        trainer = Trainer(cfg)
    except (RayPlacementError, OfflineDataError, ProgramError) as e:
        fail(str(e))
    except (ValueError, ImportError, ModelNotFoundError) as e:  # e.g. a seat the game does not have, an opponent
        fail(f"{config}: {e}")  # that does not load, a game's library not installed, a model name that names none
    if cfg.placement == "ray":  # which node holds each rollout worker and learner rank (OUT_DIR/placement.json)
        from turnrl.rl.placement.nodes import summary

        for line in summary(cfg.out_dir):
            console.print(line, highlight=False, soft_wrap=True, markup=False)
    ckpt = Path(cfg.out_dir) / "checkpoint.pt"
    if resume and ckpt.exists():
        trainer.load(ckpt)
        console.print(f"resumed from {ckpt} at step {trainer.step}")
    from rich.progress import Progress

    with Progress(console=console) as progress:
        task = progress.add_task("training", total=trainer.cfg.steps, completed=trainer.step)

        def show(h: dict[str, float]) -> None:
            held_out = f" held-out {h['eval_success']:.3f}" if "eval_success" in h else ""
            if "eval_success_low" in h:  # its 95 % interval over the distinct items evaluated
                held_out += f" [{h['eval_success_low']:.3f}, {h['eval_success_high']:.3f}] of {h['eval_items']:.0f}"
            if "eval_pag_verifier_balanced_acc" in h:  # self-verification: whether the verifier tells right from wrong
                held_out += f" verifier (balanced) {h['eval_pag_verifier_balanced_acc']:.3f}"
            line = f"step {trainer.step} reward {h.get('reward_mean', 0):.3f} success {h.get('success', 0):.3f}"
            ma = trainer.cfg.multi_agent
            if "win_rate" in h and ma is not None:  # a game: the trained seats' wins, and who they played
                line = (
                    f"step {trainer.step} reward {h.get('reward_mean', 0):.3f} win {h['win_rate']:.3f} invalid "
                    f"{h.get('invalid_moves', 0):.2f} vs {_opponent(h, ma.opponent)}"
                )
            if "pag_verifier_balanced_acc" in h:
                line += f" verifier (balanced) {h['pag_verifier_balanced_acc']:.3f}"
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
        except RayPlacementError as e:  # workers, a learner rank or the head lost: the journal and checkpoint resume it
            saved = trainer.driver.checkpoint_step
            fail(f"{e} (last checkpoint: {ckpt}, step {saved})" if saved is not None else str(e))
        except ConsistencyError as e:  # guard.strict: the step that failed is recorded in metrics.jsonl
            fail(str(e))
        except EpisodeFailures as e:  # a step whose episodes all failed: the last checkpoint is as it was
            saved = trainer.driver.checkpoint_step
            again = (
                f"it resumes from {ckpt} (step {saved})"
                if resume and saved is not None
                else "it starts over (--no-resume)"
                if not resume
                else "it starts over (no checkpoint yet)"
            )
            fail(f"{e}. Fix the cause and run the same command again: {again}")
        finally:
            trainer.close()
    first, last = trainer.history[0], trainer.history[-1]
    label = "success on training tasks (no held-out split)" if on_train else "held-out success"
    if cfg.multi_agent is not None:  # labelled held out or not, beside the floor (a random legal player's wins)
        label = (
            f"wins against {cfg.multi_agent.held_out_opponent(cfg.env.id)} ({trainer.eval_metrics.get('held_out')}"
            f"), floor {last.get('eval_floor_win_rate', 'none')}"
        )
    console.print(
        f"{label}: {first.get('eval_success')} -> {last.get('eval_success')} "
        f"after {trainer.step} steps; run in {cfg.out_dir}"
    )
    if first.get("step") == 0 and trainer.step > 0:  # (a game's evaluations pair by starting state and seat)
        from turnrl.cli.compare import gain_line

        console.print(gain_line(cfg.out_dir, trainer.step), highlight=False, soft_wrap=True)


@app.command()
def plot(run_dir: Annotated[str, typer.Argument(help="a training run folder (with metrics.jsonl)")]) -> None:
    """Draw a training run's learning curves to RUN_DIR/curves.png."""
    from turnrl.rl.run.curves import plot_run

    try:
        out = plot_run(run_dir)
    except FileNotFoundError as e:
        fail(str(e))
    console.print(f"wrote {out}")


@app.command()
def serve(
    agent: Annotated[str, typer.Option(help="agent spec, e.g. smollm2-135m-instruct or hf:PATH")],
    name: Annotated[str | None, typer.Option(help="model name clients ask for (default: the agent spec)")] = None,
    host: Annotated[
        str, typer.Option(help="where to listen; anything but a loopback address needs --api-key")
    ] = "127.0.0.1",
    port: int = 8000,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="TURNRL_API_KEY",
            help="the key every request must send (Authorization: Bearer KEY; on /v1/messages also x-api-key: KEY)",
        ),
    ] = None,
) -> None:
    """Serve an agent over OpenAI- and Anthropic-compatible HTTP APIs (/v1/completions, /v1/chat/completions,
    /v1/responses, /v1/messages)."""
    from turnrl.agents import make_agent
    from turnrl.serving.server import LOOPBACK, AgentServer
    from turnrl.template_tools import tools_note

    if host not in LOOPBACK and not api_key:
        fail(f"listening on {host} (not a loopback address) needs an API key: pass --api-key KEY or set TURNRL_API_KEY")
    server = AgentServer(make_agent(agent), name or agent, host=host, port=port, api_key=api_key)
    console.print(f"serving {name or agent} at {server.url} (Ctrl-C stops)", soft_wrap=True, highlight=False)
    if (note := tools_note(server.agent.tokenizer)) is not None:
        console.print(note, soft_wrap=True, highlight=False)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        server.httpd.server_close()


@app.command()
def quickstart(
    model: Annotated[
        str, typer.Option(help="agent to train after the scripted episodes (a Hugging Face model)")
    ] = "smollm2-135m-instruct",
    no_model: Annotated[bool, typer.Option("--no-model", help="only the scripted episodes")] = False,
    steps: Annotated[int, typer.Option(min=1, help="GRPO steps of the training demo")] = 10,
    eval_tasks: Annotated[int, typer.Option(min=1, help="held-out problems evaluated before and after")] = 102,
    out: Annotated[str, typer.Option(help="the training run's folder")] = "runs/quickstart",
) -> None:
    """List the environments, play scripted episodes, then train a real model briefly and show it improve."""
    from turnrl.cli.quickstart import run

    envs_list()
    sys.exit(run(console, None if no_model else model, steps, eval_tasks, out))


# `turnrl view`, `check-template` and `compare` live in their own modules; only their registration is here.

app.command("view")(view_command)

app.command("check-template")(check_template_command)

app.command("compare")(compare_command)


def _name_algorithms() -> None:
    """`turnrl train --help` lists the registered algorithms (names only: nothing is imported)."""
    from turnrl.rl.algorithms import algorithm_names

    train.__doc__ = (train.__doc__ or "").replace("{algorithms}", ", ".join(algorithm_names()))


#: ``turnrl NAME …`` subcommands that packages add: a typer app each, declared under the ``turnrl.commands``
#: entry-point group (``name = "module:app"``) — turnrl's own methods (``swirl``, ``pag``, ``prm``) come in that way,
#: so the command line imports no method by name
COMMANDS: Registry[Any] = Registry("command", "turnrl.commands")


def _mount_methods() -> None:
    """Each registered subcommand (:data:`COMMANDS`), then ``--import`` on every command. A plug-in may not take a
    built-in command's name, and one that does not load is skipped with a warning (the rest of the CLI works)."""
    apps = [app, envs_app, lora_app]
    taken = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    taken |= {g.name for g in app.registered_groups if g.name}
    for name in COMMANDS.names():
        if name in taken:
            print(
                f"warning: the turnrl.commands entry point {name!r} is a built-in command's name; skipped",
                file=sys.stderr,
            )
            continue
        try:
            sub = COMMANDS.get(name)
        except Exception as e:  # a broken plug-in must not take the whole command line down
            print(f"warning: turnrl command {name!r} does not load, skipped: {e}", file=sys.stderr)
            continue
        app.add_typer(sub, name=name)
        apps.append(sub)
    add_import_option(*apps)


_name_algorithms()
_mount_methods()


def main() -> None:
    """Entry point for ``python -m turnrl``."""
    app()


if __name__ == "__main__":
    main()
