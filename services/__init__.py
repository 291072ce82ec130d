"""The store served over gRPC (contracts in proto/mqstore/v1, stubs in mqstore.rpc.v1),
installed as ``mqstore.services``. One folder per component: ``commitlog`` (the
writer), ``dispatcher`` (the reput loop across processes), ``index`` (the
consume-queue and index builders), ``query`` (the front: the public API), each with
its servicer, its state, its host (its gRPC server on an event-loop thread, usable
without Ray) and its Ray actor; ``common`` holds what they share and ``startup``
starts a deployment (on Ray, or in one process). README.md here is the one page on
what runs where and how the parts call each other.
"""
