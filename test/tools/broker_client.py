#!/usr/bin/env python3
"""Independent clients for the amqp, nats and sqs destination tests: pika (RabbitMQ), nats-py
(NATS JetStream) and boto3 (SQS), none of which is the library the relay uses. Sets up exchanges, queues and
streams, and drains what arrived into a JSON-lines file (appended, so a test can read
everything it received so far). Run with the test venv's python (test/install_deps).

  broker_client.py amqp-setup   --port P --exchange E [--type topic] --queue Q --bind KEY...
  broker_client.py amqp-drain   --port P --queue Q --out FILE [--idle 0.5]
  broker_client.py amqp-count   --port P --queue Q
  broker_client.py nats-stream  --port P --stream S --subject SUBJ... [--duplicate-window 120]
  broker_client.py nats-delete  --port P --stream S
  broker_client.py nats-drain   --port P --stream S --out FILE [--idle 0.5]
  broker_client.py nats-count   --port P --stream S
  broker_client.py nats-publish --port P --subject SUBJ --count N --out FILE   (direct, PubAck)
  broker_client.py sqs-create   --port P --queue Q [--max-size BYTES]   (Q ending in .fifo: FIFO)
  broker_client.py sqs-delete   --port P --queue Q
  broker_client.py sqs-drain    --port P --queue Q --out FILE [--idle 0.5] [--threads 4]
  broker_client.py sqs-count    --port P --queue Q
  broker_client.py sqs-send     --port P --queue Q --count N   (direct SendMessageBatch of 10)
  broker_client.py sqs-principal --port P --queue Q... --name N [--role]
                                 an IAM user N (or, with --role, a role N assumed through STS)
                                 allowed to send to and read the queues; prints its credentials
                                 as JSON {access_key_id, secret_access_key[, session_token]}
  broker_client.py moto-auth    --port P --after N   (moto: requests are authenticated after N
                                 more; 0: from now on, inf: never)
  Every sqs-* command signs with --region (default elasticmq), --access-key, --secret-key
  (default "verify") and --session-token (default none).

Each drained message is one line: {"routing_key"/"subject", "headers", "properties" (amqp),
"body_b64", "body" (text or null), "seq" (nats stream sequence), "redelivered"}.
"""
import argparse
import asyncio
import base64
import json
import sys
import time


def _record(out, **fields):
    body = fields.pop("body_bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    fields["body_b64"] = base64.b64encode(body).decode("ascii")
    fields["body"] = text
    out.write(json.dumps(fields, sort_keys=True) + "\n")


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


# ---------------------------------------------------------------------------------------------
# RabbitMQ (pika)
# ---------------------------------------------------------------------------------------------
def _amqp_channel(port):
    import pika

    params = pika.ConnectionParameters(host="127.0.0.1", port=port, heartbeat=30,
                                       blocked_connection_timeout=30,
                                       connection_attempts=30, retry_delay=0.5)
    conn = pika.BlockingConnection(params)
    return conn, conn.channel()


def amqp_setup(a):
    conn, ch = _amqp_channel(a.port)
    if a.exchange:
        ch.exchange_declare(a.exchange, exchange_type=a.type, durable=True)
    if a.queue:
        args = {}
        if a.max_length is not None:
            args = {"x-max-length": a.max_length, "x-overflow": "reject-publish"}
        ch.queue_declare(a.queue, durable=True, arguments=args or None)
        for key in a.bind or []:
            ch.queue_bind(a.queue, a.exchange, routing_key=key)
    conn.close()


def amqp_drain(a):
    conn, ch = _amqp_channel(a.port)
    ch.basic_qos(prefetch_count=1000)
    n = 0
    last_tag = None
    with open(a.out, "a") as out:
        for method, props, body in ch.consume(a.queue, auto_ack=False,
                                              inactivity_timeout=a.idle):
            if method is None:
                break
            headers = {k: _text(v) for k, v in (props.headers or {}).items()}
            properties = {
                "content_type": props.content_type,
                "delivery_mode": props.delivery_mode,
                "message_id": props.message_id,
                "timestamp": props.timestamp,
                "type": props.type,
                "app_id": props.app_id,
            }
            _record(out, routing_key=method.routing_key, exchange=method.exchange,
                    redelivered=bool(method.redelivered), headers=headers,
                    properties=properties, body_bytes=body)
            n += 1
            last_tag = method.delivery_tag
            if n % 500 == 0:
                out.flush()  # written before acknowledged: nothing acked is lost to the file
                ch.basic_ack(last_tag, multiple=True)
                last_tag = None
        out.flush()
        if last_tag is not None:
            ch.basic_ack(last_tag, multiple=True)
    ch.cancel()
    conn.close()
    print(n)


def amqp_count(a):
    conn, ch = _amqp_channel(a.port)
    q = ch.queue_declare(a.queue, passive=True)
    print(q.method.message_count)
    conn.close()


# ---------------------------------------------------------------------------------------------
# NATS JetStream (nats-py)
# ---------------------------------------------------------------------------------------------
async def _nats(port):
    import nats

    return await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=5,
                              max_reconnect_attempts=20, reconnect_time_wait=0.5)


