"""``turnrl check-template``: the four tiny test templates, the bundled SmolLM2, and templates that go wrong."""

import json

import pytest
from typer.testing import CliRunner

from turnrl.agents.tiny import CHATML, TEMPLATES, tiny_tokenizer
from turnrl.cli import app
from turnrl.cli.template_check import check_template, load_tokenizer

runner = CliRunner()

# Qwen3-style: earlier assistant turns lose their <think> block (the last one keeps it).
STRIPS_THINKING = (
    "{% for m in messages %}{% set c = m['content'] %}"
    "{% if m['role'] == 'assistant' and not loop.last and '</think>' in c %}{% set c = c.split('</think>')[-1] %}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + c + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Puts today's turn count into the system prompt: earlier renderings are not prefixes of later ones.
REWRITES_SYSTEM = CHATML.replace(
    "{% for m in messages %}", "{{ 'turns: ' ~ (messages | length) ~ '\n' }}{% for m in messages %}"
)
# Drops what the assistant said: the rollout cannot find where a turn ends.
DROPS_ASSISTANT = CHATML.replace("m['content']", "(m['content'] if m['role'] != 'assistant' else '...')")
# Refuses tool messages, like some real templates.
NO_TOOL_ROLE = CHATML.replace(
    "{% for m in messages %}",
    "{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tool role') }}{% endif %}",
)


def with_template(template):
    tok = tiny_tokenizer("chatml")
    tok.chat_template = template
    return tok


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_tiny_templates_are_trainable_and_append_only(name):
    report = check_template(tiny_tokenizer(name), f"tiny:{name}")
    assert report.ok, str(report)
    for check in ("template", "roles", "boundaries", "append-only", "tokens", "tool results"):
        assert report.status(check) == "pass", str(report)
    assert report.status("thinking") == "skip"
    eot = TEMPLATES[name][1]
    assert f"end-of-sequence {eot!r} closes its turn" in report.mode
    # only the Qwen template renders structured tool calls; turnrl parses them back unchanged
    assert report.status("tool calls") == ("pass" if name == "qwen_tools" else "warn")


def test_bundled_smollm2():
    report = check_template(load_tokenizer("smollm2-135m-instruct"), "smollm2-135m-instruct")
    assert report.ok and report.status("append-only") == "pass" and report.status("tokens") == "pass", str(report)
    assert "'<|im_end|>' closes its turn" in report.mode


def test_stripped_thinking_is_reported():
    report = check_template(with_template(STRIPS_THINKING), "strips")
    assert report.status("thinking") == "warn" and "stripped" in str(report)
    assert report.status("append-only") == "warn" and "private reasoning" in str(report)
    assert report.ok  # the rollout appends: training stays token-exact


def test_rewritten_earlier_turns_are_reported():
    report = check_template(with_template(REWRITES_SYSTEM), "rewrites")
    assert report.status("append-only") == "warn" and "turns: 2" in str(report)
    assert report.status("tokens") == "warn" and report.ok


def test_failures_exit_non_zero():
    report = check_template(with_template(DROPS_ASSISTANT), "drops")
    assert not report.ok and report.status("roles") == "fail"
    tok = tiny_tokenizer("chatml")
    tok.chat_template = None
    assert not check_template(tok).ok
    report = check_template(with_template(NO_TOOL_ROLE), "no-tool")
    assert report.ok and report.status("roles") == "warn" and "tool-use environments" in str(report)
    assert report.status("tool results") == "skip"


def test_cli():
    result = runner.invoke(app, ["check-template", "tiny:qwen_tools"])
    assert result.exit_code == 0, result.output
    assert "PASS  append-only" in result.output and "result: turnrl can train" in result.output
    result = runner.invoke(app, ["check-template", "tiny:llama3", "--json"])
    data = json.loads(result.output)
    assert result.exit_code == 0 and data["ok"] and {c["name"] for c in data["checks"]} >= {"append-only", "thinking"}
    result = runner.invoke(app, ["check-template", "tiny:nope"])
    assert result.exit_code == 2 and "unknown template" in result.output
