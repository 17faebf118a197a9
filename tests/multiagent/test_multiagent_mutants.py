"""Tests added for the breaks that survived the first mutation pass over the multi-agent code (issue 78;
``scripts/mutation_pass.py``, whose break key each test names): each fails with its break in place and passes without.
They are small and direct — a rollout of scripted seats, the runner of one step, the figures on hand-built episodes,
fake learners — so that they fail for the one reason they are about."""

import pytest
import torch
from pettingzoo import AECEnv

from turnrl.agents.base import SamplingParams
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.envs.multiagent import make_multi_agent
from turnrl.envs.multiagent.external import PettingZooTextEnv
from turnrl.envs.spaces import TextSpace
from turnrl.rollout.job import Job
from turnrl.rollout.multi import MultiAgentRollout
from turnrl.types import Trajectory

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=6)


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer("chatml")


def ttt(**kwargs):
    return make_multi_agent("turnrl/TicTacToe-v0", max_opening=0, **kwargs)


def scripted(tok, moves):
    """Seats that play the given cells in turn."""
    queues = {seat: iter(cells) for seat, cells in moves.items()}
    return {seat: ScriptedAgent(tok, lambda prompt, seat=seat: next(queues[seat])) for seat in moves}


# ---- turnrl/rollout/multi.py ----


def test_a_game_its_turn_limit_cuts_is_truncated_on_every_seat_and_a_finished_one_is_not(tok):
    """R6: the game's own turn limit (``max_turns``) truncates it; the rollout's views say so."""
    cut = MultiAgentRollout(scripted(tok, {"x": ["1", "2", "3"], "o": ["4", "5"]}), PARAMS).run([ttt(max_turns=3)])
    assert [len(t.turns) for t in cut] == [2, 1]
    assert all(t.truncated and not t.terminated and t.metadata["outcome"] is None for t in cut)
    whole = MultiAgentRollout(scripted(tok, {"x": ["1", "2", "3"], "o": ["4", "5"]}), PARAMS).run([ttt()])
    assert all(t.terminated and not t.truncated for t in whole) and whole[0].metadata["outcome"] == "win"


class Failing(ScriptedAgent):
    def generate(self, prompts, params, **kwargs):
        raise RuntimeError("CUDA out of memory")


def test_a_trained_policys_failure_is_raised_not_taken_for_a_games_end(tok):
    """R7: a frozen opponent that fails ends its games with the reason; the policy being trained failing is a bug
    (or out of memory), raised."""
    players = {"me": ScriptedAgent(tok, lambda p: "5"), "far": Failing(tok, lambda p: "")}
    frozen = MultiAgentRollout(players, PARAMS, seats={"x": "me", "o": "far"}).run([ttt()])
    assert all("policy 'far' failed to move: RuntimeError" in t.error for t in frozen)
    trained = MultiAgentRollout(players, PARAMS, seats={"x": "me", "o": "far"}, versions={"far": lambda: 0})
    with pytest.raises(RuntimeError, match="out of memory"):
        trained.run([ttt()])


# ---- turnrl/rl/sources/multi.py ----


