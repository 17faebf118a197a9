"""SWiRL's format (ALGORITHMS.md §1): one tool call or one answer per turn, tool results as ``QUERY -> RESULT``.

Calculator ``<math_exp>EXPR</math_exp>``, search ``<search_query>QUERY</search_query>``, final ``<answer>…</answer>``.
Small models need to see the format: :func:`with_demos` appends few-shot demonstrations (built-in, a text, a file or
none) to a system prompt.
"""

from __future__ import annotations

from pathlib import Path

MATH_STOP = ("</math_exp>", "</answer>")
SEARCH_STOP = ("</search_query>", "</answer>")

MATH_INSTRUCTIONS = (
    "Solve the problem one step per message. To calculate, write only the expression in math_exp tags, such as "
    "<math_exp>3 * 12</math_exp>, and stop; the result comes back as 3 * 12 -> 36. When you know the answer, write "
    "only the number in answer tags, such as <answer>36</answer>."
)
MATH_DEMOS = """Question: Tom has 3 boxes of 12 pens and gives away 5 pens. How many pens does he have?
assistant: <math_exp>3 * 12</math_exp>
tool: 3 * 12 -> 36
assistant: <math_exp>36 - 5</math_exp>
tool: 36 - 5 -> 31
assistant: <answer>31</answer>

Question: What is 47 + 38?
assistant: <math_exp>47 + 38</math_exp>
tool: 47 + 38 -> 85
assistant: <answer>85</answer>"""

SEARCH_INSTRUCTIONS = (
    "Answer the question one step per message. To search, write only a query in search_query tags, such as "
    "<search_query>Jaws film director</search_query>, and stop; the results come back as QUERY -> RESULT. When you "
    "know the answer, write only a short answer in answer tags, such as <answer>Steven Spielberg</answer>."
)
SEARCH_DEMOS = """Question: Which country is the director of the film Jaws from?
assistant: <search_query>Jaws film director</search_query>
tool: Jaws film director -> Jaws (film): Jaws is a 1975 American thriller film directed by Steven Spielberg.
assistant: <search_query>Steven Spielberg nationality</search_query>
tool: Steven Spielberg nationality -> Steven Spielberg: Steven Spielberg is an American filmmaker.
assistant: <answer>United States</answer>

Question: Are the Louvre and the Prado in the same country?
assistant: <search_query>Louvre museum city</search_query>
tool: Louvre museum city -> Louvre: The Louvre is an art museum in Paris, France.
assistant: <search_query>Prado museum city</search_query>
tool: Prado museum city -> Museo del Prado: The Prado is the national art museum of Spain, in Madrid.
assistant: <answer>no</answer>"""


def demo_text(demos: str | None, default: str) -> str | None:
    """The demonstrations: ``"default"`` → ``default``; None or ``"none"`` → none; the path of an existing file →
    its text; any other string → itself.

    Raises:
        TypeError: ``demos`` is not a string or None.
        FileNotFoundError: ``demos`` looks like a file path (one word with a ``/`` or a ``.txt``/``.md`` ending)
            but no such file exists — a misspelled path must not become the demonstrations.
    """
    if demos is None or demos == "none":
        return None
    if not isinstance(demos, str):
        raise TypeError(f"demos must be 'default', 'none', a file path or the demonstrations' text, got "
                        f"{type(demos).__name__}")
    if demos == "default":
        return default
    if len(demos.split()) == 1 and len(demos) < 1024:
        path = Path(demos).expanduser()
        try:
            if path.is_file():
                return path.read_text(encoding="utf-8")
        except OSError:  # e.g. a name too long to be a file: it is text
            return demos
        if "/" in demos or path.suffix in (".txt", ".md"):
            raise FileNotFoundError(f"demos={demos!r} looks like a file path, but there is no such file; pass an "
                                    "existing file, the demonstrations' text, 'default' or 'none'")
    return demos


def with_demos(system_prompt: str | None, instructions: str, demos: str | None, default: str) -> str:
    """``system_prompt``, the format's instructions and the demonstrations (if any), as one system message."""
    parts = [p for p in (system_prompt, instructions) if p]
    text = demo_text(demos, default)
    if text:
        parts.append("Examples:\n\n" + text.strip())
    return "\n\n".join(parts)
