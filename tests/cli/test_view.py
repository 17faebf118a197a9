"""``turnrl view``: the index over a run folder, its JSON API, and the page driven in a real headless browser."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

import httpx
import pytest

import turnrl
from turnrl.agents.base import SamplingParams
from turnrl.agents.scripted import ScriptedAgent
from turnrl.agents.tiny import tiny_tokenizer
from turnrl.rollout.engine import Rollout
from turnrl.storage import read_jsonl, write_jsonl, write_parquet
from turnrl.types import Message, Trajectory, Turn
from turnrl.view import EpisodeIndex, ViewApp, ViewServer, discover
from turnrl.view.app import TokenTexts, episode_payload

ENV_KW = {"calculator": True, "max_turns": 3}


def scripted_episodes(tok, n, *, wrong_every=2):
    """Arithmetic episodes: a calculator call, then an answer (every ``wrong_every``-th episode answers wrong)."""
    answers = {}

    def policy(prompt: str) -> str:
        a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)\?", prompt)[-1])
        key = (a, b)
        if "<|im_start|>tool" not in prompt:
            return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{a} + {b}"}}}}</tool_call>'
        answers.setdefault(key, len(answers))
        wrong = answers[key] % wrong_every == 1
        return f"The sum is \\boxed{{{a + b + (1 if wrong else 0)}}}."

    agent = ScriptedAgent(tok, policy)
    envs = [turnrl.make("turnrl/Arithmetic-v0", **ENV_KW) for _ in range(n)]
    return Rollout(agent, SamplingParams(max_new_tokens=64)).run(
        envs, seeds=list(range(n)), group_ids=[str(i // 4) for i in range(n)]
    )


def as_training(trajs, step):
    """Give each trajectory what a learner records: rollout logprobs, per-token advantages, learner logprobs."""
    out = []
    for _k, t in enumerate(trajs):
        n = len(t.token_ids)
        logp = [(-0.05 - 0.01 * (i % 7)) if m else 0.0 for i, m in enumerate(t.loss_mask)]
        gen = [i for i, m in enumerate(t.loss_mask) if m]
        logp[gen[1]] = -4.0  # one unlikely token (p ~ 0.018)
        adv = [(1.0 if t.correct else -1.0) if m else 0.0 for m in t.loss_mask]
        learner = list(logp)
        learner[gen[2]] = logp[gen[2]] - 1.5  # stale weights on one token
        out.append(
            t.model_copy(
                update={
                    "logprobs": logp,
                    "metadata": {**t.metadata, "step": step, "advantages": adv, "learner_logprobs": learner},
                }
            )
        )
        assert len(adv) == len(learner) == n
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    tok = tiny_tokenizer("chatml")
    (root / "metrics.jsonl").write_text(json.dumps({"step": 0, "eval_success": 0.5}) + "\n")
    write_jsonl(scripted_episodes(tok, 8), root / "eval" / "step-0" / "trajectories.jsonl")
    write_jsonl(as_training(scripted_episodes(tok, 8, wrong_every=4), 1), root / "train" / "trajectories-step-1.jsonl")
    (root / "eval" / "step-0" / "items.jsonl").write_text("{}\n")  # a summary file: not episodes
    return root


@pytest.fixture(scope="module")
def server(run_dir):
    index = EpisodeIndex.open(run_dir)
    assert index.wait(30)
    with ViewServer(ViewApp(index, tiny_tokenizer("chatml"), "tiny:chatml")) as s:
        yield s


def test_discovers_eval_and_training_files_with_their_steps(run_dir, tmp_path):
    sources = discover(run_dir)
    assert [(s.kind, s.step, s.path.name) for s in sources] == [
        ("eval", 0, "trajectories.jsonl"),
        ("train", 1, "trajectories-step-1.jsonl"),
    ]
    assert [s.kind for s in discover(run_dir / "eval")] == ["eval"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        discover(tmp_path / "nothing-here")
    with pytest.raises(FileNotFoundError, match="no trajectories file"):
        discover(tmp_path)


def test_index_summaries_and_filters(run_dir):
    index = EpisodeIndex.open(run_dir, background=False)
    rows = index.rows
    assert len(rows) == 16 and index.done and index.error is None
    assert {r["outcome"] for r in rows} == {"correct", "wrong"}
    assert all(r["tool_calls"] == 1 and r["turns"] == 2 for r in rows)
    assert index.query({"outcome": "correct"})["total"] == sum(r["outcome"] == "correct" for r in rows)
    assert index.query({"step": "1"})["total"] == 8
    assert all(r["has_advantages"] for r in index.query({"kind": "train"})["rows"])
    assert index.query({"reward_min": "0.5"})["total"] == index.query({"outcome": "correct"})["total"]
    task = rows[3]["task_id"]
    hits = index.query({"q": task.upper()})["rows"]  # search ignores case
    assert {h["task_id"] for h in hits} == {task}
    assert index.query({"tools": "without"})["total"] == 0
    group = index.group(0)
    assert len(group) == 4 and {g["group_id"] for g in group} == {rows[0]["group_id"]}
    assert index.load(5).id == rows[5]["id"]


def test_parquet_file_and_large_file_speed(run_dir, tmp_path):
    trajs = read_jsonl(run_dir / "train" / "trajectories-step-1.jsonl")
    write_parquet(trajs, tmp_path / "trajectories.parquet")
    index = EpisodeIndex.open(tmp_path / "trajectories.parquet", background=False)
    assert [r["id"] for r in index.rows] == [t.id for t in trajs]
    assert index.load(7) == trajs[7]
    # 10,000 episodes: the index must be ready in seconds, the first page and one episode at once.
    line = (run_dir / "train" / "trajectories-step-1.jsonl").read_text().splitlines()[0]
    big = tmp_path / "big" / "trajectories.jsonl"
    big.parent.mkdir()
    big.write_text((line + "\n") * 10_000)
    t0 = time.perf_counter()
    index = EpisodeIndex.open(big)
    first = index.query({})  # answers while indexing goes on
    assert index.wait(60)
    assert len(index.rows) == 10_000
    took = time.perf_counter() - t0
    assert took < 30, f"indexing 10,000 episodes took {took:.1f}s"
    assert first["indexed"] <= 10_000
    t1 = time.perf_counter()
    assert index.query({"q": "sum", "outcome": "correct"}, limit=200)["total"] in (0, 10_000)
    assert index.load(9_999).id == index.rows[9_999]["id"]
    assert time.perf_counter() - t1 < 5


def test_api(server, run_dir):
    info = httpx.get(server.url + "api/info", timeout=10).json()
    assert info["indexed"] == 16 and info["facets"]["steps"] == [0, 1] and info["facets"]["has_advantages"]
    res = httpx.get(server.url + "api/episodes", params={"kind": "train", "outcome": "wrong"}, timeout=10).json()
    assert res["total"] == 2 and all(r["kind"] == "train" and r["outcome"] == "wrong" for r in res["rows"])
    i = res["rows"][0]["index"]
    ep = httpx.get(f"{server.url}api/episode/{i}", timeout=10).json()
    tk = ep["tokens"]
    assert len(tk["ids"]) == len(tk["text"]) == len(tk["adv"]) == len(tk["learner"]) == len(tk["mask"])
    assert "".join(tk["text"]).startswith("<|im_start|>user\n") or "<|im_start|>system" in "".join(tk["text"])
    assert {tk["segment"][j] for j, m in enumerate(tk["mask"]) if m} == {"gen"}
    assert "obs" in tk["segment"] and "prompt" in tk["segment"]
    assert ep["turns"][0]["tool_calls"][0]["name"] == "calculator"
    assert ep["turns"][0]["observation"][0]["role"] == "tool"
    assert httpx.get(server.url + "api/episode/999", timeout=10).status_code == 404
    assert httpx.get(server.url + "api/episodes", params={"reward_min": "x"}, timeout=10).status_code == 400


# ---- the page in a real browser ----


def _browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip(
            "no headless browser here: scripts/setup.sh installs Debian's chromium and chromium-driver "
            "(needs root and apt-get)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-extensions",
        "--no-first-run",
        "--metrics-recording-only",
        "--disable-features=Translate,OptimizationHints,MediaRouter",
        "--window-size=1500,1000",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


@pytest.fixture(scope="module")
def browser():
    driver = _browser()
    yield driver
    driver.quit()


def _wait(driver, predicate, timeout=15, what="condition"):
    """Wait for ``predicate``; an element the page re-renders between finding and reading it is looked up again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: predicate(d), message=f"timed out waiting for {what}"
    )


