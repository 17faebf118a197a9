"""What a Ray worker imports before its first step (rl/placement/shipping.py's ``needed_modules``): the modules outside
turnrl a run's environment id and algorithm name — so that a node missing one is named before any step, whichever
way the id names its code: ``module:Name-v0``, or an adapter's prefix whose adapter says which modules it needs."""

import pytest

from turnrl.rl.placement.shipping import import_problems, needed_modules


@pytest.mark.parametrize(
    ("env_id", "modules"),
    [
        ("turnrl/Arithmetic-v0", []),  # built in
        ("toy_envs:tests/Upper-v0", ["toy_envs"]),  # a module that registers the id
        ("trl:my_tools.env:Counter", ["my_tools.env"]),  # a class written for TRL
        ("verifiers:vf-arithmetic", []),  # verifiers finds its own (an installed name, a v1 task set)
        ("turnrl/TicTacToe-v0", []),  # a built-in game
        ("pettingzoo:pettingzoo_nim:make_nim", ["pettingzoo_nim"]),  # the user's factory, not PettingZoo itself
        ("textarena:KuhnPoker-v0", ["textarena"]),
        ("remote:http://127.0.0.1:8000/turnrl/Arithmetic-v0", []),  # a server runs it
    ],
)
def test_each_kind_of_id_names_the_modules_its_workers_import(env_id, modules):
    assert needed_modules("grpo", env_id) == modules


def test_a_registered_games_module_is_imported_first():
    from turnrl.envs.multiagent import register_multi_agent
    from turnrl.envs.multiagent.registry import MULTI_AGENT_ENVS

    register_multi_agent("tests/Shipped-v0", "my_games.board:Board")
    try:
        assert needed_modules("grpo", "tests/Shipped-v0") == ["my_games.board"]
    finally:
        MULTI_AGENT_ENVS.entries.pop("tests/Shipped-v0")


def test_a_missing_module_is_a_problem_named_before_the_first_step():
    problems, files = import_problems(needed_modules("grpo", "trl:no_such_module_here:Env"))
    assert [p["module"] for p in problems] == ["no_such_module_here"] and not files
    assert problems[0]["missing"] == "no_such_module_here"
