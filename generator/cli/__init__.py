"""CLI layer: the mi-certify command (renders results; exit codes). ``python -m mi_certify.generator.cli`` runs it."""
