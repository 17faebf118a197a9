"""Multi-agent rollouts (turnrl/rollout/multi.py): each seat's view is its own token-exact trajectory, sampled by its
own policy, with its own rewards; bad input ends an episode, never the batch."""

import pytest
import torch

from turnrl.agents.base import Capabilities, SamplingParams, capabilities_of
from turnrl.agents.hf import HFAgent
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.envs.multiagent import MultiAgentTextEnv, make_multi_agent
from turnrl.rl.core.forward import sequence_logprobs
from turnrl.rollout.multi import MultiAgentRollout

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=6)


class Recorder:
    """A policy that remembers every prompt it was sent and every completion it returned."""

    def __init__(self, agent):
        self.agent, self.tokenizer, self.calls = agent, agent.tokenizer, []

    @property
    def capabilities(self):
        return Capabilities(seeds=capabilities_of(self.agent).seeds, eos_ids=capabilities_of(self.agent).eos_ids)

    def generate(self, prompts, params, *, seeds=None):
        outs = self.agent.generate(prompts, params, **({"seeds": seeds} if seeds is not None else {}))
        self.calls.extend(zip([list(p) for p in prompts], outs))
        return outs


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer("chatml")


def hf(tok, seed):
    return HFAgent(tiny_model(tok, seed=seed), tok, kv_cache_mb=0)


def games(n, **kwargs):
    return [make_multi_agent("turnrl/TicTacToe-v0", max_turns=6, **kwargs) for _ in range(n)]


def test_each_seat_is_its_own_token_exact_sequence_of_what_its_policy_sampled(tok):
    policy = Recorder(hf(tok, 0))
    trajs = MultiAgentRollout({"shared": policy}, PARAMS).run(
        games(3, retries=2), group_ids=["a", "b", "c"], options=[{"index": i} for i in range(3)], sample_seeds=[0, 1, 2]
    )
    assert [t.metadata["seat"] for t in trajs] == ["x", "o"] * 3
    assert [t.group_id for t in trajs[:2]] == ["a/x", "a/o"]
    sampled = {tuple(p): c for p, c in policy.calls}
    moves = 0
    for t in trajs:
        if not t.turns:  # a seat can win by forfeit before it moves: no tokens, its reward in metadata
            assert t.token_ids is None and t.metadata["seat_reward"] != 0
            continue
        assert len(t.token_ids) == len(t.loss_mask) == len(t.logprobs)
        for turn in t.turns:
            start, end = turn.token_span
            completion = sampled[tuple(t.token_ids[:start])]  # the prompt the seat sent is its own prefix
            assert t.token_ids[start:end] == completion.token_ids and t.logprobs[start:end] == completion.logprobs
            assert all(m == 1 for m in t.loss_mask[start:end]) and turn.action.content == completion.text
            moves += 1
        assert sum(t.loss_mask) == sum(end - start for start, end in (u.token_span for u in t.turns))
    # a random tiny model rarely names a free cell: each game's first mover tries three times and forfeits
    assert moves == len(policy.calls) >= 9 and sum(bool(t.turns) for t in trajs) >= 3


def test_separate_policies_sample_their_own_seats_and_a_swap_would_show(tok):
    a, b = hf(tok, 1), hf(tok, 2)
    trajs = MultiAgentRollout({"A": a, "B": b}, PARAMS, seats={"x": "A", "o": "B"}).run(games(2))
    for t in trajs:
        own, other = (a, b) if t.metadata["seat"] == "x" else (b, a)
        assert t.metadata["policy"] == ("A" if own is a else "B")
        for turn in t.turns:
            s, e = turn.token_span
            with torch.no_grad():
                mine = sequence_logprobs(own.model, [t.token_ids[:e]], 1.0)[0][s:e]
                theirs = sequence_logprobs(other.model, [t.token_ids[:e]], 1.0)[0][s:e]
            assert max(abs(x - y) for x, y in zip(mine, t.logprobs[s:e])) < 1e-4
            assert max(abs(x - y) for x, y in zip(theirs, t.logprobs[s:e])) > 1e-3


def test_rewards_go_to_each_seats_moves_and_a_forfeit_win_is_recorded_without_a_move(tok):
    def mover(cell):
        return lambda prompt: f"I play {cell}"

    x = ScriptedAgent(tok, lambda prompt: "I pass")  # no cell: retried once, then x forfeits
    o = ScriptedAgent(tok, mover(5))
    trajs = MultiAgentRollout({"x": x, "o": o}, PARAMS).run(games(1, max_opening=0, retries=1))
    tx, to = trajs
    assert len(tx.turns) == 2 and tx.total_reward == -1.0 and tx.turns[-1].reward == -1.0
    assert tx.metadata["outcome"] == "loss" and tx.metadata["invalid_moves"] == 2
    assert not to.turns and to.token_ids is None and to.metadata["seat_reward"] == 1.0
    assert to.metadata["outcome"] == "win"
    # a real game (x: 1, 2, 3 wins the top row; o: 4, 5): every move's reward is what the seat collected until
    # its next move, so only the last ones pay
    tx, to = MultiAgentRollout({"x": ScriptedAgent(tok, _x_wins()), "o": ScriptedAgent(tok, _o_cells())}, PARAMS).run(
        games(1, max_opening=0)
    )
    assert tx.turns[-1].reward == 1.0 and all(t.reward == 0.0 for t in tx.turns[:-1])
    assert to.turns[-1].reward == -1.0 and to.metadata["outcome"] == "loss" and len(to.turns) == 2


