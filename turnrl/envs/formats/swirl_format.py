"""SWiRL's format (docs/algorithms.md §1): one tool call or one answer per turn, tool results as ``QUERY -> RESULT``.

Calculator ``<math_exp>EXPR</math_exp>``, search ``<search_query>QUERY</search_query>``, final ``<answer>…</answer>``.
Small models need to see the format. Demonstrations (built-in, a text, a file or none) go either into the
conversation before the question, as earlier chat turns (:func:`demo_messages`; what a 135M model follows — with them
SmolLM2-135M-Instruct calls the calculator on every held-out problem, with the same text in the system prompt on
none), or into the system prompt (:func:`with_demos`).
"""

from __future__ import annotations

from pathlib import Path

from turnrl.types import Message

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
assistant: <answer>85</answer>

Question: What is 672 / 8?
assistant: <math_exp>672 / 8</math_exp>
tool: 672 / 8 -> 84
assistant: <answer>84</answer>"""

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
        raise TypeError(
            f"demos must be 'default', 'none', a file path or the demonstrations' text, got {type(demos).__name__}"
        )
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
            raise FileNotFoundError(
                f"demos={demos!r} looks like a file path, but there is no such file; pass an "
                "existing file, the demonstrations' text, 'default' or 'none'"
            )
    return demos


def with_demos(system_prompt: str | None, instructions: str, demos: str | None, default: str) -> str:
    """``system_prompt``, the format's instructions and the demonstrations (if any), as one system message."""
    parts = [p for p in (system_prompt, instructions) if p]
    text = demo_text(demos, default)
    if text:
        parts.append("Examples:\n\n" + text.strip())
    return "\n\n".join(parts)


ROLES = {"question": "user", "assistant": "assistant", "tool": "tool"}


def demo_messages(text: str | None, tool_name: str, question_suffix: str = "") -> tuple[Message, ...]:
    """Demonstrations as chat messages, to put before the question: each ``Question:`` line opens a user message
    (``question_suffix`` appended, as the environment appends its instruction to real questions), ``assistant:``
    an assistant one, ``tool:`` a tool result (named ``tool_name``); other lines continue the message above them and
    blank lines separate examples.

    Raises:
        ValueError: the text does not start with ``Question:``, or a message is empty.
    """
    if not text:
        return ()
    messages: list[dict[str, str]] = []
    for line in text.strip().splitlines():
        head, sep, rest = line.partition(":")
        role = ROLES.get(head.strip().lower()) if sep else None
        if role is not None:
            messages.append({"role": role, "content": rest.strip()})
        elif not messages:
            raise ValueError(f"demonstrations must start with a 'Question:' line, got {line[:60]!r}")
        elif line.strip():
            messages[-1]["content"] += "\n" + line.rstrip()
    if messages[0]["role"] != "user":
        raise ValueError("demonstrations must start with a 'Question:' line")
    out = []
    for m in messages:
        if not m["content"]:
            raise ValueError(f"an empty {m['role']!r} line in the demonstrations")
        content = f"{m['content']}\n\n{question_suffix}" if m["role"] == "user" and question_suffix else m["content"]
        out.append(Message(role=m["role"], content=content, name=tool_name if m["role"] == "tool" else None))
    return tuple(out)


def place_demos(
    system_prompt: str | None,
    instructions: str,
    demos: str | None,
    default: str,
    demos_in: str,
    tool_name: str,
    question_suffix: str = "",
) -> tuple[str, tuple[Message, ...]]:
    """``(system prompt, demonstration messages)`` for ``demos_in`` ``"turns"`` (the demonstrations as earlier chat
    turns) or ``"system"`` (inside the system prompt).

    Raises:
        ValueError: another ``demos_in``.
    """
    if demos_in == "system":
        return with_demos(system_prompt, instructions, demos, default), ()
    if demos_in == "turns":
        return (
            with_demos(system_prompt, instructions, None, default),
            demo_messages(demo_text(demos, default), tool_name, question_suffix),
        )
    raise ValueError(f"demos_in must be 'turns' or 'system', got {demos_in!r}")
