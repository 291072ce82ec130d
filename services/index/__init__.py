"""The builders: consume queues (ConsumeQueueService) and index (IndexService), their state, the commitlog as they see it, hosts and actors."""
