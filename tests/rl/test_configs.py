"""Every shipped config and every command its header, the README and the docs pages give still work after a refactor:

* each `turnrl …` command written in a config's header comment or in a code block of README.md or docs/ parses
  against the CLI
  (its subcommand, options and arguments exist), and a `turnrl train` command's config and overrides validate;
* each config trains one step with the tiny model — its stored data, where it reads some, made here from tiny-model
  episodes on the config's own environment.
"""

import re
import shlex
from pathlib import Path

import pytest
import torch
import typer
from tiny_trainer import opened

from turnrl.cli import app
from turnrl.rl.algorithms import algorithm_class
from turnrl.rl.config import load_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def header_commands(path: Path) -> list[str]:
    """The `turnrl …` commands of a config's leading comment block (indented lines, with backslash continuations,
    and backticked spans); commands with a `...` placeholder are left out."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:])
    return _commands(lines)


DOC_PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def readme_commands(page: Path = REPO / "README.md") -> list[str]:
    """The `turnrl …` commands in the code blocks of a Markdown page (README.md or a docs page)."""
    lines, inside = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        if inside:
            lines.append(re.sub(r"^(TURNRL_DATA_DIR=\S+ )?\.venv/bin/", "", line.split("  #")[0].split(" # ")[0]))
    return [c for c in _commands(lines) if not c.startswith("turnrl quickstart") or c == "turnrl quickstart"]


def _commands(lines: list[str]) -> list[str]:
    logical, pending = [], ""
    for line in lines:  # join backslash continuations
        part = line.strip() if pending else line.rstrip()
        if part.endswith("\\"):
            pending += part[:-1].rstrip() + " "
            continue
        logical.append(pending + part)
        pending = ""
    out = []
    for line in logical:
        for span in re.findall(r"`(turnrl (?:train|plot|eval|quickstart)[^`]*)`", line):
            out.append(span)
        line = re.sub(r"`[^`]*`", "", line)
        m = re.search(
            r"(?:^|\s)(turnrl (?:train|rollout|eval|swirl|pag|plot|play|envs|serve|view|check-template)\b.*)", line
        )
        if m:
            out.append(re.split(r"\s{2,}\(|\s{3,}", m[1])[0])  # drop a trailing "   (and --mode process)" note
    placeholder = re.compile(r"\[?[A-Z][A-Z_]+\]?")  # a schematic `turnrl train CONFIG [--import MODULE]`
    return [
        " ".join(c.split())
        for c in out
        if "..." not in c and "…" not in c and not any(placeholder.fullmatch(w) for w in c.split())
    ]


def _is_group(cmd) -> bool:
    """A command with subcommands (typer ≥ 0.29 vendors click: its groups are not ``click.Group``)."""
    return hasattr(cmd, "list_commands")


def parse(command: str) -> None:
    """Parse ``command`` with the CLI's own parser, without running it (raises click's usage errors)."""
    args = shlex.split(command)[1:]
    cmd = typer.main.get_command(app)
    ctx = typer.Context(cmd, info_name="turnrl")
    while _is_group(cmd):  # walk down the subcommands
        name, args = args[0], args[1:]
        cmd = cmd.get_command(ctx, name)
        assert cmd is not None, f"no command {name!r} in {command!r}"
        ctx = (
            typer.Context(cmd, info_name=name, parent=ctx)
            if _is_group(cmd)
            else cmd.make_context(name, list(args), parent=ctx)
        )
    if cmd.name == "train":
        load_config(Path.cwd() / ctx.params["config"], ctx.params["overrides"])  # the config and its overrides validate


def test_parse_refuses_what_the_cli_refuses():
    parse("turnrl train configs/quickstart.yaml steps=3")
    for bad in (
        "turnrl no-such-command",
        "turnrl eval --no-such-option 1",
        "turnrl swirl no-such-step",
        "turnrl train configs/quickstart.yaml stepz=3",
    ):
        with pytest.raises(Exception):  # noqa: B017 — any refusal: click's usage errors or the config's
            parse(bad)


def all_commands() -> list[tuple[str, str]]:
    return [(p.name, c) for p in CONFIGS for c in header_commands(p)] + [
        (str(page.relative_to(REPO)), c) for page in DOC_PAGES for c in readme_commands(page)
    ]


def test_the_command_extraction_finds_the_documented_pipelines():
    names = {c for _, c in all_commands()}
    assert "turnrl swirl decompose runs/swirl-arith-kept.parquet --out runs/swirl-arith-steps.parquet" in names
    assert any(
        c.startswith("turnrl rollout --env turnrl/Arithmetic-v0") and c.endswith("--out runs/arith-data.parquet")
        for c in names
    )
    assert "turnrl train configs/quickstart.yaml placement=ray learner.backend=deepspeed learner.ranks=2" in names
    assert len(names) >= 40


@pytest.mark.parametrize("where,command", all_commands(), ids=lambda x: x if len(x) < 60 else x[:57] + "...")
def test_every_documented_command_parses(where, command, monkeypatch):
    # commands the docs run from examples/ (`cd examples` first): they name a config or an env found there
    in_examples = "examples/" not in command and (
        "inventory" in command
        or any((REPO / "examples" / word).is_file() for word in command.split() if word.endswith(".yaml"))
    )
    monkeypatch.chdir(REPO / "examples" if in_examples else REPO)
    parse(command)


# ---- one training step per config, tiny model ----


def _sample_data(cfg, path: Path, tmp: Path) -> None:
    """Episodes of the tiny model on the config's env (half of each group marked correct, so that correct-only and
    pairwise objectives have something), or their step rows for a source of stored states."""
    from turnrl.agents import make_agent
    from turnrl.agents.base import SamplingParams
    from turnrl.methods.swirl.steps import decompose_all
    from turnrl.rl.sources.collect import rollout_dataset
    from turnrl.storage import load, save

    agent = make_agent("tiny:chatml", batch_size=8)
    raw = tmp / "raw.parquet"
    params = SamplingParams(temperature=cfg.rollout.temperature, max_new_tokens=8)
    rollout_dataset(
        agent, "tiny:chatml", cfg.env.id, out=raw, tasks=2, samples=4, params=params, env_kwargs=cfg.env.kwargs
    )
    episodes = []
    for t in load(raw):
        if t.metadata["sample"] < 2 and t.turns:
            last = t.turns[-1].model_copy(update={"reward": 1.0, "info": {**t.turns[-1].info, "correct": True}})
            t = t.model_copy(update={"turns": [*t.turns[:-1], last]})
        episodes.append(t)
    stored = algorithm_class(cfg.algorithm.name).source_class().__name__ == "StateSource"
    path.parent.mkdir(parents=True, exist_ok=True)
    save(decompose_all(episodes) if stored else episodes, path)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_config_trains_one_step_with_the_tiny_model(path, tmp_path, monkeypatch, one_thread):
    from turnrl.rl.run.trainer import Trainer

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(REPO))  # as from the repository, where a config finds examples/ (its players)
    cfg = load_config(path)
    source = algorithm_class(cfg.algorithm.name).source_class()
    over = [
        "model=tiny:chatml",
        "steps=1",
        "eval_tasks=1",
        "eval_every=0",
        f"out_dir={tmp_path / 'run'}",
        "rollout.prompts_per_step=1",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
        "optim.minibatch_size=2",
        "optim.grad_accum=1",
    ]
    if getattr(cfg.algorithm, "critic_model", None):  # a separate critic, the tiny model too: functions-ppo names
        # SmolLM2, which a critic loads as any model by name (extra_models' `load`, tested with SmolLM2 as a policy)
        over.append("algorithm.critic_model=tiny:chatml")
    if cfg.data is not None:
        over.append("data.epochs=null")
        if source.__name__ != "StateSource":
            over.append("data.batch_size=4")
        _sample_data(cfg, Path(cfg.data.path), tmp_path)
    small = load_config(path, over)
    with opened(Trainer(small)) as trainer:
        history = trainer.train()
    assert len(history) == 2 and "eval_success" in history[0] and "eval_success" in history[1]
    step = history[1]
    assert step["rollout_episodes"] > 0 or step.get("data_episodes", 0) > 0, step
    if step.get("skipped"):  # dynamic sampling found no group with a reward signal in the tiny model's episodes
        assert cfg.algorithm.dynamic_sampling, step  # type: ignore[attr-defined]  # DAPO's field
    else:
        assert torch.isfinite(torch.tensor(step["loss"])), step
