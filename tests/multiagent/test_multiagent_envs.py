"""Multi-agent text environments (turnrl/envs/multiagent/): PettingZoo's cycle with each agent's own messages, the
two built-in games, TextArena's games and PettingZoo text environments by id, and their conformance checks — with
scripted seats (tiny-model seats come with multi-agent rollouts)."""

import re

import numpy as np
import pytest
from pettingzoo import AECEnv, ParallelEnv

from turnrl.envs.multiagent import MultiAgentTextEnv, is_multi_agent, make_multi_agent, register_multi_agent
from turnrl.envs.multiagent.checks import check_multi_agent_environment
from turnrl.envs.multiagent.tictactoe import _value as game_value
from turnrl.envs.multiagent.tictactoe import best_move, openings, random_move, to_move
from turnrl.envs.spaces import TextSpace


def play(env, policies, *, seed=0, index=0, max_iter=200):
    """Run the agent-environment cycle with a policy per seat (a function of the seat's observation and the env);
    return each seat's observations, cumulative rewards and last infos."""
    env.reset(seed=seed, options={"index": index})
    seen = {a: [] for a in env.possible_agents}
    total = dict.fromkeys(env.possible_agents, 0.0)
    infos = {}
    for agent in env.agent_iter(max_iter=max_iter):
        observation, reward, termination, truncation, info = env.last()
        seen[agent].extend(observation)
        total[agent] += reward
        if termination or truncation:
            infos[agent] = dict(info)
            env.step(None)
        else:
            env.step(policies[agent](observation, env))
    assert not env.agents, "the game did not end"
    return seen, total, infos


def perfect(observation, env):
    return f"I take cell {best_move(env.board) + 1}."


def randomly(seed):
    rng = np.random.default_rng(seed)
    return lambda observation, env: str(random_move(env.board, rng) + 1)


# ---- TicTacToe ----


def test_perfect_play_draws_and_never_does_worse_than_the_openings_value_against_random_play():
    env = make_multi_agent("turnrl/TicTacToe-v0", max_opening=0)
    _, total, infos = play(env, {"x": perfect, "o": perfect})
    assert total == {"x": 0.0, "o": 0.0} and infos["x"]["outcome"] == infos["o"]["outcome"] == "draw"
    held_out = make_multi_agent("turnrl/TicTacToe-v0", split="test")
    worse = 0
    for index in range(len(held_out)):
        start = openings("test")[index]
        value = {to_move(start): game_value(start), "o" if to_move(start) == "x" else "x": -game_value(start)}
        for seat in ("x", "o"):
            policies = {seat: perfect, "o" if seat == "x" else "x": randomly(index)}
            _, total, _ = play(held_out, policies, index=index)
            worse += total[seat] < value[seat]
    assert worse == 0


def test_openings_are_split_disjointly_and_an_index_poses_the_same_start():
    train, test = set(openings("train")), set(openings("test"))  # (held out by construction: test_tictactoe_held_out)
    assert train and test and not train & test
    env = make_multi_agent("turnrl/TicTacToe-v0", split="test")
    env.reset(seed=1, options={"index": 7})
    board = env.board
    env.reset(seed=2, options={"index": 7})
    assert env.board == board == openings("test")[7]


def test_a_seat_sees_only_what_it_is_told_never_the_others_text():
    env = make_multi_agent("turnrl/TicTacToe-v0", max_opening=0)
    secret = "my plan is SECRET-PLAN-42"
    seen, _, _ = play(env, {"x": lambda o, e: f"{secret}: {best_move(e.board) + 1}", "o": perfect})
    assert not any(secret in m.content for m in seen["o"])  # o learns x's move, not x's words
    assert any("x played" in m.content for m in seen["o"])
    assert seen["x"][0].role == "system" and "as x" in seen["x"][0].content


