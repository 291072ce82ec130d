"""The front: the public API (FrontService, an adapter over services/common/shard_set.py), the pinned layout, the reads' gRPC ports, users and permissions, the client."""
