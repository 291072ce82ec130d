"""What the services share: gRPC servers and channels, the errors table, request checks, conversions, metrics, deadlines, the deployment's secret, peers and actors."""
