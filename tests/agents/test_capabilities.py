"""The agent contract's optional capabilities (turnrl/agents/base.py): every built-in agent declares them, exactly
what its methods show; an undeclared agent (a user's, written to the two-member protocol) gets them read from its
methods in one place; and no other module of turnrl looks at an agent's attributes or signatures."""

import re
import threading
from pathlib import Path

from turnrl.agents.base import Capabilities, capabilities_of, inferred_capabilities
from turnrl.agents.hf import HFAgent
from turnrl.agents.openai import OpenAIAgent
from turnrl.agents.scripted import FixedAgent, RandomAgent, ScriptedAgent
from turnrl.agents.tiny import tiny_model, tiny_tokenizer
from turnrl.rl.placement.worker import VersionedAgent

ROOT = Path(__file__).resolve().parents[2]


def vllm_shell(cls):
    """A vLLM agent without its engine (vLLM is a GPU extra): enough to read what it declares and what its methods
    show, which depend on its class and its end-of-turn ids only."""
    agent = cls.__new__(cls)
    agent.eos_ids = [2]
    return agent


def built_in_agents():
    from turnrl.agents.vllm import VLLMAgent
    from turnrl.agents.vllm_async import AsyncVLLMAgent

    tok = tiny_tokenizer("chatml")
    hf = HFAgent(tiny_model(tok), tok)
    no_sessions = HFAgent(tiny_model(tok), tok, kv_cache_mb=0)
    return {
        "hf": hf,
        "hf-no-kv": no_sessions,
        "openai": OpenAIAgent("http://127.0.0.1:9", "m", tokenizer=tok),
        "scripted": ScriptedAgent(tok, lambda prompt: "hi"),
        "fixed": FixedAgent(tok, ["a"]),
        "random": RandomAgent(tok),
        "versioned-hf": VersionedAgent(hf, threading.Lock(), lambda: 3),
        "vllm": vllm_shell(VLLMAgent),
        "vllm-async": vllm_shell(AsyncVLLMAgent),
    }


def test_every_built_in_agent_declares_what_its_methods_show():
    agents = built_in_agents()
    for name, agent in agents.items():
        declared = agent.capabilities
        assert isinstance(declared, Capabilities), name
        if name != "versioned-hf":  # it hides the inner agent's batch joining on purpose (below)
            assert declared == inferred_capabilities(agent), name
    hf, versioned = agents["hf"].capabilities, agents["versioned-hf"].capabilities
    assert hf.seeds and hf.sessions and hf.join_batch and hf.local_model and hf.eos_ids
    assert not agents["hf-no-kv"].capabilities.sessions
    assert agents["openai"].capabilities == Capabilities(async_batch=True, eos_ids=hf.eos_ids)
    assert agents["scripted"].capabilities == Capabilities(on_token=True)
    assert agents["vllm-async"].capabilities.inflight_updates and not agents["vllm"].capabilities.inflight_updates
    # a rollout worker's agent: every call under the weights lock, so no batch joining and no async batch
    assert versioned.seeds and versioned.sessions and versioned.local_model and versioned.eos_ids == hf.eos_ids
    assert not versioned.join_batch and not versioned.async_batch


def test_a_subclass_that_narrows_generate_loses_what_it_no_longer_takes():
    tok = tiny_tokenizer("chatml")

    class Counting(ScriptedAgent):  # declares its parent's on_token by inheritance, but generate no longer takes it
        def generate(self, prompts, params):
            return super().generate(prompts, params)

    assert ScriptedAgent(tok, lambda p: "x").capabilities.on_token
    assert not capabilities_of(Counting(tok, lambda p: "x")).on_token


def test_an_undeclared_agent_gets_what_its_methods_show():
    class Plain:
        tokenizer = None

        def generate(self, prompts, params):
            return []

    class Seeded(Plain):
        eos_ids = [7]  # a test double's constant, never changed

        def generate(self, prompts, params, *, seeds=None, on_token=None):
            return []

        async def agenerate(self, prompts, params):
            return []

    assert capabilities_of(Plain()) == Capabilities()
    assert capabilities_of(Seeded()) == Capabilities(
        seeds=True, on_token=True, async_batch=True, eos_ids=frozenset({7})
    )


# getattr(agent, "x") / hasattr(agent, "x") for anything but the protocol's own tokenizer, or an agent's signature
PROBE = re.compile(r'(getattr|hasattr)\((self\.)?agent, "(?!tokenizer")|inspect\.signature\((self\.)?agent\.')


def test_no_module_but_the_contract_probes_an_agent():
    # the one adapter; and LLM judges, which take an agent or anything with chat() and, being verifiers, sit below
    # the agents' contract (docs/ARCHITECTURE.md, Known gaps)
    allowed = {"turnrl/agents/base.py", "turnrl/verifiers/judge.py"}
    found = []
    for path in sorted((ROOT / "turnrl").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if PROBE.search(line) and rel not in allowed:
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, (
        "agents probed outside turnrl/agents/base.py (declare a Capabilities field instead):\n" + "\n".join(found)
    )
