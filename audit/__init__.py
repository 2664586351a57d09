"""The system audit: the whole sidecar, as ``run.py`` builds it in model mode, checked against the chain.

``audit.world`` builds and runs the world (a chain model of either version
with tenants of every kind, the sidecar and its ledger on a manual clock)
and watches the chain's own view while it runs; ``audit.report`` compares
the books with the chain and renders what it found as a table.

It sits on top of the wiring, beside ``run.py``, ``tests/`` and ``bench/``,
which are the only ones to use it: ``tests/test_system_audit.py`` runs it
at 250 leases, ``bench/audit_run.py`` at 10,000. Nothing the sidecar runs
imports it (``tests/test_layers.py``).
"""
