"""The Flower runtime: thinwire's star as a Flower ServerApp and ClientApp.

The server side (`server_app`, `strategy`, `rounds`, `exchange`, `roster`, `run_config`,
`superlink`, `deploy`) drives `thinwire.server.Aggregator`; the client side (`client_app`,
`partition`, `state`, `supernode`, `node_files`) drives `thinwire.clients.Client`. The
message schema both apps speak (`messages`) lives here, beside both, so neither role
imports the other.
"""

__all__: list[str] = []
