"""Train the agent you already have: an OpenAI- and Anthropic-compatible gateway that records every call with its
exact tokens.

* :mod:`turnrl.gateway.server` — :class:`Gateway`, the HTTP server (sessions, token-exact prompts, batching);
* :mod:`turnrl.gateway.history` — chat prompts that reuse the sampled tokens, and template drift;
* :mod:`turnrl.gateway.record` — a session's calls → one episode (segments where the history was rewritten);
* :mod:`turnrl.gateway.shared_engine` — one agent serving many threads in shared batches;
* :mod:`turnrl.gateway.program` — user programs (functions or commands), their results and timeouts;
* :mod:`turnrl.gateway.runner` — jobs played by a program, for training and evaluation.
"""

from turnrl.gateway.program import Outcome, parse_outcome
from turnrl.gateway.record import Call, build_trajectory
from turnrl.gateway.runner import GatewayRunner, Program, play_programs
from turnrl.gateway.server import Gateway

__all__ = [
    "Call",
    "Gateway",
    "GatewayRunner",
    "Outcome",
    "Program",
    "build_trajectory",
    "parse_outcome",
    "play_programs",
]