def test_invalid_moves_are_retried_then_forfeited_and_counted_never_raised():
    env = make_multi_agent("turnrl/TicTacToe-v0", max_opening=0, retries=1)
    seen, total, infos = play(env, {"x": lambda o, e: "I pass", "o": perfect})
    assert infos["x"]["invalid_moves"] == 2 and infos["x"]["outcome"] == "loss" and total == {"x": -1.0, "o": 1.0}
    assert any("names no cell" in m.content for m in seen["x"])
    env.reset(options={"index": 0})
    env.step("5")
    env.step("5")  # o names a taken cell: told so, and o moves again
    assert env.agent_selection == "o" and env.infos["o"]["invalid_moves"] == 1
    assert "Cell 5 is taken" in env.observe("o")[-1].content


def test_the_turn_limit_truncates_every_seat():
    env = make_multi_agent("turnrl/TicTacToe-v0", max_opening=0, max_turns=3)
    _, _, infos = play(env, {"x": perfect, "o": perfect})
    assert set(infos) == {"x", "o"} and "outcome" not in infos["x"]


# ---- SolverCritic ----


def test_solver_and_critic_are_paid_by_the_final_answer_alone():
    env = make_multi_agent("turnrl/SolverCritic-v0", levels=[1])
    env.reset(options={"index": 3})
    answer = env.task.answer
    wrong = str(int(answer) + 1)

    def solver(observation, env):
        return f"\\boxed{{{answer if any('reviewer' in m.content for m in observation) else wrong}}}"

    seen, total, infos = play(env, {"solver": solver, "critic": lambda o, e: "Check again. VERDICT: wrong"}, index=3)
    assert total == {"solver": 1.0, "critic": 1.0}
    assert infos["solver"]["first_correct"] is False and infos["solver"]["final_correct"] is True
    assert infos["critic"]["verdict"] == "wrong"
    assert any(wrong in m.content for m in seen["critic"])  # the critic reads the solver's first answer


@pytest.mark.parametrize("final", ["\\boxed{%s} or \\boxed{%s}", "%s, or maybe %s", "VERDICT: correct"])
def test_gaming_the_shared_reward_pays_nothing(final):
    """A hedge of two boxed answers, a hedge in words, or a critic's 'correct' on a wrong answer earn 0."""
    env = make_multi_agent("turnrl/SolverCritic-v0", levels=[1])
    env.reset(options={"index": 0})
    answer, wrong = env.task.answer, str(int(env.task.answer) + 3)
    text = final % (answer, wrong) if final.count("%s") == 2 else f"\\boxed{{{wrong}}}"
    _, total, _ = play(env, {"solver": lambda o, e: text, "critic": lambda o, e: "VERDICT: correct"}, index=0)
    assert total == {"solver": 0.0, "critic": 0.0}


# ---- TextArena ----


@pytest.mark.parametrize(
    "game, moves",
    [
        ("TicTacToe-v0", ["[4]", "[0]", "[8]", "[2]", "[1]", "[6]", "[3]", "[5]", "[7]"]),
        ("KuhnPoker-v0", ["[check]"] * 12),
        ("SimpleNegotiation-v0", ["Hello, let us trade.", "[Accept]"] * 10),
    ],
)
def test_textarena_games_play_whole_episodes_with_their_own_rules(game, moves):
    env = make_multi_agent(f"textarena:{game}")
    queue = list(moves)
    seen, total, infos = play(
        env, {a: (lambda o, e: queue.pop(0) if queue else "[check]") for a in env.possible_agents}
    )
    assert set(infos) == {"player_0", "player_1"}
    assert {infos[a]["outcome"] for a in infos} in ({"win", "loss"}, {"draw"})
    assert all(seen[a] and seen[a][0].content.strip() for a in seen)  # each player got its own observations
    if {infos[a]["outcome"] for a in infos} == {"win", "loss"}:
        assert sum(total.values()) == 0.0


def test_textarena_invalid_moves_follow_the_games_rule_and_are_counted():
    env = make_multi_agent("textarena:TicTacToe-v0")
    _, total, infos = play(env, {"player_0": lambda o, e: "no idea", "player_1": lambda o, e: "[4]"})
    assert infos["player_0"]["invalid_moves"] == 2 and infos["player_0"]["outcome"] == "loss"
    assert total["player_0"] < total["player_1"]


