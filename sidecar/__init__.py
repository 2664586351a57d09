"""Wiring: configuration, building the actor system, the demo world, the CLI's pieces."""
