"""PAG: the policy as its own generative verifier (docs/algorithms.md §7; Jiang et al., 2025, arXiv 2506.10406).

* :mod:`.algorithm` — ``pag`` (PPO with turn-independent GAE and RoleAdvNorm) and ``pag-grpo``;
* :mod:`.explore` — verdict exploration, a rollout hook (``algorithm.verdict_explore``);
* :mod:`.metrics` — Acc@turn1/Acc@final, verifier accuracy (the self-verification env reports them);
* :mod:`.rows` — warm-up rows for the verifier (``turnrl pag rows``, :mod:`.cli`).

The episodes come from the self-verification environments (:mod:`turnrl.envs.formats.self_verify`, ``turnrl/*-PAG-v0``)
and their verdict parser (:mod:`turnrl.verifiers.pag`): they are environments and verifiers any method can use.
"""