def test_textarena_seeds_are_split_and_an_unknown_game_names_close_ones():
    train = make_multi_agent("textarena:KuhnPoker-v0")
    test = make_multi_agent("textarena:KuhnPoker-v0", split="test")
    assert not {train.seed_of(i) for i in range(50)} & {test.seed_of(i) for i in range(50)}
    with pytest.raises(ValueError, match="TextArena has no game 'TicTacTo-v9'.*TicTacToe-v0"):
        make_multi_agent("textarena:TicTacTo-v9")


# ---- PettingZoo ----


class GuessEnv(AECEnv):
    """A PettingZoo AEC environment with text observations and actions, written as PettingZoo's docs show: two
    players name numbers in turn; whoever names the secret first wins. An agent observes the rules at its first turn
    only, then its opponent's last number (what is new to it)."""

    metadata = {"name": "guess_v0"}

    def __init__(self, secret=7):
        super().__init__()
        self.secret = secret
        self.possible_agents = ["player_0", "player_1"]
        self.observation_spaces = {a: TextSpace() for a in self.possible_agents}
        self.action_spaces = {a: TextSpace() for a in self.possible_agents}

    def observation_space(self, agent):
        return self.observation_spaces[agent]

    def action_space(self, agent):
        return self.action_spaces[agent]

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = self.agents[0]
        self.last_guess = dict.fromkeys(self.agents)
        self.moved = dict.fromkeys(self.agents, False)

    def observe(self, agent):
        other = self.last_guess[self.agents[1 - self.agents.index(agent)]] if len(self.agents) == 2 else None
        said = f"Your opponent last said {other}."
        return said if self.moved[agent] else f"Guess the number from 1 to 9. {said}"

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.moved[agent] = True
        digits = re.findall(r"\d", action)
        self.last_guess[agent] = digits[-1] if digits else None
        if digits and int(digits[-1]) == self.secret:
            other = self.agents[1 - self.agents.index(agent)]
            self.rewards = {agent: 1.0, other: -1.0}
            self.terminations = dict.fromkeys(self.agents, True)
        self.agent_selection = self.agents[1 - self.agents.index(agent)]
        self._accumulate_rewards()


def make_guess(secret=7):
    return GuessEnv(secret)


def test_a_pettingzoo_text_environment_loads_as_it_is():
    assert is_multi_agent("pettingzoo:test_multiagent_envs:make_guess")
    env = make_multi_agent("pettingzoo:test_multiagent_envs:make_guess", secret=3)
    seen, total, _ = play(env, {"player_0": lambda o, e: "1", "player_1": lambda o, e: "I say 3"})
    assert total == {"player_0": -1.0, "player_1": 1.0}
    assert "Your opponent last said 1" in seen["player_1"][0].content
    report = check_multi_agent_environment(env)  # random replies rarely name the secret: a game with no end
    assert not report.ok and "did not end" in report.failures[0]
    capped = make_multi_agent("pettingzoo:test_multiagent_envs:make_guess", max_turns=20)  # a turn limit ends it
    assert check_multi_agent_environment(capped).ok


class RockPaperScissors(ParallelEnv):
    """A PettingZoo parallel game with text: both players move at once, three rounds; each sees the last round."""

    metadata = {"name": "text_rps_v0"}
    possible_agents = ["a", "b"]
    BEATS = {"rock": "scissors", "scissors": "paper", "paper": "rock"}

    def observation_space(self, agent):
        return TextSpace()

    def action_space(self, agent):
        return TextSpace()

    def reset(self, seed=None, options=None):
        self.agents, self.round = list(self.possible_agents), 0
        first = "Round 1: say rock, paper or scissors."
        return dict.fromkeys(self.agents, first), {a: {} for a in self.agents}

    def step(self, actions):
        said = {a: next((w for w in self.BEATS if w in (actions.get(a) or "").lower()), None) for a in self.agents}
        a, b = self.agents
        win = 0 if said[a] == said[b] else 1 if said[a] and (said[b] is None or self.BEATS[said[a]] == said[b]) else -1
        self.round += 1
        done = self.round >= 3
        obs = {
            x: f"Round {self.round}: you said {said[x]}, your opponent said {said[y]}. Round {self.round + 1}."
            for x, y in ((a, b), (b, a))
        }
        out = (
            obs,
            {a: float(win), b: float(-win)},
            dict.fromkeys(self.agents, done),
            dict.fromkeys(self.agents, False),
            {x: {} for x in self.agents},
        )
        if done:
            self.agents = []
        return out


