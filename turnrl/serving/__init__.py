"""Serving a policy over OpenAI's and Anthropic's HTTP APIs (docs/serving.md): ``turnrl serve`` runs
:class:`AgentServer` over any agent, and the training gateway (:mod:`turnrl.gateway`) builds on the same server. Above
the agents, below the gateway (docs/ARCHITECTURE.md).

* :mod:`~turnrl.serving.server` — :class:`AgentServer`: the OpenAI- and Anthropic-compatible HTTP server (Werkzeug);
* :mod:`~turnrl.serving.endpoints` — ``/v1/completions`` and ``/v1/chat/completions``;
* :mod:`~turnrl.serving.messages` — Anthropic's ``/v1/messages``, run through the chat path, and its events;
* :mod:`~turnrl.serving.responses` — OpenAI's ``/v1/responses``, run through the chat path, and its events;
* :mod:`~turnrl.serving.streaming` — server-sent events while the tokens are generated;
* :mod:`~turnrl.serving.openai_api` — OpenAI's request checks and message forms, errors in OpenAI's shape;
* :mod:`~turnrl.serving.anthropic_requests` — Anthropic's Messages requests read into the chat form;
* :mod:`~turnrl.serving.anthropic_answers` — Anthropic's responses, content blocks, stop reasons and errors;
* :mod:`~turnrl.serving.responses_requests` — the Responses API's requests read into the chat form, stored responses;
* :mod:`~turnrl.serving.responses_answers` — the Responses API's response objects and output items.
"""

from turnrl.serving.server import LOOPBACK, AgentServer

__all__ = ["LOOPBACK", "AgentServer"]
