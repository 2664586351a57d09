"""Talking to the chain: the ``ChainClient`` interface, its implementations, errors, events."""
