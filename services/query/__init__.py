"""The front: the public API (FrontService), routing, fan-out over shards, the reads' gRPC ports, users and permissions, the client."""
