"""The ``reward:`` section of a training config: how an on-policy run scores its episodes (docs/training.md
"How episodes are scored"; :mod:`turnrl.rl.sources.reward` applies it).

Without it, an episode's reward is its environment's own (the env's rule verifier). With it, each task is routed to
that rule or to a generative judge that reads the question, the reference answer and the episode's final reply::

    reward: {judge: policy, route: {arith-l1: rule, hotpotqa: judge}, default: auto}

Its namesake :mod:`turnrl.rl.formulas.rewards` is the same concept a layer down: the reward shaping these options
configure, as pure functions.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from turnrl.agents.spec import AgentSpec, keyword_typo

Route = Literal["rule", "judge", "auto"]
TEMPLATE_FIELDS = ("question", "gold", "prediction")


class RewardConfig(BaseModel):
    """[RTV + GenRM, docs/algorithms.md §8] A hybrid reward: each task goes to its environment's rule verifier where
    one applies and to a generative judge (the reference answer in its prompt) elsewhere. `rule` keeps the reward the
    environment gave; `judge` replaces the reward of the episode's last turn by the judge's verdict (1 for YES, 0
    for NO or an unreadable judgement); `auto` picks `rule` where the task's reference answer is a number or a
    formula or the task has tests (code), `judge` otherwise. Judgements are batched once per round; the held-out evaluation keeps the
    environment's own grading."""

    model_config = ConfigDict(extra="forbid")
    judge: AgentSpec = Field(
        AgentSpec("policy"),
        description=(
            "the judge: `policy` (the model being trained, with its current weights — no second model in memory) or an "
            "agent spec (a built-in model name, a path, hf:PATH, openai:URL#MODEL), its form checked at load"
        ),
    )
    route: dict[str, Route] = Field(
        default_factory=dict,
        description=("per mixture member name (turnrl/Mixture-v0's `name`s) or environment id: rule, judge or auto"),
    )
    default: Route = Field(
        "auto",
        description="the route of tasks `route` does not name (auto: rule where the "
        "reference is a number or a formula or the task has tests, else judge)",
    )
    template: str | None = Field(
        None,
        description=(
            "the judge's prompt, with the fields {question}, {gold} and {prediction}; it must end by asking for a last "
            "line that is exactly YES or NO (default: the built-in outcome template)"
        ),
    )
    max_new_tokens: int = Field(128, ge=1, description="the longest judgement")
    max_prediction_chars: int = Field(2000, ge=16, description="the end of the final reply the judge sees, at most")

    @field_validator("judge")
    @classmethod
    def _not_policy_misspelt(cls, judge: AgentSpec) -> AgentSpec:
        """``polcy`` is refused with "did you mean 'policy'" (a bare word is otherwise a model's name)."""
        if typo := keyword_typo(judge, ("policy",), "reward.judge"):
            raise typo
        return judge

    @field_validator("template")
    @classmethod
    def _fields(cls, template: str | None) -> str | None:
        if template is None:
            return None
        try:
            template.format(**dict.fromkeys(TEMPLATE_FIELDS, "x"))
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(
                f"reward.template may use only the fields {{question}}, {{gold}} and {{prediction}} "
                f"(write braces as {{{{ }}}}): {type(e).__name__}: {e}"
            ) from None
        missing = [k for k in ("gold", "prediction") if "{" + k + "}" not in template]
        if missing:
            raise ValueError(f"reward.template must show the judge {', '.join('{' + k + '}' for k in missing)}")
        return template


class ProcessRewardConfig(BaseModel):
    """[PRM for code, docs/algorithms.md §8] Dense rewards from a process reward model (`turnrl prm train`) at the line
    ends of every generated reply, added to the environment's (or the hybrid) reward as per-token rewards — for
    algorithms with a critic (ppo, vapo), whose GAE gives each token its credit."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="the PRM's folder (`turnrl prm train … --out FOLDER`)")
    coef: float = Field(0.5, gt=0, description="the scale of the dense rewards")
    form: Literal["delta", "value"] = Field(
        "delta",
        description=(
            "delta: the change of the PRM's value since the line before, and the last value taken back at the reply's "
            "end (potential-based: a reply's dense rewards add up to the same amount whatever it writes); value: the "
            "PRM's value at each line end divided by the reply's line count (the paper's; lines that look right pay)"
        ),
    )
