"""The sidecar's log: ``[log]`` settings, text or JSON lines, and repeats folded."""
