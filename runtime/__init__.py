"""The bottom layer: the injected clock, pooled pykka actors, addresses, and the config loader."""
