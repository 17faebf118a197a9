"""A tool-use environment whose tools come from an MCP server: stock and cost questions about an inventory.

The tools (`search_items`, `get_stock`, `get_price`) live in `inventory_mcp_server.py`, started as a subprocess
over stdio (or reached at `mcp_url` over streamable HTTP); the agent must call them, since the data is only there.
From this folder every command sees the environment as `inventory_env:examples/Inventory-v0`;
`turnrl train inventory.yaml` trains on it, `python inventory_env.py` checks it with the conformance harness.
"""

import functools
import random
import sys
from pathlib import Path

import turnrl
from turnrl.envs import Task, ToolEnv
from turnrl.tools.mcp import mcp_tools
from turnrl.types import ToolCall
from turnrl.verifiers.math import verify

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from inventory_mcp_server import ITEMS  # noqa: E402 — the same data the server answers from

SKUS = sorted(ITEMS)


def make_tasks(split: str) -> list[Task]:
    """Train asks about the first 24 items, test about the last 12: the splits share no item."""
    skus = SKUS[:24] if split == "train" else SKUS[24:]
    rng, tasks = random.Random(split), []
    for sku in skus:
        it = ITEMS[sku]
        tasks.append(
            Task(
                id=f"inventory/{split}/{sku}/stock",
                answer=str(sum(it["stock"].values())),
                prompt=f"How many {it['name']}s are in stock across all warehouses?",
                metadata={"sku": sku, "name": it["name"], "tool": "get_stock"},
            )
        )
        n = rng.randint(2, 9)
        tasks.append(
            Task(
                id=f"inventory/{split}/{sku}/cost",
                answer=f"{n * it['price']:.2f}",
                prompt=f"What do {n} {it['name']}s cost in dollars?",
                metadata={"sku": sku, "name": it["name"], "tool": "get_price", "n": n},
            )
        )
    return tasks


class InventoryEnv(ToolEnv):
    """Answer stock and cost questions with an inventory service's MCP tools."""

    def __init__(self, split: str = "train", mcp_url: str | None = None, **options):
        server = mcp_url or [sys.executable, str(HERE / "inventory_mcp_server.py")]
        super().__init__(
            make_tasks(split),
            tools=mcp_tools(server, timeout=20),
            verifier=functools.partial(verify, answer_format="auto"),
            instruction="Use the tools, then answer with a number in <answer></answer> tags.",
            **options,
        )
        self.split, self.held_out_split = split, "test"

    def oracle_calls(self, task):
        meta = task.metadata
        return [
            ToolCall(name="search_items", arguments={"query": meta["name"]}),
            ToolCall(name=meta["tool"], arguments={"sku": meta["sku"]}),
        ]

    def format_answer(self, answer):
        return f"<answer>{answer}</answer>"


turnrl.register("examples/Inventory-v0", "inventory_env:InventoryEnv")

if __name__ == "__main__":
    from turnrl.envs.conformance.contract import check_environment

    env = turnrl.make("examples/Inventory-v0")
    print(check_environment(env))