def test_page_filters_opens_an_episode_and_shows_trained_tokens_differently(server, browser, run_dir, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    rows_css = "#episodes tbody tr"
    browser.get(server.url)
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, rows_css)) == 16, what="16 episodes listed")
    assert "16 episodes" in browser.find_element(By.ID, "status").text

    # filters: training episodes that went wrong
    Select(browser.find_element(By.ID, "f-kind")).select_by_value("train")
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("wrong")
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, rows_css)) == 2, what="2 wrong training episodes")
    badges = [b.text for b in browser.find_elements(By.CSS_SELECTOR, rows_css + " .badge")]
    assert badges == ["wrong", "wrong"]
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("")
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, rows_css)) == 8, what="8 training episodes")
    # text search
    trajs = read_jsonl(run_dir / "train" / "trajectories-step-1.jsonl")
    target = trajs[5]
    browser.find_element(By.ID, "f-q").send_keys(target.task_id)
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, rows_css)) == 1, what="one search hit")

    # open it: the conversation
    browser.find_element(By.CSS_SELECTOR, rows_css).click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".pane .msg.assistant"), what="the conversation")
    pane = browser.find_element(By.CSS_SELECTOR, ".pane")
    assert "tool call → calculator" in pane.text and "reward" in pane.text
    assert len(pane.find_elements(By.CSS_SELECTOR, ".msg.tool")) == 1

    # the tokens: trained and not trained render differently, one span per token
    browser.find_element(By.ID, "tab-tokens").click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".pane .tok"), what="the tokens")
    gen = browser.find_elements(By.CSS_SELECTOR, ".pane .tok.gen")
    ctx = browser.find_elements(By.CSS_SELECTOR, ".pane .tok.ctx")
    assert len(gen) == sum(target.loss_mask) and len(gen) + len(ctx) == len(target.token_ids)
    style = lambda el, prop: el.value_of_css_property(prop)
    plain_gen = [g for g in gen if "lowp" not in g.get_attribute("class")]
    assert style(plain_gen[0], "background-color") != style(ctx[0], "background-color")
    assert style(plain_gen[0], "color") != style(ctx[0], "color")
    low = browser.find_elements(By.CSS_SELECTOR, ".pane .tok.lowp")
    assert [int(el.get_attribute("data-i")) for el in low] == [i for i, m in enumerate(target.loss_mask) if m][1:2]

    # hover: id, text and logprob
    ActionChains(browser).move_to_element(low[0]).perform()
    tip = browser.find_element(By.ID, "tooltip")
    _wait(browser, lambda d: tip.is_displayed(), what="the tooltip")
    j = int(low[0].get_attribute("data-i"))
    assert f"id {target.token_ids[j]}" in tip.text and "trained" in tip.text and "logprob -4" in tip.text
    assert "advantage" in tip.text and "learner logprob" in tip.text

    # advantage and drift colouring
    Select(browser.find_element(By.ID, "color-mode")).select_by_value("advantage")
    _wait(
        browser,
        lambda d: "rgba(" in (d.find_element(By.CSS_SELECTOR, ".pane .tok.gen").get_attribute("style") or ""),
        what="advantage colours",
    )
    colour = browser.find_element(By.CSS_SELECTOR, ".pane .tok.gen").get_attribute("style")
    assert ("22, 163, 74" in colour or "22,163,74" in colour) == bool(target.correct)
    Select(browser.find_element(By.ID, "color-mode")).select_by_value("drift")
    gens = [i for i, m in enumerate(target.loss_mask) if m]
    _wait(
        browser,
        lambda d: "147" in (d.find_element(By.CSS_SELECTOR, ".pane .tok.gen").get_attribute("style") or ""),
        what="drift colours",
    )

    def alpha(i):  # the purple's opacity on token i (Chrome writes rgba(…, 1) as rgb(…))
        style = browser.find_element(By.CSS_SELECTOR, f'.pane .tok[data-i="{i}"]').get_attribute("style")
        m = re.search(r"rgba?\(147, ?51, ?234(?:, ?([\d.]+))?\)", style)
        return float(m.group(1) or 1.0)

    assert alpha(gens[2]) == 1.0 and alpha(gens[3]) < 0.1

    # two episodes of the same group side by side
    compare = Select(browser.find_element(By.CSS_SELECTOR, "select.compare"))
    assert len(compare.options) == 4  # the heading + the 3 other members of the group of 4
    compare.select_by_index(1)
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".pane")) == 2, what="two panes")
    panes = browser.find_elements(By.CSS_SELECTOR, ".pane")
    assert panes[0].location["y"] == panes[1].location["y"] and panes[0].location["x"] < panes[1].location["x"]
    assert all(p.find_elements(By.CSS_SELECTOR, ".tok.gen") for p in panes)
    browser.save_screenshot(str(tmp_path / "viewer.png"))
    logs = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] if hasattr(browser, "get_log") else []
    assert not logs, logs