async def nats_stream(a):
    from nats.js.api import StreamConfig

    nc = await _nats(a.port)
    js = nc.jetstream()
    from nats.js.api import DiscardPolicy

    extra = {}
    if a.max_msgs is not None:
        extra.update(max_msgs=a.max_msgs, discard=DiscardPolicy.NEW)
    if a.max_msg_size is not None:
        extra.update(max_msg_size=a.max_msg_size)
    await js.add_stream(StreamConfig(name=a.stream, subjects=a.subject,
                                     duplicate_window=float(a.duplicate_window), **extra))
    await nc.close()


async def nats_delete(a):
    nc = await _nats(a.port)
    js = nc.jetstream()
    await js.delete_stream(a.stream)
    await nc.close()


async def nats_drain(a):
    from nats.errors import TimeoutError as NatsTimeout
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc = await _nats(a.port)
    js = nc.jetstream()
    # A durable pull consumer: each drain goes on where the last one stopped.
    sub = await js.pull_subscribe("", durable="verify", stream=a.stream,
                                  config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT,
                                                        deliver_policy=DeliverPolicy.ALL,
                                                        max_ack_pending=-1))
    n = 0
    with open(a.out, "a") as out:
        while True:
            try:
                msgs = await sub.fetch(1000, timeout=a.idle)
            except (NatsTimeout, asyncio.TimeoutError):
                break
            for m in msgs:
                meta = m.metadata
                _record(out, subject=m.subject, headers=dict(m.headers or {}),
                        seq=meta.sequence.stream, redelivered=meta.num_delivered > 1,
                        body_bytes=m.data)
                n += 1
            # Acknowledged in one round trip per batch: the stream keeps every message anyway.
            await asyncio.gather(*(m.ack() for m in msgs))
    await nc.close()
    print(n)


async def nats_count(a):
    nc = await _nats(a.port)
    js = nc.jetstream()
    info = await js.stream_info(a.stream)
    print(info.state.messages)
    await nc.close()


async def nats_publish(a):
    """Direct JetStream publishes awaiting each PubAck (a sanity tool for the tests)."""
    nc = await _nats(a.port)
    js = nc.jetstream()
    for i in range(a.count):
        await js.publish(a.subject, json.dumps({"n": i}).encode())
    await nc.close()


# ---------------------------------------------------------------------------------------------
# SQS (boto3) -- sqs kind (issue 42)
# ---------------------------------------------------------------------------------------------
def _sqs(port, a=None, service="sqs"):
    """A boto3 client of `service` on 127.0.0.1:port, signing with the credentials and region
    of the command line (ElasticMQ takes any; moto with its authentication on checks them)."""
    import boto3
    from botocore.config import Config

    return boto3.client(service, endpoint_url=f"http://127.0.0.1:{port}",
                        region_name=getattr(a, "region", None) or "elasticmq",
                        aws_access_key_id=getattr(a, "access_key", None) or "verify",
                        aws_secret_access_key=getattr(a, "secret_key", None) or "verify",
                        aws_session_token=getattr(a, "session_token", None),
                        config=Config(retries={"max_attempts": 10, "mode": "standard"},
                                      max_pool_connections=16))


