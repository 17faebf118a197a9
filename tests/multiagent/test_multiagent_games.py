"""Games from other libraries and games without a list of starting states train and are evaluated (issue 78, items 1,
2 and 10): TextArena's and PettingZoo's games, and a game of one's own without ``__len__``, are played on seeds —
training on seeds 0 to 99,999, held-out games on 1,000,000 and up — and every seat is told what is new to it, once."""

import itertools
import json
import re
import sys
from pathlib import Path

import pytest
from pettingzoo import AECEnv
from typer.testing import CliRunner

from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.envs.multiagent import MultiAgentTextEnv, make_multi_agent, register_multi_agent
from turnrl.envs.multiagent.core import SEED_START, SEEDS_PER_SPLIT, split_seed
from turnrl.envs.multiagent.external import PettingZooTextEnv, TextArenaEnv
from turnrl.envs.spaces import TextSpace
from turnrl.rl.config import TrainConfig
from turnrl.rl.run.evaluate_multi import evaluate_multi_agent
from turnrl.rollout.multi import MultiAgentRollout
from turnrl.storage import read_jsonl
from turnrl.types import SamplingParams

pytestmark = pytest.mark.timeout(300)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NIM = "pettingzoo:pettingzoo_nim:make_nim"
#: (TextArena game, players): KuhnPoker and LiarsDice hide cards and dice; LiarsDice and ThreePlayerTicTacToe seat 3
TEXTARENA = [
    ("TicTacToe-v0", 2),
    ("KuhnPoker-v0", 2),
    ("ConnectFour-v0", 2),
    ("LiarsDice-v0-small", 3),
    ("ThreePlayerTicTacToe-v0", 3),
]


def fixed_move(text):
    """A scripted held-out opponent (``script:test_multiagent_games:fixed_move``): always the same move."""
    return "[1]"


@pytest.fixture
def tagged(monkeypatch):
    """Every message a TextArena game adds to its log ends with a tag of its own (``<m17>``), so a seat's tokens show
    how many times it was told each one."""
    import textarena as ta

    count, add = itertools.count(), ta.State.add_observation

    def tagging(self, message, observation_type, from_id=ta.GAME_ID, to_id=-1):
        return add(self, f"{message} <m{next(count)}>", observation_type, from_id, to_id)

    monkeypatch.setattr(ta.State, "add_observation", tagging)


@pytest.fixture
def seeds_played(monkeypatch):
    """The game seeds every TextArena and PettingZoo game was started with, by split."""
    played = {"train": [], "test": [], "validation": []}
    seed_of = TextArenaEnv.seed_of

    def record(self, index):
        played[self.split].append(seed_of(self, index))
        return played[self.split][-1]

    monkeypatch.setattr(TextArenaEnv, "seed_of", record)
    monkeypatch.setattr(PettingZooTextEnv, "seed_of", record)
    return played


def told_once(traj, tok, tags=True):
    """Assert that a seat's tokens hold its opening message once and (``tags``) every tagged game message at most
    once: nothing it was told is told again."""
    if not traj.turns:  # the game ended before the seat's first move: no tokens
        return
    text = tok.decode(traj.token_ids, skip_special_tokens=False)
    opening = traj.prompt[-1].content[:40]  # the start of its rules
    assert text.count(opening) == 1, f"{traj.metadata['seat']} was told its opening {text.count(opening)} times"
    if tags:
        counts = {t: text.count(t) for t in re.findall(r"<m\d+>", text)}
        repeated = {t: n for t, n in counts.items() if n > 1}
        assert not repeated, f"{traj.metadata['seat']} was told {len(repeated)} messages again: {repeated}"
        assert counts, "no tagged message reached the seat"


@pytest.fixture
def trainer(trainer_of):
    """``trainer(tmp_path, env, **over)``: ``(trainer, tokenizer)`` of a one-step game run on ``env``; the trainer is
    closed when the test ends."""
    return lambda tmp_path, env, **over: _trainer(trainer_of, tmp_path, env, **over)


