"""Replay: captured inputs through today's decision code, offline, compared with what was decided.

- ``replay.engine.Replayer``: feeds the inputs of a capture to the cores and
  yields the timeline, the divergences and per-run totals;
- ``replay.cli``: ``run.py replay LOG... [--until TIME] [--tenant ADDR] [--step] [--json] [--skip-bad]``.
"""
