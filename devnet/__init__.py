"""The embedded devnet: the billing chain model behind a node's gRPC and websocket, on loopback.

``devnet.embedded.start_devnet`` starts it in-process; the sidecar then
talks to it through the same cosmpy client and websocket listener it uses
against a real node.
"""