def _x_wins():
    moves = iter(["1", "2", "3"])
    return lambda prompt: next(moves)


def _o_cells():
    moves = iter(["4", "5", "6"])
    return lambda prompt: next(moves)


class Broken(MultiAgentTextEnv):
    possible_agents = ["a", "b"]

    def _reset(self, options):
        self.tell(["a", "b"], "go")

    def _play(self, agent, action):
        raise RuntimeError("the game broke")


class PayEachMove(MultiAgentTextEnv):
    """Seats a and b alternate; every move pays its mover +1 and tells both seats it was made."""

    possible_agents = ["a", "b"]

    def _reset(self, options):
        self.tell(["a", "b"], "go")

    def _play(self, agent, action):
        self.reward({agent: 1.0})
        self.tell(["a", "b"], f"{agent} moved")
        self.agent_selection = "b" if agent == "a" else "a"


@pytest.mark.parametrize("cut", [{"max_moves": 4}, {"max_context": 110}])
def test_rewards_paid_before_the_rollout_cuts_a_game_reach_their_seats(tok, cut):
    trajs = MultiAgentRollout({"p": ScriptedAgent(tok, lambda prompt: "move")}, PARAMS, **cut).run([PayEachMove()])
    assert all(t.truncated for t in trajs) and all(t.turns for t in trajs)
    for t in trajs:  # +1 per move made: every move's reward reached its seat, on that move
        assert t.metadata["seat_reward"] == t.total_reward == len(t.turns), (cut, t.metadata["seat"])
        assert all(turn.reward == 1.0 for turn in t.turns)


def test_an_environment_that_raises_ends_its_episode_only(tok):
    policy = hf(tok, 0)
    envs = [Broken(), *games(1)]
    trajs = MultiAgentRollout({"p": policy}, PARAMS).run(envs)
    assert [t.error for t in trajs[:2]] == ["RuntimeError: the game broke"] * 2
    assert all(t.error is None for t in trajs[2:]) and any(t.turns for t in trajs[2:])


def test_a_seat_with_no_policy_is_refused_before_anything_plays(tok):
    rollout = MultiAgentRollout({"A": hf(tok, 0), "B": hf(tok, 1)}, PARAMS, seats={"x": "A"})
    with pytest.raises(ValueError, match="seat 'o' is mapped to no policy"):
        rollout.run(games(1))
    with pytest.raises(ValueError, match="policies that are not given: C"):
        MultiAgentRollout({"A": hf(tok, 0)}, PARAMS, seats={"x": "C"})


@pytest.mark.parametrize("budget", [400])
def test_max_context_bounds_each_seats_whole_sequence(tok, budget):
    """As in the single-agent rollout: a move's budget shrinks to fit, a message that leaves no room ends the game."""
    params = SamplingParams(temperature=1.0, max_new_tokens=200)  # a random tiny model writes all 200
    envs = games(4, max_opening=0, retries=3)
    trajs = MultiAgentRollout({"p": hf(tok, 0)}, params, max_context=budget).run(envs, sample_seeds=[0, 1, 2, 3])
    played = [t for t in trajs if t.turns]
    assert max(len(t.token_ids) for t in played) <= budget
    assert len(played) >= 4 and all(t.truncated for t in played)
    assert any(turn.info.get("cut_by") == "context" for t in played for turn in t.turns)


def scripted_game(tok, **limits):
    """One game from the empty board, x playing 1, 2, 3 (it wins at its third move) and o 4, 5."""
    moves = {"x": iter(["1", "2", "3"]), "o": iter(["4", "5"])}
    players = {seat: ScriptedAgent(tok, lambda prompt, seat=seat: next(moves[seat])) for seat in moves}
    return MultiAgentRollout(players, PARAMS, **limits).run(games(1, max_opening=0))


