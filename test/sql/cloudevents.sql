-- CloudEvents on the wire: the "cloudevents" content mode of a destination, Kafka tombstones
-- (a keyed message without payload) and the producer's CloudEvents type (header ce_type or
-- ce-type). What is refused, with its SQLSTATE, and that nothing was queued by a refusal.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

SELECT outbox.create_destination('k', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "t"}');
SELECT outbox.create_destination('ks', 'kafka',
    '{"bootstrap.servers": "127.0.0.1:9092", "topic": "t", "cloudevents": "structured"}');
SELECT outbox.create_destination('h', 'webhook',
    '{"url": "http://127.0.0.1:1/h", "cloudevents": "binary"}');
SELECT name, config->'cloudevents' AS cloudevents FROM outbox.destinations ORDER BY name;

-- A content mode other than binary or structured; and for kinds that have no such option.
SELECT outbox.create_destination('bad', 'kafka',
    '{"bootstrap.servers": "127.0.0.1:9092", "cloudevents": "Structured"}');
\echo :SQLSTATE
SELECT outbox.alter_destination('h', '{"url": "http://127.0.0.1:1/h", "cloudevents": true}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad', 'amqp',
    '{"url": "amqp://127.0.0.1", "cloudevents": "structured"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad', 'nats',
    '{"servers": ["nats://127.0.0.1:4222"], "subject": "s", "cloudevents": "binary"}');
\echo :SQLSTATE
SELECT name, config->'cloudevents' AS cloudevents FROM outbox.destinations ORDER BY name;

-- Tombstones: a keyed message to a Kafka destination with neither payload column.
INSERT INTO outbox.messages (destination, key) VALUES ('k', 'customer-1');
INSERT INTO outbox.messages (destination, key, topic) VALUES ('ks', 'customer-2', 't2');
SELECT destination, key, topic, payload IS NULL AND payload_bytes IS NULL AS tombstone
  FROM outbox.messages ORDER BY id;
-- Without a key there is nothing to delete: refused, and so is one to a webhook.
INSERT INTO outbox.messages (destination) VALUES ('k');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, key) VALUES ('h', 'customer-1');
\echo :SQLSTATE

-- The producer's CloudEvents type: ce_type or ce-type, in any case, once, not empty.
INSERT INTO outbox.messages (destination, payload, headers)
VALUES ('k', '{}', '{"ce_type": "com.example.customer.created"}'),
       ('h', '{}', '{"CE-Type": "com.example.customer.created"}');
INSERT INTO outbox.messages (destination, payload, headers)
VALUES ('k', '{}', '{"ce_type": "a", "ce-type": "b"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers)
VALUES ('k', '{}', '{"ce_type": "a", "CE_TYPE": "b"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('h', '{}', '{"ce-type": ""}');
\echo :SQLSTATE
-- The other CloudEvents attributes stay the relay's.
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('k', '{}', '{"ce_id": "x"}');
\echo :SQLSTATE
-- A destination cannot set the type for every message with a static header: that is "topic".
SELECT outbox.alter_destination('h', '{"url": "http://127.0.0.1:1/h", "headers": {"ce-type": "x"}}');
\echo :SQLSTATE
SELECT destination, key, headers FROM outbox.messages ORDER BY id;

-- Trace context captured at INSERT (W3C traceparent/tracestate): from outbox.traceparent, else
-- from the statement's SQLCommenter comment, unless the producer passed a traceparent header.
DELETE FROM outbox.messages;
BEGIN;
SET LOCAL outbox.traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
SET LOCAL outbox.tracestate = 'rojo=00f067aa0ba902b7';
INSERT INTO outbox.messages (destination, key, payload) VALUES ('k', 'set', '{}');
INSERT INTO outbox.messages (destination, key, payload, headers)
VALUES ('k', 'own', '{}', '{"TraceParent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}');
COMMIT;
INSERT INTO outbox.messages (destination, key, payload, headers) VALUES ('k', 'comment', '{}', '{"x-a": "1"}')
/*app='shop',traceparent='00-5bd66ef5095369c7b0d1f8f4bd33716a-c532cb4098ac3dd2-01',tracestate='congo%3Dt61rcWkgMzE'*/;
INSERT INTO outbox.messages (destination, key, payload) VALUES ('k', 'literal', '{"c": "/*traceparent=''00-5bd66ef5095369c7b0d1f8f4bd33716a-c532cb4098ac3dd2-01''*/"}');
-- Malformed: a WARNING, never an error; the row is queued without it.
BEGIN;
SET LOCAL outbox.traceparent = 'not-a-traceparent';
INSERT INTO outbox.messages (destination, key, payload) VALUES ('k', 'bad', '{}');
SET LOCAL outbox.traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
SET LOCAL outbox.tracestate = 'Bad Key=1';
INSERT INTO outbox.messages (destination, key, payload) VALUES ('k', 'bad-state', '{}');
COMMIT;
-- ce_traceparent is the relay's, sent from traceparent.
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('k', '{}', '{"ce_traceparent": "x"}');
\echo :SQLSTATE
SELECT key, headers FROM outbox.messages ORDER BY id;

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