def runner(tmp_path, tok, policy, **ma):
    from turnrl.rl.config import TrainConfig
    from turnrl.rl.sources.multi import MultiAgentRunner

    cfg = TrainConfig(
        model="tiny",
        env={"id": "turnrl/TicTacToe-v0"},
        algorithm={"name": "grpo"},
        steps=1,
        rollout={"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 6},
        out_dir=str(tmp_path),
        multi_agent=ma,
    )
    return MultiAgentRunner(cfg, ScriptedAgent(tok, policy), lambda: 0)


JOBS = [Job(0, 0, task, sample) for task in range(4) for sample in range(2)]


def test_self_play_trains_only_the_train_seats(tmp_path, tok):
    """S3: under self-play the policy plays every seat, and only the views of ``train_seats`` train."""
    trajs, _ = runner(tmp_path, tok, lambda p: "I pass", train_seats=["o"]).run(JOBS)
    assert trajs and {t.metadata["seat"] for t in trajs} == {"o"} and len(trajs) == len(JOBS)


def test_the_frozen_opponent_plays_its_seats_not_the_policy(tmp_path, tok):
    """S5: against ``perfect`` a policy that never names a cell loses every game, its opponent never forfeits; the
    policy playing the other seat too would forfeit there, and hand the trained seat wins."""
    trajs, _ = runner(tmp_path, tok, lambda p: "I pass", opponent="perfect", eval_opponent="random").run(JOBS)
    assert len(trajs) == len(JOBS) and {t.metadata["outcome"] for t in trajs} == {"loss"}
    told = [m.content for t in trajs for m in t.prompt]  # the opponent moved first in some games, validly
    assert any(" played " in text for text in told)
    assert not any("forfeits: you win" in m.content for t in trajs for turn in t.turns for m in turn.observation)


def view(seat, outcome, invalid, reward, tokens=2):
    t = Trajectory(
        env_id="g",
        task_id="0",
        prompt=[],
        turns=[],
        token_ids=[5] * tokens,
        loss_mask=[1] * tokens,
        logprobs=[0.0] * tokens,
    )
    t.metadata.update(seat=seat, outcome=outcome, invalid_moves=invalid, seat_reward=reward)
    return t


def test_step_figures_count_solved_games_as_wins_and_add_up_invalid_moves():
    """S7, S8: ``win_rate`` counts a cooperative game's ``solved`` (as the held-out figure does), and
    ``invalid_moves`` is the invalid moves of all games over the number of games."""
    from turnrl.rl.sources.multi import seat_metrics

    m = seat_metrics(
        [
            view("solver", "solved", 2, 1.0),
            view("critic", "solved", 0, 1.0),
            view("solver", "failed", 1, 0.0),
            view("critic", "failed", 3, 0.0),
        ]
    )
    assert m["win_rate"] == 0.5 and m["invalid_moves"] == 6 / 4
    assert m["seat_solver_solved"] == 0.5 and m["seat_critic_failed"] == 0.5 and m["seat_solver_invalid_moves"] == 1.5
    m = seat_metrics([view("x", "win", 0, 1.0), view("o", "loss", 2, -1.0), view("x", "draw", 1, 0.0)])
    assert m["win_rate"] == pytest.approx(1 / 3) and m["invalid_moves"] == 1.0 and m["seat_x_reward"] == 0.5


# ---- turnrl/rl/core/policies.py ----


def test_figures_over_policies_sum_counts_max_maxima_and_weight_gaps_by_tokens():
    """P1-P3: over several policies a count is the sum, a ``*_max`` the largest, the lag-0 gap the mean over all
    their tokens."""
    from turnrl.rl.core.policies import merge_metrics

    m = merge_metrics(
        {
            "A": {"logp_diff_max": 0.1, "lag0_tokens": 30.0, "logp_diff_lag0": 0.001, "loss": 1.0},
            "B": {"logp_diff_max": 0.4, "lag0_tokens": 10.0, "logp_diff_lag0": 0.005, "loss": 3.0},
        }
    )
    assert m["logp_diff_max"] == 0.4 and m["lag0_tokens"] == 40.0 and m["loss"] == 2.0
    assert m["logp_diff_lag0"] == pytest.approx((30 * 0.001 + 10 * 0.005) / 40) and m["B/logp_diff_max"] == 0.4


class FakeLearner:
    def __init__(self):
        self.version, self.updates, self.tokenizer, self.cfg, self.seen = 0, 0, None, None, []
        self.scheduler = type("S", (), {"steps": 0, "step": lambda s: setattr(s, "steps", s.steps + 1)})()

    def update(self, trajectories):
        self.seen.append(list(trajectories))
        self.version, self.updates = self.version + 1, self.updates + 1
        self.scheduler.step()
        return {"loss": 1.0, "train_tokens": float(len(trajectories))}


def test_a_policy_with_nothing_to_train_keeps_its_weights_but_moves_with_the_run():
    """P5, P6: its version is the run's step and its learning-rate schedule moves on, as the trained one's do; each
    learner sees only its own policy's episodes."""
    from turnrl.rl.core.policies import LearnerSet

    a, b = FakeLearner(), FakeLearner()
    learners = LearnerSet({"A": a, "B": b})
    mine = [view("x", "win", 0, 1.0) for _ in range(3)]
    for t in mine:
        t.metadata["policy"] = "A"
    for step in (1, 2):
        out = learners.update(mine)
        assert learners.versions() == {"A": step, "B": step} and out["policy_version"] == step
        assert a.scheduler.steps == b.scheduler.steps == step and out["B/skipped"] == 1.0
    assert a.seen == [mine, mine] and b.seen == []
    stray = view("x", "win", 0, 1.0)
    stray.metadata["policy"] = "C"
    with pytest.raises(ValueError, match="an episode of policy 'C' reached the learners of A, B"):
        learners.update([stray])


# ---- turnrl/rl/sources/league.py ----


def test_a_past_self_plays_each_version_it_is_given(tok):
    """L5: the frozen copy loads every version the league draws, not only its first."""
    from turnrl.agents.hf import HFAgent
    from turnrl.rl.sources.league import PastSelf, trained_weights

    live = HFAgent(tiny_model(tok, seed=0), tok, kv_cache_mb=0)
    past = PastSelf(live)
    first = trained_weights(live.model)
    with torch.no_grad():
        for p in live.model.parameters():
            p.add_(0.5)
    second = trained_weights(live.model)
    for version, weights in ((1, first), (2, second), (1, first)):
        played = dict(past.load(version, weights).model.named_parameters())
        assert all(torch.equal(played[n], w) for n, w in weights.items()), version
    assert past.agent.model is not live.model


# ---- the game adapters ----


def test_tic_tac_toe_tells_a_move_to_the_seat_that_moves_next():
    """T4: after x plays, o is told x's move and the board (its turn), and x is told nothing (it knows its move)."""
    env = ttt()
    env.reset(options={"index": 0})
    env.step("5")
    assert env.observe("x") == () and env.agent_selection == "o"
    told = env.observe("o")[-1].content
    assert told.startswith("x played 5.") and " 4 | x | 6" in told and told.endswith("Your move (o).")


def test_a_textarena_invalid_move_is_counted_on_the_move_that_made_it():
    """E7: a refused move counts at once (the move's turn records it), not at the player's next move."""
    env = make_multi_agent("textarena:TicTacToe-v0")
    env.reset(options={"index": 0})
    env.step("no idea")  # refused: the same player tries again
    assert env.agent_selection == "player_0" and env.infos["player_0"]["invalid_moves"] == 1
    env.step("[4]")
    assert env.agent_selection == "player_1" and env.infos["player_0"]["invalid_moves"] == 1


class PaysEachMove(AECEnv):
    """A PettingZoo text game of four moves: ``a`` is paid 1 at each of its two moves, ``b`` 1.5 at its last:
    ``a`` wins on its total (2 against 1.5), though ``b`` is paid more at the last move."""

    metadata = {"name": "pays_v0"}
    possible_agents = ["a", "b"]

    def observation_space(self, agent):
        return TextSpace()

    def action_space(self, agent):
        return TextSpace()

    def reset(self, seed=None, options=None):
        self.agents, self.moves = list(self.possible_agents), 0
        self.rewards, self._cumulative_rewards = dict.fromkeys(self.agents, 0.0), dict.fromkeys(self.agents, 0.0)
        self.terminations, self.truncations = dict.fromkeys(self.agents, False), dict.fromkeys(self.agents, False)
        self.infos, self.agent_selection = {a: {} for a in self.agents}, "a"

    def observe(self, agent):
        return f"move {self.moves}"

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.moves += 1
        self.rewards = {"a": 1.0 if agent == "a" else 0.0, "b": 1.5 if self.moves == 4 else 0.0}
        if self.moves == 4:
            self.terminations = dict.fromkeys(self.agents, True)
        self.agent_selection = "b" if agent == "a" else "a"
        self._accumulate_rewards()


def test_a_pettingzoo_games_outcome_is_by_its_totals_over_the_game():
    """E5: the outcome comes from every reward of the game added up, not from the last step's."""
    env = PettingZooTextEnv(PaysEachMove())
    env.reset(options={"index": 0})
    for move in ("1", "2", "3", "4"):
        env.step(move)
    assert env.totals == {"a": 2.0, "b": 1.5}
    assert env.infos["a"]["outcome"] == "win" and env.infos["b"]["outcome"] == "loss"
