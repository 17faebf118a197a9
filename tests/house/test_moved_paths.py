"""The old module paths were removed before the first release: each is listed in CHANGELOG.md with its new path,
fails to import, and its new path imports; so were the old names kept in modules that stayed (the changelog names
them)."""

import importlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `(turnrl[\w.]*)` \| `(turnrl[\w.]*)` \|$", re.M)


def removed_paths() -> dict[str, str]:
    """CHANGELOG.md's table of removed paths: old -> new."""
    return dict(ROW.findall((ROOT / "CHANGELOG.md").read_text(encoding="utf-8")))


def test_each_removed_path_is_gone_and_its_new_path_imports():
    removed = removed_paths()
    assert len(removed) == 46 and removed["turnrl.rl.run.config"] == "turnrl.rl.config"  # the table was read
    for old, new in removed.items():
        assert not (ROOT / (old.replace(".", "/") + ".py")).exists(), old
        importlib.import_module(new)
    script = textwrap.dedent(f"""
        import importlib
        for old in {sorted(removed)!r}:
            try:
                importlib.import_module(old)
            except ModuleNotFoundError:
                continue
            raise SystemExit(f"{{old}} still imports")
        import turnrl.methods
        assert not hasattr(turnrl.methods, "MONITORS")
        import turnrl.cli, turnrl.rl.run.monitors, turnrl.rl.run.eval_report, turnrl.rl.formulas.losses
        for module, name in [(turnrl.cli, "parse_kwargs"), (turnrl.cli, "train"), (turnrl.rl.run.monitors, "method_checks"),
                             (turnrl.rl.run.eval_report, "self_verification_lines"),
                             (turnrl.rl.formulas.losses, "behaviour_weights")]:
            assert not hasattr(module, name), (module.__name__, name)
        print("gone", {len(removed)})
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and f"gone {len(removed)}" in out.stdout, out.stdout + out.stderr[-3000:]
