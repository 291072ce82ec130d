"""Generated gRPC stubs of mqstore's own contracts (``proto/mqstore/v1``).

Protobuf package ``mqstore.v1``, Python package ``mqstore.rpc.v1``: distinct from
``apache.rocketmq.v2`` (the RocketMQ client's stubs), so both load in one process.
Regenerate with ``bash scripts/gen_proto.sh``; never edit the modules by hand.
"""
