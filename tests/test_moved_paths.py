"""Modules that moved keep their old import path for one release: the old path warns once, with the new path, and
gives the new module's very objects (so code and patches through either path agree)."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOVED_CALL = re.compile(r'moved_module\(__name__, "([\w.]+)"\)')


def moved_paths() -> dict[str, str]:
    """Every old path (a module whose body is a ``moved_module`` call) and where it moved."""
    found = {}
    for path in (ROOT / "turnrl").rglob("*.py"):
        match = MOVED_CALL.search(path.read_text(encoding="utf-8"))
        if match:
            found[".".join(path.relative_to(ROOT).with_suffix("").parts)] = match.group(1)
    return found


def test_the_moved_paths_are_named_on_the_architecture_page():
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = page.split("### Moved paths", 1)[1].split("\n## ", 1)[0]
    for old, new in moved_paths().items():
        rel = old.removeprefix("turnrl.").replace(".", "/") + ".py"
        assert f"`{rel}`" in section, f"{rel} (moved to {new}) is not listed under 'Moved paths'"


def test_an_old_path_warns_once_and_gives_the_new_module():
    moved = moved_paths()
    assert "turnrl.rl.run.config" in moved  # the checks below would pass vacuously without any
    script = textwrap.dedent(f"""
        import importlib, sys, warnings
        moved = {moved!r}
        for old, new in moved.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                first = importlib.import_module(old)
                again = importlib.import_module(old)
            mine = [w for w in caught if issubclass(w.category, FutureWarning)]
            assert len(mine) == 1, (old, [str(w.message) for w in caught])
            assert new in str(mine[0].message) and old in str(mine[0].message), str(mine[0].message)
            assert first is again is importlib.import_module(new) is sys.modules[old], old
        from turnrl.rl.run.config import TrainConfig as Old
        from turnrl.rl.config import TrainConfig as New
        assert Old is New
        print("checked", len(moved))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"checked {len(moved)}" in out.stdout