def test_cli_serves_and_stops_by_itself(run_dir):
    port_line = re.compile(r"open (http://127\.0\.0\.1:\d+/)")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "turnrl",
            "view",
            str(run_dir),
            "--port",
            "0",
            "--stop-after",
            "60",
            "--tokenizer",
            "tiny:chatml",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        line = ""
        deadline = time.monotonic() + 60
        while not port_line.search(line) and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "turnrl view exited early"
        url = port_line.search(line).group(1)
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200 and "turnrl view" in page.text
        _wait_api = time.monotonic() + 20
        while httpx.get(url + "api/info", timeout=10).json()["indexed"] < 16 and time.monotonic() < _wait_api:
            time.sleep(0.1)
        assert httpx.get(url + "api/info", timeout=10).json()["tokenizer"] == "tiny:chatml"
    finally:
        proc.terminate()
        proc.wait(10)
    from typer.testing import CliRunner

    from turnrl.cli import app

    missing = CliRunner().invoke(app, ["view", str(run_dir / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output, missing.output


def test_nan_logprobs_are_served_as_null(run_dir, tmp_path):
    t = read_jsonl(run_dir / "train" / "trajectories-step-1.jsonl")[0]
    logp = list(t.logprobs)
    logp[-1] = math.nan
    write_jsonl([t.model_copy(update={"logprobs": logp})], tmp_path / "trajectories.jsonl")
    index = EpisodeIndex.open(tmp_path / "trajectories.jsonl", background=False)
    with ViewServer(ViewApp(index, None, None)) as s:
        ep = httpx.get(s.url + "api/episode/0", timeout=10).json()
    assert ep["tokens"]["logp"][-1] is None and ep["tokens"]["text"] is None


def segmented_episode(tok):
    """An episode whose history was rewritten twice: three context segments, one turn each (the second segment's
    reason recorded, the third's not)."""
    ids, mask, turns, starts = [], [], [], []

    def add(text, m):
        s = len(ids)
        ids.extend(tok.encode(text, add_special_tokens=False))
        mask.extend([m] * (len(ids) - s))
        return s, len(ids)

    for k, (question, answer) in enumerate(
        [("What is 2 + 3?", "Let me add."), ("Summary: adding 2 and 3.", "It is 5"), ("Answer now.", "\\boxed{5}")]
    ):
        starts.append(len(ids))
        add(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n", 0)
        span = add(f"{answer}<|im_end|>", 1)
        turns.append(
            Turn(
                index=k,
                action=Message(role="assistant", content=answer),
                token_span=span,
                info={"segment": k},
                reward=1.0 if k == 2 else 0.0,
            )
        )
    return Trajectory(
        id="rewritten",
        env_id="gateway",
        task_id="rewritten-task",
        prompt=[Message(role="user", content="What is 2 + 3?")],
        turns=turns,
        token_ids=ids,
        loss_mask=mask,
        logprobs=[-0.1 * m for m in mask],
        segments=starts,
        terminated=True,
        metadata={"segment_reasons": ["history rewritten: 2 messages dropped"]},
    )


def test_page_marks_where_the_history_was_rewritten(browser, tmp_path):
    from selenium.webdriver.common.by import By

    tok = tiny_tokenizer("chatml")
    traj = segmented_episode(tok)
    write_jsonl([traj], tmp_path / "eval" / "step-0" / "trajectories.jsonl")
    index = EpisodeIndex.open(tmp_path)
    assert index.wait(30)
    with ViewServer(ViewApp(index, tok, "tiny:chatml")) as server:
        ep = httpx.get(server.url + "api/episode/0", timeout=10).json()
        assert [t["segment"] for t in ep["turns"]] == [0, 1, 2]
        assert ep["contexts"] == [
            {"index": 1, "start": traj.segments[1], "reason": "history rewritten: 2 messages dropped"},
            {"index": 2, "start": traj.segments[2], "reason": "new context segment"},
        ]
        browser.get(server.url + "#e=0&tab=chat")
        _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".pane .segment-divider"), what="the dividers")
        chat = browser.find_element(By.CSS_SELECTOR, ".pane .chat")
        dividers = chat.find_elements(By.CSS_SELECTOR, ".segment-divider")
        assert [d.text for d in dividers] == [
            "new context 2: history rewritten: 2 messages dropped",
            "new context 3: new context segment",
        ]
        assert all(d.is_displayed() and d.size["height"] > 0 for d in dividers)
        # each divider sits right before the first turn of its segment
        order = [el.get_attribute("class") or "" for el in chat.find_elements(By.XPATH, "./*")]
        heads = [i for i, c in enumerate(order) if c == "turnhead"]
        marks = [i for i, c in enumerate(order) if c == "segment-divider"]
        assert marks == [heads[1] - 1, heads[2] - 1]
        assert "3 contexts" in browser.find_element(By.CSS_SELECTOR, ".pane .facts").text
        # the tokens: a marker at each segment's first token
        browser.find_element(By.ID, "tab-tokens").click()
        _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".pane .segmark"), what="the token markers")
        marks = browser.find_elements(By.CSS_SELECTOR, ".pane .tokens .segmark")
        after = [m.find_element(By.XPATH, "following-sibling::span[contains(@class, 'tok')][1]") for m in marks]
        assert [int(a.get_attribute("data-i")) for a in after] == traj.segments[1:]
        assert "history rewritten: 2 messages dropped" in marks[0].text and "new context segment" in marks[1].text
    # a plain episode: one context, no dividers
    plain = traj.model_copy(
        update={"segments": None, "metadata": {}, "turns": [t.model_copy(update={"info": {}}) for t in traj.turns]}
    )
    payload = episode_payload(plain, TokenTexts(None), {})
    assert payload["contexts"] == [] and [t["segment"] for t in payload["turns"]] == [0, 0, 0]
    # without info["segment"], a turn's segment comes from its token span
    spans = traj.model_copy(update={"turns": [t.model_copy(update={"info": {}}) for t in traj.turns]})
    assert [t["segment"] for t in episode_payload(spans, TokenTexts(None), {})["turns"]] == [0, 1, 2]


