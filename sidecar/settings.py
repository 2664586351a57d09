"""Every module that declares a ``config.toml`` section, in one list.

Each section is declared beside the part it configures, in that part's own
layer, with ``runtime.config.section``; the loader at the bottom knows only
what has registered and never imports upward to find more. The wiring is the
one layer that knows every part, so the list is here: a program imports this
module before it loads its configuration (``run.py``, the tests' conftest,
the benches), and ``load_config`` then sees every section.

A section left out of this list would be an "unknown section" in a
``config.toml`` that sets it; ``tests/test_layers.py`` checks that every
``@section`` in the project is imported from here.
"""

from __future__ import annotations

import actors.health_settings  # noqa: F401  [health]
import actors.listener_settings  # noqa: F401  [listener]
import actors.scheduler_settings  # noqa: F401  [scheduler]
import capture.settings  # noqa: F401  [capture]
import chain.node_settings  # noqa: F401  [node]
import chain.settings  # noqa: F401  [provider] [chain]
import devnet.demo_settings  # noqa: F401  [demo]
import devnet.settings  # noqa: F401  [devnet]
import ledger.settings  # noqa: F401  [ledger]
import logs.settings  # noqa: F401  [log]
import monitoring.settings  # noqa: F401  [metrics]
