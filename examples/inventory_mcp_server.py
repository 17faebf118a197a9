"""A small inventory service as a Model Context Protocol server (the official `mcp` SDK): three read-only tools.

`python inventory_mcp_server.py` serves over stdio (what `examples/inventory_env.py` starts);
`python inventory_mcp_server.py --http 8931` serves streamable HTTP at http://127.0.0.1:8931/mcp.
The data is made from a fixed seed, so the environment can compute each task's answer from the same `ITEMS`.
"""

import random
import sys

WAREHOUSES = ("north", "south", "east")
COLORS = ("red", "blue", "green", "black", "white", "yellow")
THINGS = ("widget", "gasket", "bracket", "hinge", "valve", "spring", "clamp")


def make_items() -> dict[str, dict]:
    """36 items: a SKU, a name, a unit price and the stock in each warehouse."""
    rng = random.Random(7)
    names = [f"{c} {t}" for t in THINGS for c in COLORS]
    rng.shuffle(names)
    items = {}
    for i, name in enumerate(names[:36]):
        sku = f"SKU-{100 + i}"
        items[sku] = {
            "sku": sku,
            "name": name,
            "price": round(rng.uniform(1, 40), 2),
            "stock": {w: rng.randint(0, 60) for w in WAREHOUSES},
        }
    return items


ITEMS = make_items()


def build_server():
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError  # its message reaches the model; other errors do not

    server = MCPServer("inventory")

    def item(sku: str) -> dict:
        if sku not in ITEMS:
            raise ToolError(f"unknown sku {sku!r}; search_items finds the sku of an item by name")
        return ITEMS[sku]

    @server.tool()
    def search_items(query: str) -> list[dict]:
        """Find items whose name contains every word of the query; returns their sku and name."""
        words = query.lower().split()
        return [
            {"sku": it["sku"], "name": it["name"]}
            for it in ITEMS.values()
            if words and all(w in it["name"] for w in words)
        ]

    @server.tool()
    def get_stock(sku: str, warehouse: str = "all") -> dict:
        """Units in stock of one item, per warehouse (north, south, east) or in one of them."""
        stock = item(sku)["stock"]
        if warehouse == "all":
            return {**stock, "total": sum(stock.values())}
        if warehouse not in stock:
            raise ToolError(f"unknown warehouse {warehouse!r}; use north, south, east or all")
        return {warehouse: stock[warehouse]}

    @server.tool()
    def get_price(sku: str) -> float:
        """The unit price of one item, in dollars."""
        return item(sku)["price"]

    return server


if __name__ == "__main__":
    app = build_server()
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