def _trainer(trainer_of, tmp_path, env, **over):
    tok = tiny_tokenizer("chatml")
    cfg = TrainConfig(
        **{
            "model": "tiny",
            "env": env,
            "algorithm": {"name": "grpo"},
            "steps": 1,
            "eval_tasks": 4,
            "out_dir": str(tmp_path),
            "seed": 3,
            "rollout": {
                "prompts_per_step": 2,
                "group_size": 2,
                "max_new_tokens": 6,
                "max_context": 3072,
                "temperature": 1.5,
            },
            "multi_agent": {"eval_opponent": "script:test_multiagent_games:fixed_move"},
            **over,
        }
    )
    return trainer_of(cfg, tok, tiny_model(tok, seed=0)), tok


def trained(out, step=1):
    return list(read_jsonl(Path(out) / "train" / f"step-{step}" / "trajectories.jsonl"))


@pytest.mark.parametrize("game, players", TEXTARENA, ids=[g for g, _ in TEXTARENA])
def test_a_textarena_game_trains_on_training_seeds_and_is_evaluated_on_held_out_ones(
    game, players, tmp_path, tagged, seeds_played, one_thread, trainer
):
    tr, tok = trainer(tmp_path, {"id": f"textarena:{game}", "kwargs": {"num_players": players}})
    history = tr.train()
    seats = [f"player_{i}" for i in range(players)]
    trajs = trained(tmp_path)
    assert len(trajs) == 2 * 2 * players and {t.metadata["seat"] for t in trajs} == set(seats)  # self-play: every seat
    assert all(t.group_id.endswith("/" + t.metadata["seat"]) for t in trajs)
    assert history[1]["guard_violations"] == 0 and history[1]["trained_episodes"] > 0
    assert sum(bool(t.turns) for t in trajs) >= 4
    for t in trajs:
        told_once(t, tok)
    report = json.loads((tmp_path / "eval" / "step-1" / "metrics.json").read_text())
    assert report["episodes"] == 4 and report["env_kwargs"]["split"] == "test"
    assert report["opponent"] == "script:test_multiagent_games:fixed_move" and "eval_success" in history[1]
    assert seeds_played["train"] and max(seeds_played["train"]) < SEEDS_PER_SPLIT  # training plays training seeds
    assert len(set(seeds_played["test"])) == 4 and min(seeds_played["test"]) >= SEED_START["test"]  # held-out ones
    # the held-out games alternate the evaluated seat
    rows = [json.loads(line) for line in (tmp_path / "eval" / "step-1" / "items.jsonl").read_text().splitlines()]
    assert {r["seat"] for r in rows} == set(seats[: min(players, 4)])


def test_validation_plays_its_own_seeds_off_the_test_ones(tmp_path, seeds_played, one_thread, trainer):
    """validate_every on a game played on seeds reads the validation range (a pilot chooses its step there): no
    validation game is a training or a test game, and the held-out evaluation still plays only test seeds."""
    tr, _ = trainer(
        tmp_path, {"id": "textarena:TicTacToe-v0", "kwargs": {"num_players": 2}}, validate_every=1, validation_tasks=2
    )
    tr.train()
    assert len(set(seeds_played["validation"])) == 2 and min(seeds_played["validation"]) >= SEED_START["validation"]
    assert max(seeds_played["test"]) < SEED_START["validation"] <= min(seeds_played["validation"])
    assert (tmp_path / "validation").is_dir()


