"""Per-token policy versions (issue 29's groundwork): every generated token records the version that sampled it;
a weight update between turns shows at the right token; versions survive storage; the staleness bound and its
metrics."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from tiny_trainer import train_tiny

import turnrl
from turnrl.agents.base import SamplingParams
from turnrl.agents.scripted import FixedAgent
from turnrl.agents.tiny import tiny_tokenizer
from turnrl.rl.core.batch import collate
from turnrl.rl.core.staleness import staleness_metrics
from turnrl.rl.sources.base import oldest_version, within_staleness
from turnrl.rollout.engine import Rollout
from turnrl.storage import load, save
from turnrl.types import Trajectory


class UpdatingAgent(FixedAgent):
    """A scripted agent after each of whose generation rounds the weights move on one version."""

    version = 0

    def generate(self, prompts, params, **kw):
        out = super().generate(prompts, params)
        UpdatingAgent.version += 1  # an update lands between this turn and the next
        return out


def two_turn_episodes(n=2):
    tok = tiny_tokenizer("chatml")
    UpdatingAgent.version = 0
    agent = UpdatingAgent(tok, ["\\boxed{0}", "\\boxed{1}"])
    envs = [turnrl.make("turnrl/Arithmetic-v0", level=1, retry=True, max_turns=2) for _ in range(n)]
    return Rollout(agent, SamplingParams(max_new_tokens=8), policy_version=lambda: UpdatingAgent.version).run(
        envs, options=[{"index": i} for i in range(n)]
    )


def test_a_weight_update_between_turns_changes_the_tokens_version_at_the_turn_boundary():
    for t in two_turn_episodes():
        assert t.num_turns == 2 and len(t.token_versions) == len(t.token_ids)
        (s0, e0), (s1, e1) = (turn.token_span for turn in t.turns)
        assert set(t.token_versions[s0:e0]) == {0} and set(t.token_versions[s1:e1]) == {1}
        assert all(v == -1 for v, m in zip(t.token_versions, t.loss_mask) if not m)  # prompt, template, feedback
        assert t.metadata["policy_version"] == [0, 2] and oldest_version(t) == 0


def test_versions_survive_jsonl_and_parquet_and_old_files_load(tmp_path):
    trajs = two_turn_episodes()
    for suffix in ("jsonl", "parquet"):
        save(trajs, tmp_path / f"v.{suffix}")
        assert [t.token_versions for t in load(tmp_path / f"v.{suffix}")] == [t.token_versions for t in trajs]
    table = pq.read_table(tmp_path / "v.parquet")
    pq.write_table(table.drop_columns(["token_versions"]), tmp_path / "old.parquet")  # written before versions
    assert all(t.token_versions is None for t in load(tmp_path / "old.parquet"))
    with pytest.raises(ValueError, match="one entry per token"):
        Trajectory.model_validate({**trajs[0].model_dump(), "token_versions": [0]})
    assert isinstance(table.schema.field("token_versions").type, pa.ListType)


def test_the_staleness_bound_drops_and_counts_old_episodes_and_the_metrics_measure_the_lag():
    trajs = two_turn_episodes(3)  # tokens of versions 0 and 1
    kept, dropped = within_staleness(trajs, version=1, max_staleness=1)
    assert len(kept) == 3 and dropped["stale_episodes"] == 0
    kept, dropped = within_staleness(trajs, version=2, max_staleness=1)  # version-0 tokens lag 2 > 1
    assert kept == [] and dropped["stale_episodes"] == 3
    blind = [t.model_copy(update={"token_versions": None}) for t in trajs]
    assert within_staleness(blind, version=9, max_staleness=0) == (
        blind,
        {"stale_episodes": 0, "stale_group_episodes": 0},
    )
    grouped = [
        t.model_copy(
            update={"group_id": "g", "token_versions": [v + (i > 0) if v >= 0 else v for v in t.token_versions]}
        )
        for i, t in enumerate(trajs)
    ]
    kept, dropped = within_staleness(grouped, version=2, max_staleness=1)  # one member lags 2: its group goes whole
    assert kept == [] and dropped == {"stale_episodes": 1, "stale_group_episodes": 2}
    b = collate(trajs, 0)
    m = staleness_metrics(b.versions, b.loss_mask, version=1)
    gen = b.loss_mask.bool()
    share0 = float((b.versions[gen] == 1).float().mean())
    assert m["staleness_max"] == 1.0 and m["staleness_0"] == pytest.approx(share0) and 0 < m["staleness_mean"] < 1
    assert staleness_metrics(collate(blind, 0).versions, b.loss_mask, 1) == {}
    assert torch.equal(collate(blind, 0).versions, torch.full_like(b.versions, -1))


def test_a_synchronous_run_trains_on_fresh_tokens_only(tmp_path):
    import toy_envs  # noqa: F401 — registers the toy environments

    from turnrl.rl.run.trainer import TrainConfig

    tok = tiny_tokenizer("chatml")
    cfg = TrainConfig(
        model="tiny",
        env={"id": "tests/Upper-v0"},
        rollout={"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 4},
        optim={"minibatch_size": 8},
        steps=2,
        eval_tasks=2,
        out_dir=str(tmp_path),
    )
    history = train_tiny(cfg, tok)
    for h in history[1:]:
        assert h["stale_episodes"] == 0 and h["staleness_max"] == 0 and h["staleness_0"] == 1.0
    saved = load(tmp_path / "train" / "step-2" / "trajectories.jsonl")
    assert all({v for v in t.token_versions if v >= 0} == {1} for t in saved)  # step 2 sampled by version 1
