"""Tools: the ``@tool`` decorator, tool-call parsers and built-in tools (docs/concepts.md §2)."""

from turnrl.tools.base import Tool, Toolbox, ToolError, ToolOutput, tool
from turnrl.tools.calculator import CalculatorError, calculator
from turnrl.tools.mcp import MCPServer, MCPServerError, mcp_tools
from turnrl.tools.parsers import HermesParser, ParseResult, TagParser, ToolCallParser, extract_tag, get_parser

__all__ = [
    "CalculatorError",
    "HermesParser",
    "MCPServer",
    "MCPServerError",
    "ParseResult",
    "TagParser",
    "Tool",
    "ToolCallParser",
    "ToolError",
    "ToolOutput",
    "Toolbox",
    "calculator",
    "extract_tag",
    "get_parser",
    "mcp_tools",
    "tool",
]