def make_rps():
    return RockPaperScissors()


def test_a_parallel_game_is_played_with_simultaneous_moves():
    env = make_multi_agent("pettingzoo:test_multiagent_envs:make_rps")
    assert env.simultaneous and env.possible_agents == ["a", "b"]
    seen, total, _ = play(env, {"a": lambda o, e: "rock", "b": lambda o, e: "paper"})
    assert total == {"a": -3.0, "b": 3.0}  # paper covers rock, three rounds
    # b answers round 1 from round 1's question alone: it never sees a's move of the same round
    assert seen["b"][0].content == "Round 1: say rock, paper or scissors."
    assert "your opponent said paper" in seen["a"][1].content and "Round 2" in seen["a"][1].content
    assert check_multi_agent_environment(make_multi_agent("pettingzoo:test_multiagent_envs:make_rps")).ok


# ---- the registry and the checks ----


@pytest.mark.parametrize(
    "env_id", ["turnrl/TicTacToe-v0", "turnrl/SolverCritic-v0", "textarena:TicTacToe-v0", "textarena:KuhnPoker-v0"]
)
def test_the_conformance_checks_pass_on_every_built_in_and_textarena_game(env_id):
    report = check_multi_agent_environment(make_multi_agent(env_id))
    assert report.ok, str(report)
    assert len(report.episodes) == 3 and all(e.terminated or e.truncated for e in report.episodes)


class Endless(MultiAgentTextEnv):
    possible_agents = ["a", "b"]

    def __init__(self, crash=False, **kwargs):
        super().__init__(**kwargs)
        self.crash = crash

    def _reset(self, options):
        self.tell("a", "go")

    def _play(self, agent, action):
        if self.crash and action == "":
            raise RuntimeError("empty reply")
        self.agent_selection = "b" if agent == "a" else "a"
        self.tell(self.agent_selection, "go")


def test_the_checks_fail_a_game_that_crashes_on_bad_input_or_never_ends():
    crashes = check_multi_agent_environment(Endless(crash=True), max_moves=30)
    assert any("raised RuntimeError: empty reply" in f for f in crashes.failures)
    endless = check_multi_agent_environment(Endless(), max_moves=30)
    assert endless.failures == ["the game did not end within 30 moves"] * 3
    assert check_multi_agent_environment(Endless(max_turns=30), max_moves=30).ok


def test_registration_and_unknown_ids():
    register_multi_agent("tests/Endless-v0", Endless)
    assert isinstance(make_multi_agent("tests/Endless-v0"), Endless)
    with pytest.raises(ValueError, match="already registered"):
        register_multi_agent("tests/Endless-v0", "x:Y")
    with pytest.raises(ValueError, match="Did you mean 'turnrl/TicTacToe-v0'"):
        make_multi_agent("turnrl/TicTacToe-v1")
    with pytest.raises(ValueError, match="name environments its adapter makes"):
        register_multi_agent("textarena:Mine-v0", Endless)
    assert not is_multi_agent("turnrl/Arithmetic-v0")


