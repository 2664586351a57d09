"""Config sections declared by actor modules (none yet beyond [scheduler])."""