def sqs_create(a):
    c = _sqs(a.port, a)
    attrs = {}
    if a.queue.endswith(".fifo"):
        attrs["FifoQueue"] = "true"
    if a.max_size is not None:
        attrs["MaximumMessageSize"] = str(a.max_size)
    print(c.create_queue(QueueName=a.queue, Attributes=attrs)["QueueUrl"])


def sqs_delete(a):
    c = _sqs(a.port, a)
    c.delete_queue(QueueUrl=c.get_queue_url(QueueName=a.queue)["QueueUrl"])


def sqs_drain(a):
    """Receives until the queue stays empty for --idle seconds, in 4 threads; each message is
    written to the file before it is deleted from the queue."""
    import threading

    c = _sqs(a.port, a)
    url = c.get_queue_url(QueueName=a.queue)["QueueUrl"]
    lock = threading.Lock()
    count = [0]
    out = open(a.out, "a")

    def worker():
        idle_since = time.time()
        while time.time() - idle_since < a.idle:
            got = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                    VisibilityTimeout=120, MessageAttributeNames=["All"],
                                    AttributeNames=["All"]).get("Messages", [])
            if not got:
                time.sleep(0.05)
                continue
            idle_since = time.time()
            with lock:
                for m in got:
                    attrs = m.get("Attributes", {})
                    headers = {k: v.get("StringValue") for k, v in
                               m.get("MessageAttributes", {}).items()}
                    seq = attrs.get("SequenceNumber")
                    _record(out, queue=a.queue, headers=headers,
                            seq=int(seq) if seq else None, group=attrs.get("MessageGroupId"),
                            dedup=attrs.get("MessageDeduplicationId"),
                            redelivered=int(attrs.get("ApproximateReceiveCount", "1")) > 1,
                            body_bytes=m["Body"].encode("utf-8"))
                count[0] += len(got)
                out.flush()
            c.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])

    threads = [threading.Thread(target=worker) for _ in range(a.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.close()
    print(count[0])


def sqs_count(a):
    c = _sqs(a.port, a)
    url = c.get_queue_url(QueueName=a.queue)["QueueUrl"]
    attrs = c.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    print(int(attrs["ApproximateNumberOfMessages"]) +
          int(attrs["ApproximateNumberOfMessagesNotVisible"]))


def sqs_send(a):
    """Direct SendMessageBatch calls of 10 (the bench's and the tests' reference client)."""
    c = _sqs(a.port, a)
    url = c.get_queue_url(QueueName=a.queue)["QueueUrl"]
    start = time.time()
    for i in range(0, a.count, 10):
        c.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(j), "MessageBody": json.dumps({"n": i + j})}
            for j in range(min(10, a.count - i))])
    print("%.3f" % (time.time() - start))


def sqs_principal(a):
    """An IAM user (or a role assumed through STS, --role) allowed to send to the queues --queue
    names and to read them back, and its credentials. Run while moto's authentication is off
    (moto-auth): moto then takes any signature for the IAM and STS calls."""
    sqs = _sqs(a.port, a)
    iam = _sqs(a.port, a, "iam")
    arns = [sqs.get_queue_attributes(QueueUrl=sqs.get_queue_url(QueueName=q)["QueueUrl"],
                                      AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            for q in a.queue]
    policy = json.dumps({"Version": "2012-10-17", "Statement": [
        # AWS authorizes SendMessageBatch as sqs:SendMessage; moto checks the operation's own
        # name (sqs:SendMessageBatch): both are allowed, on these queues only.
        {"Effect": "Allow", "Resource": arns, "Action": [
            "sqs:SendMessage", "sqs:SendMessageBatch", "sqs:ReceiveMessage",
            "sqs:DeleteMessage", "sqs:DeleteMessageBatch", "sqs:GetQueueAttributes"]},
        # moto checks GetQueueUrl (it names the queue, not its URL) against resource "*".
        {"Effect": "Allow", "Resource": "*", "Action": "sqs:GetQueueUrl"}]})
    if not a.role:
        iam.create_user(UserName=a.name)
        iam.put_user_policy(UserName=a.name, PolicyName="outbox-sqs", PolicyDocument=policy)
        key = iam.create_access_key(UserName=a.name)["AccessKey"]
        print(json.dumps({"access_key_id": key["AccessKeyId"],
                          "secret_access_key": key["SecretAccessKey"]}))
        return
    trust = json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]})
    role = iam.create_role(RoleName=a.name, AssumeRolePolicyDocument=trust)["Role"]
    iam.put_role_policy(RoleName=a.name, PolicyName="outbox-sqs", PolicyDocument=policy)
    creds = _sqs(a.port, a, "sts").assume_role(RoleArn=role["Arn"],
                                               RoleSessionName="outbox")["Credentials"]
    print(json.dumps({"access_key_id": creds["AccessKeyId"],
                      "secret_access_key": creds["SecretAccessKey"],
                      "session_token": creds["SessionToken"]}))


