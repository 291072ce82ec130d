"""Run by test_tls_port.py in a process of its own (gRPC reads its default roots,
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, once per process): the official client with TLS
on sends one message and receives it. Prints one JSON line."""

from __future__ import annotations

import json
import sys
import time

from tests import rocketmq_client


def main(endpoint: str, topic: str) -> None:
    rmq = rocketmq_client.load()
    config = rmq.ClientConfiguration(endpoint, rmq.Credentials(), request_timeout=5)
    producer = rmq.Producer(config, (topic,), None, True)
    producer.startup()
    m = rmq.Message()
    m.topic, m.body = topic, b"over tls"
    receipt = producer.send(m)
    consumer = rmq.SimpleConsumer(config, "g-tls", {topic: rmq.FilterExpression()}, 2, tls_enable=True)
    consumer.startup()
    got, end = [], time.monotonic() + 30
    while not got and time.monotonic() < end:
        got = consumer.receive(1, 30)
    for x in got:
        consumer.ack(x)
    print(json.dumps({"sent": receipt.message_id, "received": [x.message_id for x in got]}), flush=True)
    consumer.shutdown()
    producer.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
