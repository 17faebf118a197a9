"""Serving a policy over OpenAI's and Anthropic's HTTP APIs (docs/serving.md): ``turnrl serve`` runs
:class:`AgentServer` over any agent, and the training gateway (:mod:`turnrl.gateway`) builds on the same server. Above
the agents, below the gateway (docs/ARCHITECTURE.md).

* :mod:`~turnrl.serving.server` — :class:`AgentServer`: the OpenAI- and Anthropic-compatible HTTP server (Werkzeug);
* :mod:`~turnrl.serving.endpoints` — ``/v1/completions`` and ``/v1/chat/completions``;
* :mod:`~turnrl.serving.messages` — Anthropic's ``/v1/messages``, run through the chat path, and its events;
* :mod:`~turnrl.serving.responses` — OpenAI's ``/v1/responses``, run through the chat path, and its events;
* :mod:`~turnrl.serving.streaming` — server-sent events while the tokens are generated;
* :mod:`~turnrl.serving.openai_api` — OpenAI's request checks and message forms, errors in OpenAI's shape;
* :mod:`~turnrl.serving.anthropic_api` — Anthropic's request checks and content blocks, errors in Anthropic's shape;
* :mod:`~turnrl.serving.responses_api` — the Responses API's request checks and items, stored responses.
"""

from turnrl.serving.server import LOOPBACK, AgentServer

__all__ = ["LOOPBACK", "AgentServer"]
