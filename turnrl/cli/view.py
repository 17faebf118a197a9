"""The ``turnrl view`` command (registered in :mod:`turnrl.cli`); the server and index load when it runs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml


def find_model(path: str | Path) -> str | None:
    """The ``model`` named by a run's ``config.yaml``/``config.json`` in ``path`` or up to two folders above it."""
    here = Path(path).resolve()
    folders = [here if here.is_dir() else here.parent]
    folders += list(folders[0].parents)[:2]
    for folder in folders:
        for name in ("config.yaml", "config.yml", "config.json"):
            f = folder / name
            if f.is_file():
                try:
                    data = json.loads(f.read_text()) if f.suffix == ".json" else yaml.safe_load(f.read_text())
                except (ValueError, yaml.YAMLError):
                    continue
                if isinstance(data, dict) and isinstance(data.get("model"), str):
                    return data["model"]
    return None


def view_command(
    path: Annotated[str, typer.Argument(help="a run folder, an eval folder, or a trajectories .jsonl/.parquet file")],
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="tokenizer for the token texts: an agent spec (smollm2-135m-instruct, hf:PATH, tiny:chatml); "
            "default: the run's config.yaml model, else token ids only"
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="address to bind (keep 127.0.0.1 unless you mean to share)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port (0 picks a free one)")] = 8765,
    open_browser: Annotated[
        bool, typer.Option("--open/--no-open", help="open the page in the default browser")
    ] = False,
    stop_after: Annotated[
        float | None, typer.Option(help="stop serving after this many seconds (scripts, tests)")
    ] = None,
) -> None:
    """Browse episodes in a local web page: filters, conversation, tokens (trained or not), groups side by side."""
    from rich.console import Console

    from turnrl.view import EpisodeIndex, ViewApp, ViewServer

    console = Console()
    try:
        index = EpisodeIndex.open(path)
    except FileNotFoundError as e:
        console.print(f"[red]error:[/red] {e}", soft_wrap=True, highlight=False)
        raise typer.Exit(2) from e
    spec = tokenizer or find_model(path)
    tok: Any = None
    if spec:
        from turnrl.cli.template_check import load_tokenizer

        try:
            tok = load_tokenizer(spec)
        except (OSError, ValueError, KeyError) as e:
            console.print(
                f"[yellow]warning:[/yellow] could not load tokenizer {spec!r} ({e}); showing token ids only",
                soft_wrap=True,
                highlight=False,
            )
            spec = None
    try:
        server = ViewServer(ViewApp(index, tok, spec), host=host, port=port)
    except OSError as e:
        console.print(f"[red]error:[/red] cannot listen on {host}:{port}: {e}; try --port 0", highlight=False)
        raise typer.Exit(2) from e
    console.print(
        f"{len(index.sources)} trajectories file(s) under {path}; open {server.url}  (Ctrl-C stops)",
        soft_wrap=True,
        highlight=False,
    )
    if open_browser:
        import webbrowser

        webbrowser.open(server.url)
    server.start()
    try:
        deadline = None if stop_after is None else time.monotonic() + stop_after
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