def test_every_episode_says_which_run_it_came_from(run_dir, tmp_path, browser):
    """A folder of runs: a training run (its config.yaml), a `turnrl eval` output (items.jsonl), and a bare folder
    of trajectories; the list shows each episode's run, and filters by it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    runs = tmp_path / "runs"
    shutil.copytree(run_dir, runs / "grpo-a")
    (runs / "grpo-a" / "config.yaml").write_text("model: tiny:chatml\n")
    shutil.copytree(run_dir / "eval" / "step-0", runs / "evals" / "gsm8k")  # items.jsonl beside its trajectories
    shutil.copytree(run_dir / "train", runs / "loose" / "deep")
    index = EpisodeIndex.open(runs, background=False)
    by_source = {r["source"]: r["run"] for r in index.rows}
    assert by_source == {
        "grpo-a/eval/step-0/trajectories.jsonl": "grpo-a",
        "grpo-a/train/trajectories-step-1.jsonl": "grpo-a",
        "evals/gsm8k/trajectories.jsonl": "evals/gsm8k",
        "loose/deep/trajectories-step-1.jsonl": "loose",
    }
    assert index.facets()["runs"] == ["evals/gsm8k", "grpo-a", "loose"]
    assert index.query({"run": "grpo-a"})["total"] == 16 and index.query({"run": "loose"})["total"] == 8
    assert {r["run"] for r in EpisodeIndex.open(run_dir, background=False).rows} == {run_dir.name}  # one run

    rows_css = "#episodes tbody tr"
    with ViewServer(ViewApp(index, None, None)) as server:
        browser.get(server.url)
        _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, rows_css)) == 32, what="32 episodes listed")
        header = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#episodes thead th")]
        assert header[:3] == ["#", "run", "step"]
        cells = [td.text for td in browser.find_elements(By.CSS_SELECTOR, rows_css + " td.run")]
        assert sorted(set(cells)) == ["evals/gsm8k", "grpo-a", "loose"] and len(cells) == 32
        Select(browser.find_element(By.ID, "f-run")).select_by_value("evals/gsm8k")
        _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, rows_css)) == 8, what="one run's 8 episodes")
        browser.find_element(By.CSS_SELECTOR, rows_css).click()
        _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".pane .facts"), what="the episode")
        assert "run evals/gsm8k" in browser.find_element(By.CSS_SELECTOR, ".pane .facts").text


def test_a_mixtures_members_are_a_facet_and_a_filter(tmp_path, browser):
    """Episodes of a turnrl/Mixture-v0 run: the list can be narrowed to one member (what the task sampler chose)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    tok = tiny_tokenizer("chatml")
    agent = ScriptedAgent(tok, lambda prompt: "The answer is \\boxed{1}.")
    members = [
        {"id": "turnrl/Arithmetic-v0", "kwargs": {"level": k, "size": 20}, "name": f"arith-l{k}"} for k in (1, 3)
    ]
    envs = [turnrl.make("turnrl/Mixture-v0", envs=members) for _ in range(6)]
    trajs = Rollout(agent, SamplingParams(max_new_tokens=16)).run(
        envs, seeds=list(range(6)), options=[{"index": i} for i in range(6)]
    )
    write_jsonl(trajs, tmp_path / "mix" / "train" / "trajectories-step-1.jsonl")
    write_jsonl(scripted_episodes(tok, 2), tmp_path / "plain" / "trajectories.jsonl")
    index = EpisodeIndex.open(tmp_path, background=False)
    assert index.facets()["members"] == ["arith-l1", "arith-l3"]
    assert index.query({"member": "arith-l3"})["total"] == 3
    assert all(r["task_id"].startswith("arith-l3:") for r in index.query({"member": "arith-l3"})["rows"])
    with ViewServer(ViewApp(index, None, None)) as server:
        browser.get(server.url)
        rows_css = "#episodes tbody tr"
        _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, rows_css)) == 8, what="8 episodes listed")
        Select(browser.find_element(By.ID, "f-member")).select_by_value("arith-l1")
        _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, rows_css)) == 3, what="the member's 3 episodes")


