"""Environment adapters: an id prefix (``PREFIX:REST``) that names an environment written elsewhere — a server, a
class written for another library — and the adapter that checks such an id and makes the environment.

An adapter is a :class:`turnrl.envs.registry.EnvAdapter`, registered in :data:`turnrl.envs.registry.ENV_ADAPTERS`
(a :class:`turnrl.plugins.Registry`, which refuses anything else): turnrl's
own (``remote:``, ``trl:``, ``verifiers:``, and for games with several agents ``textarena:`` and ``pettingzoo:``) by
name, a package's under the ``turnrl.env_adapters`` entry-point group
(``myprefix = "my_pkg.adapter:ADAPTER"``), a module's with ``ENV_ADAPTERS.register("myprefix", EnvAdapter(...))``.
``turnrl.make("myprefix:REST", **kwargs)`` then checks the id (before anything loads: a config is refused at once)
and makes the environment; an adapter of multi-agent environments (``multi_agent=True``) is made by
:func:`turnrl.envs.multiagent.make_multi_agent` instead, and every command and config takes its ids the same way.
"""
