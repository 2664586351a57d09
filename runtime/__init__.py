"""The actor runtime: the injected clock, pooled pykka actors, addresses."""
