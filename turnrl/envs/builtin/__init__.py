"""turnrl's own environments, each behind a ``turnrl/<Name>-v0`` id (:data:`turnrl.envs.registry.BUILTIN_ENVS`).

Arithmetic, GSM8K and MATH-500, code and functions in a sandbox, question answering with search tools (HotPotQA,
the generated MultiHop worlds), and mixtures of them. Nothing here is imported until an environment is made: the
registry names each one as ``"module:attr"``.
"""
