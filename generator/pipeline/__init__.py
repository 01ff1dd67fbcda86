"""Pipeline layer: the build stages and the build that runs them in order."""
