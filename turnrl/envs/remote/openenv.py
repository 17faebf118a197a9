"""How a client environment talks to an OpenEnv server's environment, which knows nothing of chat messages.

Text becomes the environment's action: the action's only text field (``message`` for most), or, when the action has
several fields, the JSON object the model writes. An observation (its fields but ``done``, ``reward`` and
``metadata``) becomes one user message: its only text field, or its fields as JSON.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from turnrl.envs.remote import protocol as p
from turnrl.envs.remote.protocol import RemoteEnvError
from turnrl.types import Message


@dataclass
class Action:
    """An OpenEnv environment's action, as its ``/schema`` describes it."""

    env_id: str = "remote/OpenEnv-v0"
    schema: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def fetch(cls, url: str, timeout: float, headers: dict[str, str] | None = None) -> Action:
        """The action schema and the name (as a turnrl id) that the server at ``url`` gives (defaults without);
        ``headers``: sent with both requests (the client's API key)."""
        import httpx

        out = cls()
        try:
            schema = httpx.get(p.http_url(url, "schema"), timeout=timeout, headers=headers).json()
            out.schema = schema.get("action") or {}
            meta = httpx.get(p.http_url(url, "metadata"), timeout=timeout, headers=headers).json()
            out.env_id = env_name(str(meta.get("name") or "")) or out.env_id
        except (httpx.HTTPError, ValueError, AttributeError):
            pass  # no schema: the action is the JSON object the model writes
        return out

    @property
    def text_field(self) -> str | None:
        """The field the text goes into: the only string field, when no other is required."""
        props = self.schema.get("properties") or {}
        texts = [k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"]
        required = set(self.schema.get("required") or [])
        return texts[0] if len(texts) == 1 and required <= {texts[0]} else None

    def payload(self, text: str) -> dict[str, Any] | str:
        """The step's data for ``text``, or the message that tells the model what to write instead."""
        if self.text_field is not None:
            return {self.text_field: text}
        try:
            value = json.loads(strip_fence(text))
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            fields = self.schema.get("properties")
            return (
                "Error: this environment's action is a JSON object"
                + (f" with the fields {json.dumps(fields)}" if fields else "")
                + "; write only that object."
            )
        return value


def turn(reply: p.Reply, where: str) -> tuple[tuple[Message, ...], float, bool, bool, dict[str, Any]]:
    """``(messages, reward, terminated, truncated, info)`` of an OpenEnv ``observation`` message."""
    try:
        data = p.ObservationData.model_validate(reply.data)
    except ValueError as e:
        raise RemoteEnvError(f"{where} sent a malformed observation: {e}") from None
    fields = {k: v for k, v in data.observation.items() if k not in ("done", "reward", "metadata")}
    texts = [v for v in fields.values() if isinstance(v, str)]
    content = texts[0] if len(fields) == 1 and texts else json.dumps(fields, ensure_ascii=False, default=str)
    reward = 0.0 if data.reward is None else float(data.reward)
    info = {"openenv": fields, "metadata": data.observation.get("metadata") or {}}
    return (Message(role="user", content=content),), reward, bool(data.done), False, info


def env_name(name: str) -> str:
    """An OpenEnv environment's name as a turnrl id (``EchoEnvironment`` → ``remote/EchoEnvironment-v0``)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "", name.replace(" ", ""))
    return f"remote/{cleaned}-v0" if cleaned else ""


def strip_fence(text: str) -> str:
    """The inside of a fenced code block, if the text has one."""
    m = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    return m.group(1) if m else text.strip()