def test_the_seed_ranges_are_disjoint_and_the_held_out_check_compares_them(monkeypatch):
    train, test = (make_multi_agent("textarena:KuhnPoker-v0", split=s) for s in ("train", "test"))
    assert len(train) == len(test) == SEEDS_PER_SPLIT and train.held_out_split == "test"
    assert [train.seed_of(i) for i in (0, 1, SEEDS_PER_SPLIT)] == [0, 1, 0]
    assert [test.seed_of(i) for i in (0, 7)] == [1_000_000, 1_000_007]
    assert train.task_at(5).metadata["canonical"] != test.task_at(5).metadata["canonical"]
    val = make_multi_agent("textarena:KuhnPoker-v0", split="validation")
    assert train.validation_split == "validation" and [val.seed_of(i) for i in (0, 7)] == [2_000_000, 2_000_007]
    ranges = {s: {split_seed(s, i) for i in (0, SEEDS_PER_SPLIT - 1)} for s in SEED_START}
    assert max(ranges["train"]) < min(ranges["test"]) and max(ranges["test"]) < min(ranges["validation"])
    with pytest.raises(ValueError, match="'train', 'test', 'validation'"):
        split_seed("dev", 0)
    with pytest.raises(ValueError, match="split must be one of"):
        make_multi_agent("textarena:KuhnPoker-v0", split="dev")
    from turnrl.rl.run.held_out import HeldOutError, check_game_held_out, check_game_validation

    assert check_game_held_out("textarena:KuhnPoker-v0", {}, None, 64) is None
    assert check_game_validation("textarena:KuhnPoker-v0", {"split": "train"}, None, 64) == {"split": "validation"}
    monkeypatch.setitem(SEED_START, "test", 10)  # a held-out range inside the training one: the check sees it
    with pytest.raises(HeldOutError, match="training figures"):
        check_game_held_out("textarena:KuhnPoker-v0", {}, None, 64)


@pytest.mark.parametrize(
    "env_id, kwargs",
    [
        ("textarena:SimpleNegotiation-v0", {}),
        *[(f"textarena:{g}", {"num_players": n}) for g, n in TEXTARENA],
    ],
)
def test_a_textarena_seat_is_told_what_is_new_to_it_once(env_id, kwargs, tagged):
    """Whole games (scripted moves, so that they last): the rules once, each move and each game message once, and
    not the seat's own move echoed back."""
    tok = tiny_tokenizer("chatml")
    moves = itertools.cycle(
        [
            "[4]",
            "[0]",
            "[check]",
            "[8]",
            "[2]",
            "[3]",
            "[1]",
            "[bet]",
            "[6]",
            "[5]",
            "[7]",
            "[Accept]",
            "[1 2]",
            "[call]",
        ]
    )
    player = ScriptedAgent(tok, lambda text: next(moves))
    envs = [make_multi_agent(env_id, **kwargs) for _ in range(2)]
    trajs = MultiAgentRollout({"p": player}, SamplingParams(max_new_tokens=8), max_context=20_000).run(
        envs, options=[{"index": i} for i in range(2)]
    )
    assert sum(len(t.turns) for t in trajs) >= 4
    for t in trajs:
        told_once(t, tok)
        own = [turn.action.content for turn in t.turns]
        for turn in t.turns[:-1]:  # what it was told after its move does not begin with that move
            told = "\n".join(m.content for m in turn.observation)
            assert not told.startswith(f"[{t.metadata['seat'].replace('player_', 'Player ')}]"), (own, told)


