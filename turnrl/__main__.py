"""``python -m turnrl`` runs the CLI."""

from turnrl.cli import main

main()
