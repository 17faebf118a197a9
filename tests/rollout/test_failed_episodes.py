"""A run that trains nothing says so: a step whose episodes all failed stops the run before its update, with the
first error; past `rollout.warn_error_share` a step warns on the console. Tried as a new user would: an agent program
that calls an endpoint the gateway does not answer."""

import itertools
import logging
import subprocess
import sys
import threading

from openai import OpenAI
from tiny_trainer import opened, tiny_trainer

from turnrl.agents.tiny import tiny_tokenizer
from turnrl.rl.run.monitors import failed_episodes

WRONG_ENDPOINT = '''
from openai import OpenAI


def run(base_url, api_key, task):
    """An agent written against an endpoint the gateway does not answer."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    return client.embeddings.create(model=task["model"], input=task["question"]).data[0].embedding
'''


def test_all_failed_stops_and_a_share_warns_each_quoting_the_first_error():
    assert failed_episodes(3, 2, 0, None, 0.5) == (None, None)
    assert failed_episodes(3, 0, 0, None, 0.5) == (None, None)
    warning, stop = failed_episodes(3, 4, 2, "env step failed: boom", 0.5)
    assert stop is None and warning.startswith("2 of 4 episodes failed (50%") and "env step failed: boom" in warning
    assert failed_episodes(3, 4, 1, "boom", 0.5) == (None, None)  # 25 %: below the share
    assert failed_episodes(3, 4, 1, "boom", 0.25)[0] is not None
    warning, stop = failed_episodes(7, 2, 2, "a" * 2000, 0.5)
    assert warning is None and stop.startswith("step 7: all 2 episodes failed") and len(stop) < 700  # cut long errors
    warning, stop = failed_episodes(7, 2, 2, "boom", 0.5, in_play=3)  # windowed: live episodes carried over
    assert stop is None and warning is not None
    assert "see the episodes" in failed_episodes(7, 2, 2, None, 0.5)[1]


def test_a_program_whose_calls_all_fail_stops_the_run_with_the_first_error(tmp_path):
    (tmp_path / "wrong_endpoint.py").write_text(WRONG_ENDPOINT)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "model: tiny:chatml\nenv: {id: turnrl/Arithmetic-v0, kwargs: {level: 1}}\nsteps: 3\n"
        "eval_tasks: 2\nprogram: {function: wrong_endpoint:run, timeout: 60}\n"
        "rollout: {prompts_per_step: 1, group_size: 2, max_new_tokens: 4}\nout_dir: run\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "turnrl", "train", str(cfg)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, out
    assert "step 1: all 2 episodes failed, so there is nothing to train on" in out, out
    assert "404" in out and "POST /v1/chat/completions" in out  # the first error: which endpoints exist
    assert "it starts over (no checkpoint yet)" in out and "Traceback" not in out
    run = tmp_path / "run"
    assert not (run / "checkpoint.pt").exists()  # no update, no checkpoint of a step that trained nothing
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1  # step 0's evaluation only
    assert len((run / "train" / "step-1" / "trajectories.jsonl").read_text().splitlines()) == 2  # kept to inspect


CALLS = itertools.count()
LOCK = threading.Lock()


def program_fails_every_other_call(base_url, api_key, task):
    with LOCK:
        n = next(CALLS)
    if n % 2:
        raise ConnectionError(f"call {n} could not reach its tool server")
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    return (
        client.chat.completions.create(model=task["model"], messages=task["messages"], max_tokens=4)
        .choices[0]
        .message.content
    )


def test_a_step_where_half_the_episodes_failed_warns_and_still_trains(tmp_path, caplog):
    from turnrl.rl.run.trainer import TrainConfig

    tok = tiny_tokenizer("chatml")
    cfg = TrainConfig(
        model="tiny",
        env={"id": "turnrl/Arithmetic-v0", "kwargs": {"level": 1}},
        algorithm={"name": "grpo"},
        steps=1,
        eval_tasks=2,
        out_dir=str(tmp_path / "run"),
        program={"function": f"{__name__}:program_fails_every_other_call", "concurrency": 1, "timeout": 60},
        rollout={"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4, "warn_error_share": 0.5},
    )
    with opened(tiny_trainer(cfg, tok)) as trainer:
        with caplog.at_level(logging.WARNING):
            history = trainer.train()
    step = history[-1]
    assert step["step"] == 1 and step["error_episodes"] == 2 and step["warnings"] >= 1
    assert any(
        "2 of 4 episodes failed (50%" in r.getMessage() and "could not reach its tool server" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]


def program_wrong_endpoint(base_url, api_key, task):
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    return client.embeddings.create(model=task["model"], input=task["question"]).data[0].embedding


def test_dapo_whose_dynamic_sampling_drops_the_failed_episodes_still_stops(tmp_path):
    """DAPO keeps only error-free episodes of its resampling rounds, so the step returns none: the stop reads what
    was played (rollout_episodes, error_episodes) and quotes the first error the source saw."""
    import pytest

    from turnrl.rl.run.monitors import EpisodeFailures
    from turnrl.rl.run.trainer import TrainConfig

    tok = tiny_tokenizer("chatml")
    cfg = TrainConfig(
        model="tiny",
        env={"id": "turnrl/Arithmetic-v0", "kwargs": {"level": 1}},
        algorithm={"name": "dapo", "max_resample": 2},
        steps=2,
        eval_tasks=2,
        out_dir=str(tmp_path / "run"),
        program={"function": f"{__name__}:program_wrong_endpoint", "timeout": 60},
        rollout={"prompts_per_step": 1, "group_size": 2, "max_new_tokens": 4},
    )
    with opened(tiny_trainer(cfg, tok)) as trainer:
        with pytest.raises(EpisodeFailures, match=r"step 1: all 4 episodes failed.*404.*POST /v1/chat/completions"):
            trainer.train()
    assert trainer.step == 0
