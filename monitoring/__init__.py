"""What an operator's monitoring reads: Prometheus metrics, and the HTTP server for them and for health."""
