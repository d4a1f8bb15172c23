#!/usr/bin/env python3
"""The independent MQTT client of the mqtt destination tests: paho-mqtt (Debian's
python3-paho-mqtt), not the library the relay uses (libmosquitto).

  mqtt_client.py subscribe --port P --topic FILTER --id CLIENT_ID --out FILE [--user U --password W]
      A persistent-session subscriber (MQTT 5, clean start off, session expiry 1 day, QoS 1):
      runs until killed, reconnecting through broker restarts (the broker keeps what arrives for
      it meanwhile), and appends one JSON line per message received to FILE:
      {"topic", "headers" (user properties; the last of a name), "user_properties" (all, in
      order), "content_type", "correlation" (text), "payload_format", "expiry", "qos", "dup",
      "retain", "body_b64", "body" (text or null)}. It writes "FILE.ready" once subscribed.
  mqtt_client.py publish --port P --topic T --count N --size B [--qos 1] [--out FILE]
      A direct publisher (for comparisons): N messages, waits for every PUBACK, prints the
      elapsed seconds.
"""
import argparse
import base64
import json
import os
import sys
import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


def subscribe(a):
    out = open(a.out, "a", buffering=1)
    lock = threading.Lock()

    def on_connect(client, userdata, flags, rc, properties=None):
        if rc == 0:
            client.subscribe(a.topic, qos=1)

    def on_subscribe(client, userdata, mid, granted, properties=None):
        open(a.out + ".ready", "w").close()

    def on_message(client, userdata, msg):
        p = msg.properties
        props = list(getattr(p, "UserProperty", []) or [])
        body = msg.payload
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        corr = getattr(p, "CorrelationData", None)
        rec = {
            "topic": msg.topic,
            "headers": {k: v for k, v in props},
            "user_properties": props,
            "content_type": getattr(p, "ContentType", None),
            "correlation": corr.decode("utf-8", "replace") if corr is not None else None,
            "payload_format": getattr(p, "PayloadFormatIndicator", None),
            "expiry": getattr(p, "MessageExpiryInterval", None),
            "qos": msg.qos,
            "dup": bool(msg.dup),
            "retain": bool(msg.retain),
            "body_b64": base64.b64encode(body).decode("ascii"),
            "body": text,
        }
        with lock:
            out.write(json.dumps(rec) + "\n")

    client = mqtt.Client(client_id=a.id, protocol=mqtt.MQTTv5)
    if a.user:
        client.username_pw_set(a.user, a.password)
    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    client.max_inflight_messages_set(1000)
    client.reconnect_delay_set(min_delay=0.1, max_delay=0.5)
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 86400
    while True:
        try:
            # A long keep alive: a busy verifier (a backlog of 100,000) must not miss its own
            # PINGREQ and reconnect, which would have the broker send again what it had not
            # acknowledged yet (copies with DUP set that the relay never sent twice).
            client.connect("127.0.0.1", a.port, keepalive=300, clean_start=False, properties=props)
            break
        except OSError:
            time.sleep(0.2)
    client.loop_forever(retry_first_connection=True)


def publish(a):
    client = mqtt.Client(client_id="direct-%d" % os.getpid(), protocol=mqtt.MQTTv5)
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    done = threading.Event()
    acked = [0]

    def on_publish(client, userdata, mid):
        acked[0] += 1
        if acked[0] == a.count:
            done.set()

    client.on_publish = on_publish
    client.connect("127.0.0.1", a.port)
    client.loop_start()
    payload = b"x" * a.size
    start = time.time()
    for _ in range(a.count):
        client.publish(a.topic, payload, qos=a.qos)
    done.wait(600)
    print("%.3f" % (time.time() - start))
    client.loop_stop()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("subscribe")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--topic", required=True)
    s.add_argument("--id", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--user")
    s.add_argument("--password")
    s = sub.add_parser("publish")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--topic", required=True)
    s.add_argument("--count", type=int, default=1000)
    s.add_argument("--size", type=int, default=100)
    s.add_argument("--qos", type=int, default=1)
    a = ap.parse_args()
    {"subscribe": subscribe, "publish": publish}[a.cmd](a)


if __name__ == "__main__":
    main()
