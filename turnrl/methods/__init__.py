"""Methods: each folder holds everything one method adds to the core — its algorithm(s), experience source, rollout
hooks, metrics, data tools and CLI subcommands — and plugs in through the algorithm registry
(:mod:`turnrl.rl.algorithms`) and the subcommand table below. The core still names them in a few places (the
registry's table of built-ins, the monitors' table, PAG's report lines): docs/ARCHITECTURE.md, "Known gaps".

* :mod:`turnrl.methods.pag` — PAG, the policy as its own generative verifier (docs/algorithms.md §7);
* :mod:`turnrl.methods.swirl` — SWiRL, step-wise RL on multi-step tool use (§1, §10);
* :mod:`turnrl.methods.dqo` — DQO, offline soft-Q learning (§2);
* :mod:`turnrl.methods.offline` — the offline baselines on stored data: SFT, RFT, DPO (§9);
* :mod:`turnrl.methods.prm` — PRM for code: process labels and the process reward model (§8).
"""

#: ``turnrl NAME …`` subcommands: a typer app per method, imported when the CLI starts ("module:attribute").
COMMANDS: dict[str, str] = {
    "swirl": "turnrl.methods.swirl.cli:app",
    "pag": "turnrl.methods.pag.cli:app",
    "prm": "turnrl.methods.prm.cli:app",
}

#: Training-health checks the methods add to :func:`turnrl.rl.run.monitors.check_health` ("module:function", each
#: ``check(history, info) -> warning or None``).
MONITORS: tuple[str, ...] = (
    "turnrl.methods.pag.monitors:verdict_collapse",
)