def test_a_seat_is_told_what_is_new_once_in_every_other_game_the_suite_plays(monkeypatch):
    """turnrl's own games and the PettingZoo ones (the example Nim, the test suite's number guessing and
    rock-paper-scissors, a game whose observation is the whole history): each seat's opening once, and no message
    that repeats an earlier one whole."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    tok = tiny_tokenizer("chatml")
    for env_id, replies in (
        ("turnrl/TicTacToe-v0", ["5", "1", "9", "3", "7", "2"]),
        ("turnrl/SolverCritic-v0", ["It is 4. #### 4", "Looks right.", "#### 4"]),
        (NIM, ["1", "2"]),
        ("pettingzoo:test_multiagent_envs:make_guess", ["1", "2", "4", "5"]),
        ("pettingzoo:test_multiagent_envs:make_rps", ["rock", "paper"]),
        ("pettingzoo:test_multiagent_games:make_transcript", ["hello", "there"]),
    ):
        moves = itertools.cycle(replies)
        player = ScriptedAgent(tok, lambda text, moves=moves: next(moves))
        envs = [make_multi_agent(env_id) for _ in range(2)]
        trajs = MultiAgentRollout({"p": player}, SamplingParams(max_new_tokens=16), max_moves=24).run(
            envs, options=[{"index": i} for i in range(2)]
        )
        assert sum(len(t.turns) for t in trajs) >= 4, env_id
        for t in trajs:
            told_once(t, tok, tags=False)
            told = [m.content for turn in t.turns for m in turn.observation]
            for i, earlier in enumerate(told):
                assert not any(len(earlier) > 30 and earlier in later for later in told[i + 1 :]), (env_id, told)


class Transcript(AECEnv):
    """A PettingZoo text game whose observation is the agent's whole history (as TextArena's default wrapper gives):
    the rules, then every move so far; five moves in all."""

    metadata = {"name": "transcript_v0"}
    possible_agents = ["a", "b"]

    def observation_space(self, agent):
        return TextSpace()

    def action_space(self, agent):
        return TextSpace()

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        self.rewards, self._cumulative_rewards = dict.fromkeys(self.agents, 0.0), dict.fromkeys(self.agents, 0.0)
        self.terminations, self.truncations = dict.fromkeys(self.agents, False), dict.fromkeys(self.agents, False)
        self.infos, self.agent_selection = {a: {} for a in self.agents}, "a"
        self.log = ["Say anything; the game lasts five moves in all, and nobody wins it."]

    def observe(self, agent):
        return "\n".join(self.log)

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.log.append(f"move {len(self.log)}: {agent} said {action!r}")
        if len(self.log) > 5:
            self.terminations = dict.fromkeys(self.agents, True)
        self.agent_selection = "b" if agent == "a" else "a"
        self._accumulate_rewards()


def make_transcript():
    return Transcript()


# ---- PettingZoo: the example game, found where it is; outcomes; errors ----


def test_the_example_pettingzoo_game_trains_and_is_evaluated_on_seeds(
    tmp_path, monkeypatch, seeds_played, one_thread, trainer_of
):
    """examples/pettingzoo-nim.yaml, one step with the tiny model, from examples/ (its game found there)."""
    from turnrl.rl.config import load_config

    monkeypatch.chdir(EXAMPLES)  # found in the current folder, without --import
    cfg = load_config(
        EXAMPLES / "pettingzoo-nim.yaml",
        [
            "model=tiny",
            "steps=1",
            "eval_tasks=4",
            f"out_dir={tmp_path}",
            "rollout.prompts_per_step=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=6",
            "optim.minibatch_size=2",
            "optim.grad_accum=1",
        ],
    )
    tok = tiny_tokenizer("chatml")
    tr = trainer_of(cfg, tok, tiny_model(tok, seed=0))
    history = tr.train()
    trajs = trained(tmp_path)
    assert trajs and history[1]["guard_violations"] == 0
    for t in trajs:
        told_once(t, tok, tags=False)
    assert max(seeds_played["train"]) < SEEDS_PER_SPLIT and min(seeds_played["test"]) >= SEED_START["test"]
    report = json.loads((tmp_path / "eval" / "step-1" / "metrics.json").read_text())
    assert report["episodes"] == 4 and report["opponent"] == "script:pettingzoo_nim:random_player"


def test_a_pettingzoo_game_of_nothing_to_nothing_is_a_draw(monkeypatch):
    monkeypatch.chdir(EXAMPLES)
    tok = tiny_tokenizer("chatml")
    one = ScriptedAgent(tok, lambda text: "1")
    m = evaluate_multi_agent(one, NIM, {"max_moves": 2}, opponent=one, episodes=2)  # two moves, stones left: 0-0
    assert m["draw_rate"] == 1.0 and m["episodes"] == 2
    env = make_multi_agent(NIM, smallest=3, largest=3)
    env.reset(seed=0, options={"index": 0})
    for move in ("2", "1"):  # player_1 takes the last stone
        env.step(move)
    assert env.infos["player_1"]["outcome"] == "win" and env.infos["player_0"]["outcome"] == "loss"
    env.reset(seed=0, options={"index": 0})
    env.step("five")  # a forfeit: counted as the game's invalid move
    assert env.infos["player_0"]["invalid_moves"] == 1 and env.infos["player_0"]["outcome"] == "loss"


def test_pettingzoo_modules_are_found_in_the_current_folder_and_bad_ids_are_one_line_errors(tmp_path, monkeypatch):
    from turnrl.cli import app

    runner = CliRunner()
    monkeypatch.setattr(sys, "path", list(sys.path))  # (the folders the modules are found in join it for the test)
    monkeypatch.chdir(EXAMPLES)
    found = runner.invoke(app, ["envs", "check", NIM])
    assert found.exit_code == 0 and "OK" in found.output, found.output
    played = runner.invoke(
        app,
        ["play", NIM, "--seat", "player_1", "--opponent", "script:pettingzoo_nim:perfect_player", "--index", "3"],
        input="3\n2\n1\n3\n",
    )
    assert played.exit_code == 0 and "game over: loss" in played.output, played.output  # perfect play wins
    evaluated = runner.invoke(
        app,
        [
            "eval",
            "--env",
            NIM,
            "--agent",
            "tiny:chatml",
            "--opponent",
            "script:pettingzoo_nim:random_player",
            "--limit",
            "4",
            "--out",
            str(tmp_path / "e"),
        ],
    )
    assert evaluated.exit_code == 0 and "4 games as all against" in evaluated.output, evaluated.output
    kuhn = runner.invoke(
        app,
        [
            "eval",
            "--env",
            "textarena:KuhnPoker-v0",
            "--agent",
            "tiny:chatml",
            "--opponent",
            "self",
            "--seat",
            "player_0",
            "--limit",
            "2",
            "--out",
            str(tmp_path / "k"),
        ],
    )
    assert kuhn.exit_code == 0 and "2 games as player_0 against self" in kuhn.output, kuhn.output
    poker = runner.invoke(
        app,
        ["play", "textarena:KuhnPoker-v0", "--seat", "player_1", "--opponent", "tiny:chatml", "--index", "0"],
        input="[check]\n" * 6,
    )
    assert poker.exit_code == 0 and "game over:" in poker.output and "Kuhn Poker" in poker.output, poker.output
    bad = runner.invoke(app, ["play", NIM, "--opponent", "script:pettingzoo_nim:no_player"])
    assert bad.exit_code == 2 and "has no function 'no_player'" in bad.output, bad.output
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "run.yaml"
    config.write_text(
        f"model: tiny:chatml\nenv: {{id: {NIM}}}\nout_dir: {tmp_path / 'run'}\n"
        "multi_agent: {eval_opponent: 'script:test_multiagent_games:fixed_move'}\n"
    )
    for env_id, says in (
        ("pettingzoo:nosuchmodule:make", "no module named 'nosuchmodule' on sys.path or in"),
        ("pettingzoo:nosuchmodule", "is not of the form 'pettingzoo:MODULE:FACTORY'"),
        ("pettingzoo:pettingzoo_nim:make_chess", "has no factory 'make_chess'"),
        ("textarena:NoSuchGame-v0", "TextArena has no game 'NoSuchGame-v0'"),
    ):
        res = runner.invoke(app, ["train", str(config), f"env.id={env_id}"])
        assert res.exit_code == 2 and says in res.output, res.output
        assert "Traceback" not in res.output and len(res.output.strip().splitlines()) <= 3, res.output
    res = runner.invoke(app, ["train", str(config), "model=no-such-model"])
    assert res.exit_code == 2 and "unknown model 'no-such-model'" in res.output and "Traceback" not in res.output
    (tmp_path / "beside.py").write_text((EXAMPLES / "pettingzoo_nim.py").read_text())  # in the config's folder
    res = runner.invoke(app, ["train", str(config), "env.id=pettingzoo:beside:make_nim", "steps=0", "eval_tasks=1"])
    assert "no module named" not in res.output, res.output


def test_a_game_of_ones_own_without_a_length_trains_on_seeds(tmp_path, one_thread, trainer):
    class Coin(MultiAgentTextEnv):
        """Guess the coin the seed tossed: no list of starting states, only seeds."""

        possible_agents = ["a", "b"]
        seeds: list[int] = []

        def reset(self, seed=None, options=None):
            Coin.seeds.append(seed)
            super().reset(seed=seed, options=options)

        def _reset(self, options):
            self.coin = "heads" if self.np_random.random() < 0.5 else "tails"
            self.tell(self.possible_agents, "Heads or tails?")

        def _play(self, agent, action):
            right = self.coin in action.lower()
            self.reward({agent: 1.0 if right else -1.0})
            if agent == "b":
                self.end()
            else:
                self.agent_selection = "b"

    register_multi_agent("tests/Coin-v0", Coin, replace=True)
    tr, _ = trainer(tmp_path, {"id": "tests/Coin-v0"})
    Coin.seeds.clear()
    tr.train()
    training = [t.seed for t in trained(tmp_path)]
    assert training and all(s is not None and s < SEEDS_PER_SPLIT for s in training)
    held = [s for s in Coin.seeds if s is not None and s >= SEED_START["test"]]
    assert len(held) == 4 * 2 and not set(held) & set(training)  # two evaluations (steps 0 and 1), four games each


def test_a_random_legal_player_of_a_textarena_game_that_lists_its_moves_is_the_held_out_floor(tmp_path, monkeypatch):
    """TextArena's tic-tac-toe and Kuhn poker list the legal moves each turn: examples/textarena_players.py's random
    legal player plays whole games of them with no invalid move, and a held-out evaluation against it reports its own
    figure from the same seeds as the floor; a game that lists none (ConnectFour) has no floor."""
    from turnrl.envs.multiagent.external import listed_moves, random_legal_player

    monkeypatch.syspath_prepend(str(EXAMPLES))
    from textarena_players import first_legal, random_legal

    assert listed_moves("Available Moves: '[0]', '[4]'\nthen\nAvailable Moves: '[4]', '[8]'") == ["[4]", "[8]"]
    assert listed_moves("[GAME] Your available actions are: '[check]', '[bet]'") == ["[check]", "[bet]"]
    assert listed_moves("no list here") == [] and first_legal("no list") == ""
    views = [f"[GAME] move {i}\nAvailable Moves: '[0]', '[1]', '[2]', '[5]'" for i in range(24)]
    assert [random_legal(v) for v in views] == [random_legal(v) for v in views]  # a fixed player: same view, same move
    assert {random_legal(v) for v in views} == {"[0]", "[1]", "[2]", "[5]"}  # and every legal move is drawn
    tok = tiny_tokenizer("chatml")
    for game in ("TicTacToe-v0", "KuhnPoker-v0"):
        env = make_multi_agent(f"textarena:{game}", split="test")
        assert callable(env.random_player)
        team = {s: ScriptedAgent(tok, random_legal_player(i)) for i, s in enumerate(env.possible_agents)}
        trajs = MultiAgentRollout(team, SamplingParams(temperature=0.0, max_new_tokens=8), max_context=4096).run(
            [env], seeds=[0], options=[{"index": 0}]
        )
        assert all(t.metadata["outcome"] in ("win", "loss", "draw") for t in trajs), [t.metadata for t in trajs]
        assert all(t.metadata["invalid_moves"] == 0 for t in trajs)
    assert make_multi_agent("textarena:ConnectFour-v0").random_player is None
    agent = ScriptedAgent(tok, first_legal)
    m = evaluate_multi_agent(
        agent,
        "textarena:TicTacToe-v0",
        {"split": "test"},
        episodes=4,
        seed=0,
        opponent=ScriptedAgent(tok, random_legal),
        opponent_label="random legal",
        opponent_checked=True,
        out_dir=tmp_path / "eval",
    )
    assert m["floor"]["player"] == "random legal moves" and m["floor"]["episodes"] == 4
    assert (tmp_path / "eval" / "floor" / "items.jsonl").is_file() and m["floor_win_rate"] == m["floor"]["win_rate"]
    assert m["held_out"] == "opponent only" and m["invalid_moves_mean"] == 0  # every game from the empty board