def test_a_game_shows_every_seats_moves_in_order_and_each_seats_own_view(browser, tmp_path):
    from selenium.webdriver.common.by import By

    from turnrl.envs.multiagent import make_multi_agent
    from turnrl.envs.multiagent.tictactoe import text_player
    from turnrl.rollout.multi import MultiAgentRollout

    tok = tiny_tokenizer("chatml")
    players = {
        "perfect": ScriptedAgent(tok, text_player("perfect")),
        "random": ScriptedAgent(tok, text_player("random")),
    }
    rollout = MultiAgentRollout(players, SamplingParams(max_new_tokens=8), seats={"x": "perfect", "o": "random"})
    trajs = rollout.run(
        [make_multi_agent("turnrl/TicTacToe-v0", max_opening=0) for _ in range(2)],
        options=[{"index": 0}] * 2,
        group_ids=["g0", "g1"],
    )
    write_jsonl(trajs, tmp_path / "train" / "step-1" / "trajectories.jsonl")
    index = EpisodeIndex.open(tmp_path)
    assert index.wait(30)
    assert [(r["seat"], r["game"], r["outcome"]) for r in index.rows][:2] == [("x", "g0", "win"), ("o", "g0", "loss")]
    with ViewServer(ViewApp(index, tok, "tiny:chatml")) as server:
        game = httpx.get(server.url + "api/game/1", timeout=10).json()
        assert [s["seat"] for s in game["seats"]] == ["x", "o"] and [s["index"] for s in game["seats"]] == [0, 1]
        moves = game["moves"]
        assert [m["move"] for m in moves] == list(range(len(moves))) and len(moves) >= 5
        assert [m["seat"] for m in moves][:4] == ["x", "o", "x", "o"]  # x opens the empty board, then in turn
        assert moves[0]["action"] == "1"  # the perfect player's first move on the empty board
        assert f"o played {moves[1]['action']}." in moves[0]["told"][0]["content"]  # what x was told after it
        one_agent = httpx.get(server.url + "api/game/0", timeout=10).json()
        assert one_agent["moves"] == moves  # the same game from the other seat
        browser.get(server.url + "#e=1&tab=game")
        _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".pane .turnhead"), what="the moves")
        heads = [h.text for h in browser.find_elements(By.CSS_SELECTOR, ".pane .turnhead")]
        assert heads[0].startswith("move 0 · x") and heads[1].startswith("move 1 · o") and len(heads) == len(moves)
        links = browser.find_elements(By.CSS_SELECTOR, ".pane a.seat-view")
        assert [a.text.split(":")[0] for a in links] == ["x (perfect)", "o (random)"] and "win" in links[0].text
        links[0].click()  # x's own view: only what x was told and said
        _wait(
            browser,
            lambda d: "e=0" in d.current_url and d.find_elements(By.CSS_SELECTOR, ".pane .chat"),
            what="x's own view",
        )
        chat = browser.find_element(By.CSS_SELECTOR, ".pane .chat").text
        assert "playing tic-tac-toe as x" in chat and "as o" not in chat


