"""RocketMQ 5's gRPC protocol (apache.rocketmq.v2.MessagingService) on the front's second port."""