def test_a_packages_prefix_of_games_plugs_in_as_every_adapter_does(monkeypatch):
    """One registry of id prefixes (ENV_ADAPTERS) for environments written elsewhere, one agent or several: an adapter
    that says multi_agent is made by make_multi_agent, refused by turnrl.make, and its prefix is taken for ids; its
    check's refusal reaches the callers as the ValueError they catch; an adapter that does not load makes no id a game
    (making the id says why)."""
    import turnrl
    from turnrl.cli.shared import console
    from turnrl.envs.registry import ENV_ADAPTERS, EnvAdapter, UnknownEnvironmentError

    made: list[tuple[str, dict]] = []

    def make(env_id: str, **kwargs):
        made.append((env_id, kwargs))
        return Endless(max_turns=kwargs.get("max_turns"))

    def check(env_id: str, search) -> None:
        if not env_id.removeprefix("mygames:"):
            raise UnknownEnvironmentError(f"{env_id!r} is not of the form 'mygames:NAME'")

    ENV_ADAPTERS.register("mygames", EnvAdapter(make=make, check=check, multi_agent=True, usage="mygames:NAME — mine"))
    ENV_ADAPTERS.register("brokengames", "no_such_module_of_games:ADAPTER")
    try:
        assert is_multi_agent("mygames:Endless") and not is_multi_agent("remote:http://127.0.0.1:1/x")
        assert isinstance(make_multi_agent("mygames:Endless", max_turns=3), Endless)
        assert made == [("mygames:Endless", {"max_turns": 3})]
        with pytest.raises(ValueError, match="not of the form 'mygames:NAME'"):
            make_multi_agent("mygames:")
        with pytest.raises(UnknownEnvironmentError, match="several agents: make it with"):
            turnrl.make("mygames:Endless")
        with pytest.raises(ValueError, match="name environments its adapter makes"):
            register_multi_agent("mygames:Other", Endless)
        assert not is_multi_agent("brokengames:x")  # not known to be a game: making it says the adapter does not load
        from typer.testing import CliRunner

        from turnrl.cli import app

        monkeypatch.setattr(console, "width", 200)  # the table as a wide terminal shows it, whatever COLUMNS says
        listed = CliRunner().invoke(app, ["envs", "list"])
        assert "mygames:NAME" in listed.output and "pettingzoo:MODULE:FACTORY" in listed.output
        assert "cannot load its adapter" in listed.output, listed.output
    finally:
        ENV_ADAPTERS.entries.pop("mygames", None)
        ENV_ADAPTERS.entries.pop("brokengames", None)


def test_a_registered_game_whose_module_is_missing_is_an_import_error():
    """A registered entry that does not import is an ImportError (a Ray worker names the node and the module), and a
    registered id may not take an adapter's prefix however it comes in."""
    from turnrl.envs.multiagent.registry import MULTI_AGENT_ENVS

    register_multi_agent("tests/Missing-v0", "no_such_module_of_games:Game")
    try:
        with pytest.raises(ImportError, match="does not load"):
            make_multi_agent("tests/Missing-v0")
        MULTI_AGENT_ENVS.entries["textarena:Mine-v0"] = (
            "turnrl.envs.multiagent.tictactoe:TicTacToe"  # as an entry point
        )
        with pytest.raises(ValueError, match="name environments its adapter makes"):
            MULTI_AGENT_ENVS.get("textarena:Mine-v0")
    finally:
        MULTI_AGENT_ENVS.entries.pop("tests/Missing-v0", None)
        MULTI_AGENT_ENVS.entries.pop("textarena:Mine-v0", None)


def test_envs_check_and_list_take_multi_agent_ids():
    from typer.testing import CliRunner

    from turnrl.cli import app

    runner = CliRunner()
    ok = runner.invoke(app, ["envs", "check", "turnrl/TicTacToe-v0"])
    assert ok.exit_code == 0 and "TicTacToe: OK" in ok.output and "x: " in ok.output
    bad = runner.invoke(app, ["envs", "check", "textarena:NoSuch-v0"])
    assert bad.exit_code == 2 and "TextArena has no game 'NoSuch-v0'" in bad.output
    listed = runner.invoke(app, ["envs", "list"])
    assert "turnrl/SolverCritic-v0" in listed.output and "textarena:GAME" in listed.output
