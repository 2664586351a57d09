"""Config sections declared by actor modules (none yet beyond [scheduler])."""
import actors.listener_settings  # noqa: E402,F401  ([listener])
