"""Is a run's evaluation held out from its training? Checked before a model loads (``turnrl train``) and before the
first step (the trainer), by canonical form (:mod:`turnrl.envs.conformance.split_check`):

* :func:`check_held_out` — the held-out tasks a run evaluates against the training split it reads;
* :func:`check_validation` — the validation tasks (``validate_every``) against the training split
  (:func:`check_game_validation`: a game's);
* :func:`check_extra_evals` — the problems of the run's evaluations on other environments (``extra_evals``,
  resolved by :func:`plan_extra_evals`) against the training split;
* :func:`check_dataset` — an offline run's stored episodes (``metadata["item"]``, recorded by ``turnrl rollout``)
  against its held-out and validation problems.

Each raises :class:`HeldOutError` where the environment calls the evaluated split held out and the two share
problems, and returns a warning where nothing can be claimed held out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from turnrl.envs.multiagent.registry import is_multi_agent
from turnrl.rl.run.evaluate import held_out_kwargs, run_eval_kwargs
from turnrl.rollout.opponents import Opponent
from turnrl.types import Trajectory

if TYPE_CHECKING:
    from turnrl.rl.config import TrainConfig


class HeldOutError(ValueError):
    """A training run whose held-out evaluation would pose problems it trains on, on an environment that calls that
    evaluation held out (raised before the first step; ``turnrl train`` says it in one line before a model loads)."""


def _shares_prompts(train_env: Any, held_env: Any, n: int) -> list[str]:
    """The prompts among the first ``min(n, 16)`` held-out tasks that the training env poses at the same index (for
    environments without a list of tasks, whose tasks only a reset shows)."""
    try:
        n = min(n, 16, len(train_env), len(held_env))
        prompts = [
            [env.reset(seed=0, options={"index": i})[0][-1].content for i in range(n)] for env in (train_env, held_env)
        ]
    except Exception:  # no index option or no length: nothing to compare
        return []
    return sorted(set(prompts[0]) & set(prompts[1]))


def check_held_out(env_id: str, train_env: Any, held_env: Any, n_tasks: int) -> str | None:
    """Whether a run's evaluation (``held_env``'s first ``n_tasks`` tasks) is held out from its training
    (``train_env``), by canonical form (:func:`turnrl.envs.conformance.split_check.held_out_overlap`).

    Returns None when it is (or nothing can be compared); a warning when they share problems and the environment
    does not call the evaluated split held out (it declares none, or ``eval_kwargs`` chose a training split: the
    report says "NOT held-out").

    Raises:
        HeldOutError: they share problems and the environment calls the evaluated split its held-out split (HotPotQA
            trained on ``split: dev``, MATH-500 on its test set): its held-out figures would be training figures.
    """
    from turnrl.envs.conformance.split_check import SHOWN, held_out_overlap

    shared = held_out_overlap(train_env, held_env, n_tasks)
    if shared is None:
        shared = _shares_prompts(train_env, held_env, n_tasks)
    if not shared:
        return None
    split, held = getattr(held_env, "split", None), getattr(held_env, "held_out_split", None)
    train_split = getattr(train_env, "split", None)
    example = ", ".join(repr(k) for k in shared[:SHOWN])
    if split is not None and split == held:
        raise HeldOutError(
            f"{env_id}: the held-out evaluation (split {split!r}) would pose {len(shared)} problem(s) this run trains "
            f"on (training split {train_split!r}), e.g. {example}; its held-out figures would be training figures. "
            "Train on a split held apart from it (HotPotQA: split dev-train, held-out dev-test; GSM8K: split train), "
            "or set env.eval_kwargs to tasks the run does not train on"
        )
    return (
        f"warning: {env_id} has no held-out split here ({len(shared)} of the evaluated problems are training "
        f"problems, e.g. {example}), so the held-out success below is measured on training tasks; set "
        "env.eval_kwargs (e.g. split: test) to tasks the policy does not train on"
    )


def check_validation(env_id: str, train_env: Any, kwargs: dict[str, Any], n_tasks: int) -> None:
    """Refuse validation problems (the first ``n_tasks`` of the environment made with ``kwargs``) that the run trains
    on, by canonical form: a step chosen on them would be chosen on training problems (a run trained on its
    validation split, or a dataset given whole by path for both).

    Raises:
        HeldOutError: they share problems.
    """
    from turnrl.envs.conformance.split_check import SHOWN, held_out_overlap
    from turnrl.envs.registry import make

    val_env = make(env_id, **kwargs)
    try:
        shared = held_out_overlap(train_env, val_env, n_tasks) or []
    finally:
        val_env.close()
    if shared:
        raise HeldOutError(
            f"{env_id}: the validation split {kwargs.get('split')!r} would pose {len(shared)} problem(s) "
            f"this run trains on, e.g. {', '.join(repr(k) for k in shared[:SHOWN])}; choices made on it "
            "would be made on training problems. Train on the training split"
        )


def check_dataset(
    env_id: str,
    kwargs: dict[str, Any],
    eval_kwargs: dict[str, Any] | None,
    n_eval: int,
    episodes: list[Trajectory],
    n_validation: int = 0,
) -> str | None:
    """Refuse stored episodes (an offline run's dataset) that pose the run's held-out problems — the first ``n_eval``
    of its evaluation — or, with ``n_validation``, its validation problems, by the canonical form ``turnrl rollout``
    records in each (``metadata["item"]``).

    Returns:
        None, or a warning when episodes carry no item (datasets written before items were recorded: they cannot be
        checked, and one sampled from an older split may hold today's held-out problems).

    Raises:
        HeldOutError: episodes pose held-out or validation problems.
    """
    from turnrl.envs.conformance.split_check import SHOWN, task_keys
    from turnrl.envs.registry import make

    train_env = make(env_id, **kwargs)
    try:
        held_kwargs = run_eval_kwargs(train_env, kwargs, eval_kwargs)
        validation = getattr(train_env.unwrapped, "validation_split", None)
    finally:
        train_env.close()
    guarded: dict[str, str] = {}
    for role, env_kwargs, n in (
        ("held-out", held_kwargs, n_eval),
        ("validation", {**held_kwargs, "split": validation}, n_validation),
    ):
        if n <= 0 or (role == "validation" and validation is None):
            continue
        env = make(env_id, **env_kwargs)
        try:
            declared = getattr(env, "split", None) is not None and getattr(env, "split", None) in (
                getattr(env, "held_out_split", None),
                validation,
            )
            if declared:  # (an environment without a held-out split evaluates on training tasks, and says so)
                guarded.update(dict.fromkeys(task_keys(env, n) or [], role))
        finally:
            env.close()
    items = [t.metadata.get("item") for t in episodes]
    shared = sorted({i for i in items if i is not None and i in guarded})
    if shared:
        raise HeldOutError(
            f"the data holds {len(shared)} of this run's {'/'.join(sorted(set(guarded.values())))} "
            f"problems ({sum(i in guarded for i in items)} episodes), e.g. "
            f"{', '.join(repr(k) for k in shared[:SHOWN])}: it would train on what it evaluates on. "
            "Sample the data from the training split (turnrl rollout --kw split=train)"
        )
    missing = sum(i is None for i in items)
    if missing:
        return (
            f"{missing} of {len(items)} stored episodes carry no item (each task's canonical form, which turnrl "
            "rollout and turnrl pag checks record; a file written before they did, or by another tool, has none): "
            "they cannot be checked against the held-out problems; re-sample them if they came from an older "
            "split"
        )
    return None


def check_game_held_out(
    env_id: str, kwargs: dict[str, Any], eval_kwargs: dict[str, Any] | None, n_tasks: int
) -> str | None:
    """:func:`check_held_out` for an environment with several agents: the game made with the run's ``kwargs``
    against the one its held-out evaluation plays (``eval_kwargs``, else its held-out split), where the game has a
    list of problems (``task_at``: the solver–critic game), and where it can tell (``reached_by``: tic-tac-toe), whether
    a training game can reach a held-out starting state, whatever either was made with (``max_opening``).

    Raises:
        HeldOutError: held-out problems are training problems, or held-out starting states a game that claims to
            hold them out (``held_out_states``) can be reached from the training ones."""
    from turnrl.envs.multiagent import make_multi_agent

    train = make_multi_agent(env_id, **kwargs)
    held_kwargs = {k: v for k, v in kwargs.items() if k != "split"} | dict(eval_kwargs or {})
    if "split" not in held_kwargs and getattr(train, "held_out_split", None) is not None:
        held_kwargs["split"] = train.held_out_split
    held = make_multi_agent(env_id, **held_kwargs)
    try:
        warning = check_held_out(env_id, train, held, n_tasks)
        claims = callable(getattr(held, "held_out_states", None)) and held.held_out_states().claimed
        if claims and callable(getattr(held, "reached_by", None)) and type(train) is type(held):
            reached = held.reached_by(train)
            if reached:
                raise HeldOutError(
                    f"{env_id}: {len(reached)} held-out starting state(s) ({held_kwargs}) can be reached "
                    f"by a game from the training ones ({kwargs}), e.g. {', '.join(map(repr, reached[:3]))}"
                    "; its held-out figures would be measured where training plays. Evaluate with the "
                    "training kwargs (drop env.eval_kwargs' max_opening)"
                )
        return warning
    finally:
        train.close()
        held.close()


def check_game_validation(
    env_id: str, kwargs: dict[str, Any], eval_kwargs: dict[str, Any] | None, n_tasks: int
) -> dict[str, Any]:
    """:func:`check_validation` for an environment with several agents (``validate_every`` on a game with a list of
    problems, the solver–critic game): the game's validation split, made with the run's ``kwargs`` and
    ``eval_kwargs``, against its training problems. Returns the validation games' kwargs.

    Raises:
        ValueError: the game declares no validation split (``validation_split``).
        HeldOutError: its first ``n_tasks`` validation problems are training problems.
    """
    from turnrl.envs.conformance.split_check import SHOWN, held_out_overlap
    from turnrl.envs.multiagent import make_multi_agent

    train = make_multi_agent(env_id, **kwargs)
    try:
        split = getattr(train, "validation_split", None)
        if split is None:
            raise ValueError(
                f"validate_every reads a validation split, but {env_id} declares none "
                "(validation_split); set validate_every=0 and use eval_every, or give the game one"
            )
        val_kwargs = {k: v for k, v in kwargs.items() if k != "split"} | dict(eval_kwargs or {}) | {"split": split}
        val = make_multi_agent(env_id, **val_kwargs)
        try:
            shared = held_out_overlap(train, val, n_tasks) or []
        finally:
            val.close()
    finally:
        train.close()
    if shared:
        raise HeldOutError(
            f"{env_id}: the validation split {split!r} would pose {len(shared)} problem(s) this run "
            f"trains on, e.g. {', '.join(repr(k) for k in shared[:SHOWN])}; choices made on it would "
            "be made on training problems. Train on the training split"
        )
    return val_kwargs


def check_run(cfg: TrainConfig, train_env: Any, held_env: Any) -> str | None:
    """Everything :mod:`held_out` asks of a training run (``cfg``, a TrainConfig) before a model loads: its held-out
    tasks (``held_env``) against its training tasks (``train_env``; both closed here), or a game's; where
    ``validate_every`` asks for one, a validation split to read that poses no training problem (a game's too:
    :func:`check_game_validation`); and the problems of its ``extra_evals``
    (:func:`turnrl.rl.run.extra_evals.check_extra_evals`). Returns :func:`check_held_out`'s warnings.

    Raises:
        HeldOutError: what :func:`check_held_out`, :func:`check_game_held_out` or the other checks raise.
        ValueError: ``validate_every`` on an environment (a game, an extra evaluation's) that declares no validation
            split; an extra evaluation's environment that does not make.
    """
    if cfg.multi_agent is not None:
        try:
            warning = check_game_held_out(cfg.env.id, cfg.env.kwargs, cfg.env.eval_kwargs, cfg.eval_tasks)
        except HeldOutError:
            raise
        except (ValueError, TypeError, ImportError):  # a game that does not make: its source says why, later
            return None
        if cfg.validate_every:  # (the game makes: a missing validation split is this run's error)
            check_game_validation(cfg.env.id, cfg.env.kwargs, cfg.env.eval_kwargs, cfg.validation_tasks)
        return warning
    try:
        if cfg.validate_every and getattr(train_env.unwrapped, "validation_split", None) is None:
            raise ValueError(
                f"validate_every={cfg.validate_every}, but {cfg.env.id} declares no validation split to "
                "read (validation_split); set validate_every=0, or give the environment one"
            )
        warning = check_held_out(cfg.env.id, train_env, held_env, cfg.eval_tasks)
        if cfg.validate_every:  # (the training tasks' forms, read once above, are kept on train_env)
            held_kwargs = run_eval_kwargs(train_env, cfg.env.kwargs, cfg.env.eval_kwargs)
            check_validation(
                cfg.env.id,
                train_env,
                {**held_kwargs, "split": train_env.unwrapped.validation_split},
                cfg.validation_tasks,
            )
        if cfg.extra_evals:  # the policy's evaluations on other environments: none on a training problem either
            extra = check_extra_evals(cfg, train_env)
            warning = "\n".join(w for w in (warning, extra) if w) or None
        return warning
    finally:
        train_env.close()
        held_env.close()


@dataclass(frozen=True)
class Planned:
    """One extra evaluation of a run (``extra_evals``, :mod:`turnrl.rl.run.extra_evals`), resolved: the kwargs of
    its held-out games or episodes and of its validation (None: the environment declares no validation split)."""

    name: str
    env: str
    several: bool  # an environment with several agents
    kwargs: dict[str, Any]
    validation: dict[str, Any] | None
    opponent: Opponent
    seat: str | None


def _make(env_id: str, kwargs: dict[str, Any], several: bool) -> Any:
    """An environment of one agent or several, by its id."""
    if several:
        from turnrl.envs.multiagent import make_multi_agent

        return make_multi_agent(env_id, **kwargs)
    from turnrl.envs.registry import make

    return make(env_id, **kwargs)


def plan_extra_evals(cfg: TrainConfig) -> list[Planned]:
    """``cfg.extra_evals`` resolved: each environment made once with its kwargs, and the split it is evaluated on
    (the kwargs' own, else its held-out split) and validated on (its validation split).

    Raises:
        ValueError: an environment that does not make with its kwargs (with its own reason).
    """
    out = []
    for name, spec in (cfg.extra_evals or {}).items():
        several = is_multi_agent(spec.env)
        try:
            probe = _make(spec.env, dict(spec.kwargs), several)
        except (ValueError, TypeError, ImportError, KeyError) as e:
            raise ValueError(f"extra_evals.{name}: {spec.env} does not make with {spec.kwargs}: {e}") from e
        try:
            base = getattr(probe, "unwrapped", probe)
            if several:
                held = dict(spec.kwargs)
                if "split" not in held and getattr(base, "held_out_split", None) is not None:
                    held["split"] = base.held_out_split
            else:
                held = held_out_kwargs(base, dict(spec.kwargs)) or dict(spec.kwargs)
            split = getattr(base, "validation_split", None)
        finally:
            probe.close()
        out.append(
            Planned(
                name,
                spec.env,
                several,
                held,
                None if split is None else {**held, "split": split},
                spec.opponent,
                spec.seat,
            )
        )
    return out


def check_extra_evals(cfg: TrainConfig, train_env: Any, planned: list[Planned] | None = None) -> str | None:
    """Refuse an extra evaluation that would read the run's training problems (by canonical form: its first
    ``eval_tasks`` problems where the environment calls them held out, and with ``validate_every`` its first
    ``validation_tasks`` validation problems), or that cannot validate where the run validates. Returns a warning
    where an environment evaluates problems it does not call held out and they are training problems.

    Raises:
        HeldOutError: held-out or validation problems the run trains on.
        ValueError: ``validate_every`` with an environment that declares no validation split; an environment that
            does not make.
    """
    from turnrl.envs.conformance.split_check import SHOWN, held_out_overlap

    warnings = []
    for p in plan_extra_evals(cfg) if planned is None else planned:
        what = f"extra_evals.{p.name} ({p.env})"
        held = _make(p.env, p.kwargs, p.several)
        try:
            if (warning := check_held_out(what, train_env, held, cfg.eval_tasks)) is not None:
                warnings.append(warning)
        finally:
            held.close()
        if not cfg.validate_every:
            continue
        if p.validation is None:
            raise ValueError(
                f"{what}: validate_every validates it too, but {p.env} declares no validation split "
                "(validation_split); drop it from extra_evals or set validate_every=0"
            )
        val = _make(p.env, p.validation, p.several)
        try:
            shared = held_out_overlap(train_env, val, cfg.validation_tasks) or []
        finally:
            val.close()
        if shared:
            raise HeldOutError(
                f"{what}: its validation split {p.validation['split']!r} would pose {len(shared)} "
                f"problem(s) this run trains on, e.g. {', '.join(repr(k) for k in shared[:SHOWN])}"
            )
    return "\n".join(warnings) or None


def check_dataset_extra_evals(cfg: TrainConfig, episodes: list[Trajectory]) -> None:
    """:func:`check_dataset` for the run's ``extra_evals``: refuse stored episodes (an offline run's dataset, by the
    canonical form ``turnrl rollout`` records in ``metadata["item"]``) that pose the problems an extra evaluation
    scores — its first ``eval_tasks`` where its environment calls that split held out, and with ``validate_every``
    its first ``validation_tasks`` validation problems (a dataset sampled from ``turnrl/Arithmetic-v0``'s test split
    poses the test problems of ``turnrl/SolverCritic-v0``'s review, whatever the run's own evaluation reads).

    Raises:
        HeldOutError: episodes pose an extra evaluation's problems.
        ValueError: an extra evaluation's environment that does not make.
    """
    from turnrl.envs.conformance.split_check import SHOWN, task_keys

    guarded: dict[str, str] = {}
    for p in plan_extra_evals(cfg):
        n_val = cfg.validation_tasks if cfg.validate_every else 0
        for role, kwargs, n in (("held-out", p.kwargs, cfg.eval_tasks), ("validation", p.validation, n_val)):
            if kwargs is None or n <= 0:
                continue
            env = _make(p.env, kwargs, p.several)
            try:
                base = getattr(env, "unwrapped", env)
                split = getattr(base, "split", None)
                if split is not None and split in (
                    getattr(base, "held_out_split", None),
                    getattr(base, "validation_split", None),
                ):
                    guarded.update(dict.fromkeys(task_keys(env, n) or [], f"extra_evals.{p.name}'s {role}"))
            finally:
                env.close()
    items = [t.metadata.get("item") for t in episodes]
    shared = sorted({i for i in items if i is not None and i in guarded})
    if shared:
        where = ", ".join(sorted({guarded[i] for i in shared}))
        raise HeldOutError(
            f"the data holds {len(shared)} of the problems of {where} evaluation "
            f"({sum(i in guarded for i in items)} episodes), e.g. "
            f"{', '.join(repr(k) for k in shared[:SHOWN])}: it would train on what it evaluates on. "
            "Sample the data from the training split (turnrl rollout --kw split=train)"
        )
