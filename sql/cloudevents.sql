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

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
