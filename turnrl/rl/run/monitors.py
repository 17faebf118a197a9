"""Training-health monitors: the failure modes that silently stop RL of LLMs, checked after every step.

Each check reads the step's metrics (and the run's history before it) and returns a warning, or ``None``:

* entropy collapse — the policy has become (nearly) deterministic, exploration is over;
* no learning signal — every group has zero reward variance, so group-normalized advantages are all zero;
* responses at the length limit — answers are being cut off (or the length is running away);
* length explosion — the mean response has grown several-fold since the run's first steps;
* reward without correctness — more and more episodes earn reward while the verifier says they are wrong: a
  partial-credit or format bonus is being farmed (the "\\boxed{25} \\boxed{51}" kind of hacking);
* training reward up, held-out success down — the policy is fitting the training reward, not the task;
* the checks plug-ins add, each run on the same arguments: registered with :func:`register_monitor`, or declared by an
  installed package under the ``turnrl.monitors`` entry point group (``name = "module:function"``), which is how
  turnrl's own methods add theirs (e.g. PAG's verdict collapse).

:func:`check_health` runs the built-in checks and the ones it is handed; the trainer hands it
:func:`registered_monitors` unless told otherwise (``Trainer(config, monitors=…)``), logs what it returns and counts
it in ``metrics.jsonl``. When the
episodes are stored data, not the policy's samples (an offline objective's source), only the entropy check applies.
Pure functions over metric dicts, so they are tested on made-up histories. One check reads the episodes themselves,
because its message quotes one: :func:`failed_episodes` (a step whose episodes failed, with the first error).

Its namesake :mod:`turnrl.methods.pag.monitors` is the same concept a layer up: a method's own monitors, plugged in
here by entry point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from turnrl.plugins import Registry

Metrics = dict[str, float]


class EpisodeFailures(RuntimeError):
    """Every episode of a training step failed: nothing to train on. Raised before the step's update (the run's last
    checkpoint and metrics are as they were; the step's episodes are saved for inspection)."""


def failed_episodes(
    step: int, played: int, failed: int, first_error: str | None, warn_share: float, in_play: int = 0
) -> tuple[str | None, str | None]:
    """``(warning, stop)`` for a step that played ``played`` episodes of which ``failed`` ended in an error
    (``first_error``: the first one's), ``in_play`` more still running (windowed rollouts carry them over).

    ``stop`` when every episode played failed and none is still in play — a run that trains nothing must say so
    and end, not print ``success 0.000`` and save a checkpoint; ``warning`` when at least ``warn_share`` of them
    failed. Each quotes the first error (the episodes of a step usually fail for one reason: a wrong endpoint, a
    missing key, a tool server down).
    """
    if played <= 0 or failed <= 0:
        return None, None
    first = first_error or "(see the episodes' `error` fields)"
    first = first if len(first) <= 500 else first[:500] + " …"
    share = failed / played
    if failed >= played and in_play == 0:
        return None, (
            f"step {step}: all {played} episodes failed, so there is nothing to train on; the first error: {first}"
        )
    if share >= warn_share:
        return (
            f"{failed} of {played} episodes failed ({share:.0%}; they are left out of training); the "
            f"first error: {first}"
        ), None
    return None, None


def _mean(records: Sequence[Metrics], key: str) -> float | None:
    """Mean of ``key`` over the records that have it (``None`` if none has)."""
    values = [r[key] for r in records if key in r]
    return sum(values) / len(values) if values else None


def _start(history: Sequence[Metrics], key: str, window: int) -> float | None:
    """Mean of ``key`` over the run's first ``window`` records that have it (``None`` until there are that many)."""
    early = [h for h in history if key in h][:window]
    return _mean(early, key) if len(early) == window else None


def entropy_collapse(info: Metrics, floor: float = 0.05) -> str | None:
    """Mean token entropy of the generated tokens below ``floor`` nats."""
    if "entropy" in info and info["entropy"] < floor:
        return f"entropy collapsed to {info['entropy']:.3f} (below {floor})"
    return None


def no_signal(info: Metrics) -> str | None:
    """Every group of samples got the same reward: nothing to learn from this step."""
    if info.get("zero_variance_groups", 0.0) < 1.0:
        return None
    hint = ""
    if info.get("success") == 1.0:
        hint = " (every sample solved its task: harder tasks would teach more)"
    elif info.get("success") == 0.0:
        hint = " (no sample solved its task: easier tasks, more samples or a higher temperature)"
    return "every group has zero reward variance: no learning signal" + hint


