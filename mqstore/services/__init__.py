"""The store served over gRPC (contracts in proto/mqstore/v1, stubs in mqstore.rpc.v1).

One module per component (``commitlog``, ``consume_queue``, ``index``,
``dispatcher``, ``front``) holds its servicer; ``errors`` is the one place errors
become status codes; ``hosts`` runs servicers in a gRPC server on its own event-loop
thread (usable without Ray: tests, embedding); ``actors`` is the only module that
imports Ray; ``serve`` starts a whole deployment. See README.md here for what is
split into separate processes and what is not yet.
"""