def test_a_tree_rollout_shows_every_node_once_and_each_leaf(browser, tmp_path):
    """Issue 79: the leaves of a tree rollout are listed as episodes and shown as one tree (the Tree tab)."""
    from selenium.webdriver.common.by import By

    from turnrl.agents.hf import HFAgent
    from turnrl.agents.tiny import tiny_model
    from turnrl.rollout.tree import Branch, TreeSpec, play_tree
    from turnrl.utils import run_with_daemon_threads

    tok = tiny_tokenizer("chatml")
    rollout = Rollout(HFAgent(tiny_model(tok), tok, kv_cache_mb=0), SamplingParams(temperature=1.0, max_new_tokens=6))
    env = turnrl.make("turnrl/Arithmetic-v0", calculator=True, retry=True, max_turns=3)
    roots = rollout.start([env], seeds=[0], options=[{"index": 0}], group_ids=["g"], sample_seeds=[5], metadata=[{}])
    leaves = run_with_daemon_threads(play_tree(rollout, roots, TreeSpec((Branch(1, 2), Branch(2, 2)))))
    write_jsonl([ep.traj for ep in leaves], tmp_path / "train" / "step-1" / "trajectories.jsonl")
    index = EpisodeIndex.open(tmp_path)
    assert index.wait(30)
    assert [r["tree"] for r in index.rows] == ["g/0"] * 4
    with ViewServer(ViewApp(index, tok, "tiny:chatml")) as server:
        tree = httpx.get(server.url + "api/tree/2", timeout=10).json()
        ids = [n["id"] for n in tree["nodes"]]
        assert ids == ["g/0", "g/0.0", "g/0.0.0", "g/0.0.1", "g/0.1", "g/0.1.0", "g/0.1.1"]
        by = {n["id"]: n for n in tree["nodes"]}
        assert by["g/0"]["leaves"] == [0, 1, 2, 3] and by["g/0.1"]["leaves"] == [2, 3]
        assert [t["turn"] for t in by["g/0"]["turns"]] == [0] and [t["turn"] for t in by["g/0.1"]["turns"]] == [1]
        assert [t["turn"] for t in by["g/0.1.1"]["turns"]] == [2]
        assert by["g/0.1.0"]["turns"][0]["action"] == leaves[2].traj.turns[2].action.content
        browser.get(server.url + "#e=2&tab=tree")
        _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".pane .tree-node")) == 7, what="7 nodes")
        on_path = [n.get_attribute("data-node") for n in browser.find_elements(By.CSS_SELECTOR, ".tree-node.on-path")]
        assert on_path == ["g/0", "g/0.1", "g/0.1.0"]
        links = browser.find_elements(By.CSS_SELECTOR, ".pane a.leaf-view")
        assert [a.text for a in links] == ["episode #0", "episode #1", "episode #2", "episode #3"]
        links[3].click()
        _wait(browser, lambda d: "e=3" in d.current_url, what="the last leaf selected")