def test_max_context_and_max_moves_truncate(tok):
    full = scripted_game(tok)
    assert [len(t.turns) for t in full] == [3, 2] and not any(t.truncated for t in full)
    budget = full[0].turns[0].obs_span[1]  # x's sequence once told o's first move: no room left to move
    cut = scripted_game(tok, max_context=budget)
    assert [len(t.turns) for t in cut] == [1, 1] and all(t.truncated for t in cut)  # each seat moved once
    for t, whole in zip(cut, full):  # what each seat holds is what it held in the whole game, up to the cut
        assert len(t.token_ids) < budget and t.token_ids == whole.token_ids[: len(t.token_ids)]
    trajs = MultiAgentRollout({"p": hf(tok, 0)}, PARAMS, max_moves=1).run(games(1, max_opening=0))
    assert trajs[0].truncated and len(trajs[0].turns) == 1 and not trajs[1].turns


def test_episodes_with_their_own_seeds_do_not_depend_on_the_batch(tok):
    policy = hf(tok, 0)
    alone = MultiAgentRollout({"p": policy}, PARAMS).run(games(1), options=[{"index": 5}], sample_seeds=[11])
    batch = MultiAgentRollout({"p": policy}, PARAMS).run(
        games(3), options=[{"index": i} for i in (2, 5, 9)], sample_seeds=[3, 11, 4]
    )
    assert [t.token_ids for t in alone] == [t.token_ids for t in batch[2:4]]


def test_an_opponent_endpoint_that_is_gone_ends_its_games_with_the_reason_and_loses_nothing(tok):
    import socket

    from turnrl.agents.openai import OpenAIAgent
    from turnrl.envs.multiagent.tictactoe import text_player

    with socket.socket() as s:  # a port on 127.0.0.1 that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gone = OpenAIAgent(f"http://127.0.0.1:{port}/v1", "m", tokenizer=tok, timeout=5, max_retries=0)
    rollout = MultiAgentRollout(
        {"me": ScriptedAgent(tok, text_player("perfect")), "far": gone}, PARAMS, seats={"x": "me", "o": "far"}
    )
    trajs = rollout.run(games(2, max_opening=0), options=[{"index": 0}] * 2)
    assert len(trajs) == 4 and all("policy 'far' failed to move" in (t.error or "") for t in trajs)
    xs = [t for t in trajs if t.metadata["seat"] == "x"]
    assert all(len(t.turns) == 1 and t.turns[0].action.content == "1" for t in xs)  # x's move is kept


def test_one_gateway_serves_the_seats_of_a_game_each_with_its_own_session_and_policy(tok):
    """A program plays the solver-critic game through the gateway: the solver's calls in one session answered by
    policy X, the critic's in another by policy O; each session records its own policy's tokens, as that policy
    scores them (and the other would not)."""
    from openai import OpenAI

    from turnrl.gateway import Gateway, build_trajectory

    x, o = hf(tok, 0), hf(tok, 1)
    gw = Gateway(x, "tiny", policies={"X": x, "O": o}, max_context=4096).start()
    try:
        sessions = {"solver": gw.open("game-s", policy="X", seed=1), "critic": gw.open("game-c", policy="O", seed=2)}
        clients = {s: OpenAI(base_url=gw.base_url(sid), api_key=gw.api_key) for s, sid in sessions.items()}
        env = make_multi_agent("turnrl/SolverCritic-v0")
        env.reset(seed=0, options={"index": 0})
        chats = {s: [] for s in env.possible_agents}
        for seat in env.agent_iter(max_iter=40):
            observation, _, termination, truncation, _ = env.last()
            chats[seat] += [m.to_chat() for m in observation]
            if termination or truncation:
                env.step(None)
                continue
            reply = clients[seat].chat.completions.create(model="tiny", messages=chats[seat], max_tokens=6)
            text = reply.choices[0].message.content
            chats[seat].append({"role": "assistant", "content": text})
            env.step(text)
        recorded = {s: gw.close(sid) for s, sid in sessions.items()}
        with pytest.raises(ValueError, match="serves no policy 'Z'; it serves X, O"):
            gw.open("other", policy="Z")
    finally:
        gw.stop()
    assert [len(recorded[s].calls) for s in ("solver", "critic")] == [2, 1]  # answer, review, final answer
    for seat, name, policy, other in (("solver", "X", x, o), ("critic", "O", o, x)):
        session = recorded[seat]
        assert session.policy == name
        traj = build_trajectory(session.calls, reward=0.0, correct=None, eos_ids=gw.eos_ids, tokenizer=tok)
        ids = torch.tensor([traj.token_ids])
        mask = torch.tensor(traj.loss_mask, dtype=torch.bool)[1:]
        sampled = torch.tensor(traj.logprobs)[1:][mask]
        for model, same in ((policy.model, True), (other.model, False)):
            with torch.no_grad():
                logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1).gather(-1, ids[0, 1:, None])[:, 0]
            gap = float((logp[mask] - sampled).abs().max())
            assert (gap < 1e-4) if same else (gap > 1e-2), (seat, same, gap)
    bad = tiny_tokenizer("llama3")
    with pytest.raises(ValueError, match="another tokenizer"):
        Gateway(x, "tiny", policies={"B": HFAgent(tiny_model(bad), bad)})