def moto_auth(a):
    """moto's INITIAL_NO_AUTH_ACTION_COUNT, set on the running server (/moto-api/reset-auth)."""
    import urllib.request

    # Not a form (urllib's default type): moto reads the number from the raw body.
    with urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{a.port}/moto-api/reset-auth", data=a.after.encode(),
            headers={"Content-Type": "text/plain"}, method="POST"), timeout=30) as r:
        print(r.read().decode())
# --- end of the sqs kind's block


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("amqp-setup")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--exchange", default="")
    s.add_argument("--type", default="topic")
    s.add_argument("--queue", default="")
    s.add_argument("--bind", nargs="*")
    s.add_argument("--max-length", type=int)
    for name in ("amqp-drain", "amqp-count"):
        s = sub.add_parser(name)
        s.add_argument("--port", type=int, required=True)
        s.add_argument("--queue", required=True)
        s.add_argument("--out")
        s.add_argument("--idle", type=float, default=0.5)
    s = sub.add_parser("nats-stream")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--stream", required=True)
    s.add_argument("--subject", nargs="+", required=True)
    s.add_argument("--duplicate-window", type=float, default=120)
    s.add_argument("--max-msgs", type=int)
    s.add_argument("--max-msg-size", type=int)
    for name in ("nats-delete", "nats-drain", "nats-count"):
        s = sub.add_parser(name)
        s.add_argument("--port", type=int, required=True)
        s.add_argument("--stream", required=True)
        s.add_argument("--out")
        s.add_argument("--idle", type=float, default=0.5)
    s = sub.add_parser("nats-publish")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--subject", required=True)
    s.add_argument("--count", type=int, default=1)

    # sqs kind (issue 42)
    for name in ("sqs-create", "sqs-delete", "sqs-drain", "sqs-count", "sqs-send"):
        s = sub.add_parser(name)
        s.add_argument("--port", type=int, required=True)
        s.add_argument("--queue", required=True)
        s.add_argument("--out")
        s.add_argument("--idle", type=float, default=0.5)
        s.add_argument("--threads", type=int, default=4)
        s.add_argument("--max-size", type=int)
        s.add_argument("--count", type=int, default=1)
    s = sub.add_parser("sqs-principal")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--queue", nargs="+", required=True)
    s.add_argument("--name", required=True)
    s.add_argument("--role", action="store_true")
    for s in (sub.choices[name] for name in ("sqs-create", "sqs-delete", "sqs-drain", "sqs-count",
                                             "sqs-send", "sqs-principal")):
        s.add_argument("--region")
        s.add_argument("--access-key")
        s.add_argument("--secret-key")
        s.add_argument("--session-token")
    s = sub.add_parser("moto-auth")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--after", required=True)
    # --- end of the sqs kind's block

    a = p.parse_args()
    table = {
        "amqp-setup": amqp_setup, "amqp-drain": amqp_drain, "amqp-count": amqp_count,
        "nats-stream": nats_stream, "nats-delete": nats_delete, "nats-drain": nats_drain,
        "nats-count": nats_count, "nats-publish": nats_publish,
        # sqs kind (issue 42)
        "sqs-create": sqs_create, "sqs-delete": sqs_delete, "sqs-drain": sqs_drain,
        "sqs-count": sqs_count, "sqs-send": sqs_send, "sqs-principal": sqs_principal,
        "moto-auth": moto_auth,
    }
    f = table[a.cmd]
    if asyncio.iscoroutinefunction(f):
        asyncio.run(f(a))
    else:
        f(a)


if __name__ == "__main__":
    sys.exit(main())
