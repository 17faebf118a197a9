"""``turnrl view PATH``: a local web page to see what the model saw, produced and was trained on.

:class:`EpisodeIndex` finds and summarizes the episodes of a run folder, eval folder or trajectories file;
:class:`ViewApp` serves them (Werkzeug) to the page in ``static/``; ``turnrl.cli.view`` is the CLI command.
"""

from turnrl.view.app import ViewApp, ViewServer
from turnrl.view.index import EpisodeIndex, discover

__all__ = ["EpisodeIndex", "ViewApp", "ViewServer", "discover"]
