-- Destination kinds amqp (RabbitMQ) and nats (NATS JetStream): configs checked at definition
-- time (every problem in one error, credentials never echoed), privileges for the files they
-- read, the producer's topic rules (routing keys, subjects), stats().
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

SELECT outbox.create_destination('rmq', 'amqp',
    '{"url": "amqp://outbox:s3cret@127.0.0.1:5672/prod", "exchange": "shop",
      "routing_key": "orders.created", "heartbeat": "10s", "max_attempts": 5}');
SELECT outbox.create_destination('rmq_default', 'amqp', '{"url": "amqps://127.0.0.1", "tls_verify": false}');
SELECT outbox.create_destination('js', 'nats',
    '{"servers": "nats://127.0.0.1:4222,nats://127.0.0.1:4223", "subject": "orders.created",
      "user": "outbox", "password": "s3cret", "ack_timeout": "2s", "ordering": "key"}');
SELECT outbox.create_destination('js_nosubject', 'nats', '{"servers": ["tls://127.0.0.1:4222"], "tls_verify": false}');
SELECT name, kind, paused FROM outbox.destinations ORDER BY name;
SELECT destination, kind, tls_verify FROM outbox.stats() ORDER BY destination;

\echo :SQLSTATE
-- amqp: every problem at once; the URL (with its credentials) is never quoted.
SELECT outbox.create_destination('bad_amqp', 'amqp',
    '{"url": "http://outbox:hunter2@rabbit/", "exchange": 5, "routing_key": "", "topic": "x",
      "heartbeat": "1h", "connect_timeout": 1, "max_in_flight": 0, "tls_verify": "no",
      "cert_file": "/etc/hostname", "no_such_key": 1}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_amqp', 'amqp', '{}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_amqp', 'amqp', '{"url": "amqp://u:hunter2@h/?heartbeat=5"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_amqp', 'amqp', '{"url": "amqps://h", "ca_file": "/nonexistent/ca.pem"}');

\echo :SQLSTATE
-- nats: every problem at once; server URLs and secrets are never quoted.
SELECT outbox.create_destination('bad_nats', 'nats',
    '{"servers": "http://u:hunter2@h:4222", "subject": "orders.>", "token": "tok3n",
      "user": "u", "password": 7, "nkey": "nope", "ack_timeout": "1ms", "tls": 1,
      "topic": "orders", "creds_file": "/nonexistent/u.creds", "whatever": null}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_nats', 'nats', '{"subject": "$JS.API.STREAM.DELETE.ORDERS"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_nats', 'nats', '{"servers": [], "subject": "_INBOX.x"}');

\echo :SQLSTATE
-- Files the server would read need a superuser or pg_read_server_files.
CREATE ROLE outbox_regress_broker_manager;
GRANT USAGE ON SCHEMA outbox TO outbox_regress_broker_manager;
GRANT EXECUTE ON FUNCTION outbox.create_destination(text, text, jsonb),
    outbox.alter_destination(text, jsonb), outbox.drop_destination(text, boolean)
    TO outbox_regress_broker_manager;
SET ROLE outbox_regress_broker_manager;
SELECT outbox.create_destination('files', 'nats',
    '{"servers": "tls://127.0.0.1:4222", "creds_file": "/etc/passwd", "ca_file": "/etc/hostname"}');
\echo :SQLSTATE
SELECT outbox.create_destination('files', 'amqp', '{"url": "amqps://h", "ca_file": "/etc/hostname"}');
\echo :SQLSTATE
-- Settings without files are the manager's to choose.
SELECT outbox.create_destination('mine', 'nats', '{"servers": "nats://nats.example.com:4222", "subject": "mine"}');
SELECT outbox.alter_destination('mine', '{"subject": "mine.v2"}');
RESET ROLE;
GRANT pg_read_server_files TO outbox_regress_broker_manager;
SET ROLE outbox_regress_broker_manager;
SELECT outbox.create_destination('files', 'amqp', '{"url": "amqps://h", "ca_file": "/nonexistent/ca.pem"}');
\echo :SQLSTATE
RESET ROLE;
SELECT outbox.drop_destination('mine');
REVOKE pg_read_server_files FROM outbox_regress_broker_manager;
REVOKE ALL ON SCHEMA outbox FROM outbox_regress_broker_manager;
REVOKE ALL ON FUNCTION outbox.create_destination(text, text, jsonb),
    outbox.alter_destination(text, jsonb), outbox.drop_destination(text, boolean)
    FROM outbox_regress_broker_manager;
DROP ROLE outbox_regress_broker_manager;

-- Producers: a routing key is the topic of an amqp message (any UTF-8 without control
-- characters, at most 255 bytes; none at all is fine: the destination's, else "").
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('rmq', 'order.créée', '{}');
INSERT INTO outbox.messages (destination, payload) VALUES ('rmq_default', '{}');
SELECT destination, topic FROM outbox.messages ORDER BY id;
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('rmq', repeat('k', 256), '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('rmq', E'a\tb', '{}');
-- A nats message needs a subject: its own, else the destination's (filled in at INSERT).
INSERT INTO outbox.messages (destination, payload) VALUES ('js', '{}');
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('js', 'orders.other', '{}');
SELECT destination, topic FROM outbox.messages WHERE destination = 'js' ORDER BY id;
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES ('js_nosubject', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('js', 'orders.*', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('js', '$JS.API.STREAM.PURGE.ORDERS', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('js', 'orders..x', '{}');
\echo :SQLSTATE
-- JetStream's control headers are the relay's (a producer could purge a stream with them).
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('js', '{}', '{"Nats-Rollup": "all"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('js', '{}', '{"nats-msg-id": "forged"}');
\echo :SQLSTATE
SELECT count(*) AS queued FROM outbox.messages;

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
