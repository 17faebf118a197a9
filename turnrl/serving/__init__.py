"""Serving a policy over OpenAI's HTTP API (docs/serving.md): ``turnrl serve`` runs :class:`AgentServer` over any
agent, and the training gateway (:mod:`turnrl.gateway`) builds on the same server. Above the agents, below the
gateway (docs/ARCHITECTURE.md).

* :mod:`~turnrl.serving.server` — :class:`AgentServer`: the OpenAI-compatible HTTP server (Werkzeug);
* :mod:`~turnrl.serving.streaming` — server-sent events while the tokens are generated;
* :mod:`~turnrl.serving.openai_api` — OpenAI's request checks and message forms, errors in OpenAI's shape.
"""

from turnrl.serving.server import LOOPBACK, AgentServer

__all__ = ["LOOPBACK", "AgentServer"]