def length_limit(info: Metrics, max_new_tokens: int, share: float = 0.98) -> str | None:
    """The mean turn is at the per-turn generation limit (``turn_length``; the whole response where a record has
    no per-turn figure: one turn per episode)."""
    length = info.get("turn_length", info.get("response_length", 0.0))
    if length >= share * max_new_tokens:
        return f"responses hit the length limit ({length:.0f} of {max_new_tokens} tokens per turn)"
    return None


def length_explosion(history: Sequence[Metrics], info: Metrics, factor: float = 3.0, window: int = 3) -> str | None:
    """Mean response length above ``factor`` × its mean over the run's first ``window`` training steps."""
    base = _start(history, "response_length", window)
    if base is None or "response_length" not in info:
        return None
    if base > 0 and info["response_length"] > factor * base:
        return f"response length exploded: {info['response_length']:.0f} tokens vs {base:.0f} at the start"
    return None


def reward_without_correctness(
    history: Sequence[Metrics], info: Metrics, share: float = 0.5, rise: float = 0.25, window: int = 3
) -> str | None:
    """At least ``share`` of the episodes earn a positive reward the verifier does not call correct, ``rise`` more
    than over the run's first ``window`` training steps.

    The rise matters: partial credit by design (QA F1, PAG's verification turns) is there from the start; a bonus
    being farmed grows.
    """
    now, base = info.get("rewarded_incorrect"), _start(history, "rewarded_incorrect", window)
    if now is None or base is None:
        return None
    if now >= share and now - base >= rise:
        return (
            f"{now:.0%} of episodes earn reward without a correct answer (from {base:.0%} at the start): "
            "a format or partial-credit bonus may be being farmed"
        )
    return None


def held_out_divergence(history: Sequence[Metrics], info: Metrics, drop: float = 0.1, window: int = 3) -> str | None:
    """Held-out success ``drop`` or more below its best while the training reward rose since then.

    The training reward is the mean over ``window`` steps: those up to the best evaluation (the first training
    steps when the best was the evaluation before training) against the latest ones, so one lucky batch does not
    trigger it.
    """
    records = [*history, info]
    evals = [i for i, h in enumerate(history) if "eval_success" in h]
    if "eval_success" not in info or not evals:
        return None
    best = max(evals, key=lambda i: history[i]["eval_success"])
    if history[best]["eval_success"] - info["eval_success"] < drop:
        return None
    if "reward_mean" in history[best]:
        then = _mean(records[max(0, best - window + 1) : best + 1], "reward_mean")
    else:  # the evaluation before any training
        then = _mean(records[best + 1 : best + 1 + window], "reward_mean")
    now = _mean(records[-window:], "reward_mean")
    if then is None or now is None or now <= then:
        return None
    return (
        f"held-out success fell to {info['eval_success']:.1%} from its best {history[best]['eval_success']:.1%} "
        f"while the training reward rose ({then:.3f} -> {now:.3f}): reward hacking or overfitting"
    )


Check = Callable[[Sequence[Metrics], Metrics], "str | None"]
ENTRY_POINT_GROUP = "turnrl.monitors"
#: every registered check by name (:class:`turnrl.plugins.Registry`): entry points and a module's own
MONITORS: Registry[Check] = Registry("monitor", ENTRY_POINT_GROUP)


def register_monitor(name: str, check: str | Check, *, replace: bool = False) -> None:
    """Add a health check run after every step: ``check(history, info) -> warning or None``, or a lazy
    ``"module:function"`` string.

    Raises:
        ValueError: ``name`` is taken (pass ``replace=True`` to override it on purpose).
    """
    MONITORS.register(name, check, replace=replace)


def registered_monitors() -> dict[str, Check]:
    """Every registered check by name, loaded.

    Raises:
        ValueError: an entry that does not load (naming it).
    """
    return MONITORS.loaded()


def check_health(
    history: Sequence[Metrics],
    info: Metrics,
    max_new_tokens: int,
    *,
    sampled: bool = True,
    monitors: Sequence[Check] = (),
) -> list[str]:
    """All warnings for this step's ``info`` given the ``history`` of earlier records (step 0 included): the
    built-in checks and ``monitors`` (e.g. :func:`registered_monitors`'s); ``sampled=False`` (an offline objective's
    stored episodes): only the checks of the learner's own figures."""
    if not sampled:
        return [w for w in (entropy_collapse(info),) if w is not None]
    found = [
        entropy_collapse(info),
        no_signal(info),
        length_limit(info, max_new_tokens),
        length_explosion(history, info),
        reward_without_correctness(history, info),
        held_out_divergence(history, info),
        *(check(history, info) for check in monitors),
    ]
    return [w for w in found if w is not None]
