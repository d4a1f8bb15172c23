-- Destinations: defined, checked at definition time (every problem in one error), changed,
-- paused, dropped.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

SELECT outbox.create_destination('orders', 'kafka',
    '{"bootstrap.servers": "127.0.0.1:9092", "topic": "orders", "linger.ms": 5,
      "compression.type": "lz4", "max_attempts": 5, "retry_base": "250ms"}');
SELECT outbox.create_destination('hooks', 'webhook',
    '{"url": "https://example.com/hook", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
      "headers": {"x-team": "billing"}, "timeout_ms": 5000, "max_in_flight": 8}');
-- Secrets rotate: several secrets are accepted.
SELECT outbox.create_destination('rotating', 'webhook',
    '{"url": "http://127.0.0.1:8080/hook",
      "secret": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2VjcmV0Mg=="]}');
SELECT name, kind, paused FROM outbox.destinations ORDER BY name;

-- Same name twice.
SELECT outbox.create_destination('orders', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092"}');

\echo :SQLSTATE
-- Kafka: every problem at once, each checked by librdkafka itself.
SELECT outbox.create_destination('bad_kafka', 'kafka',
    '{"topic": "no spaces allowed", "no.such.property": "1", "linger.ms": "soon",
      "acks": "0", "enable.idempotence": false, "internal.termination.signal": 9,
      "max_attempts": 0, "retry_base": "forever", "batch.size": {"x": 1}}');
\echo :SQLSTATE
-- Guarantee-breaking settings are refused one by one too.
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "acks": 1}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "transactional.id": "t"}');

\echo :SQLSTATE
-- Webhook: every problem at once.
SELECT outbox.create_destination('bad_hook', 'webhook',
    '{"url": "ftp://example.com/x", "secret": "not-a-secret", "headers": {"x-ok": 1, "bad name": "v"},
      "timeout_ms": -5, "max_in_flight": 100000, "tls_verify": "no", "unknown_key": true}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "http://x/", "headers": {"webhook-signature": "forged"}}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "http://x/", "ca_file": "/nonexistent/ca.pem"}');
\echo :SQLSTATE
-- A secret's value is never echoed, whatever is wrong with it.
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "http://x/", "secret": "whsec_TOPSECRET!!"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "http://x/", "secret": 424242}');

\echo :SQLSTATE
-- Names, kinds and configs that are not one.
SELECT outbox.create_destination('has space', 'kafka', '{"bootstrap.servers": "b:9092"}');
\echo :SQLSTATE
SELECT outbox.create_destination(repeat('x', 64), 'kafka', '{"bootstrap.servers": "b:9092"}');
\echo :SQLSTATE
SELECT outbox.create_destination(NULL, 'kafka', '{"bootstrap.servers": "b:9092"}');
\echo :SQLSTATE
SELECT outbox.create_destination('x', 'rabbitmq', '{}');
\echo :SQLSTATE
SELECT outbox.create_destination('x', NULL, '{}');
\echo :SQLSTATE
SELECT outbox.create_destination('x', 'kafka', NULL);
\echo :SQLSTATE
SELECT outbox.create_destination('x', 'kafka', '["bootstrap.servers"]');
\echo :SQLSTATE
-- Nothing was created by any of the failures above.
SELECT name FROM outbox.destinations ORDER BY name;

-- alter_destination merges: given keys replace, null removes, the rest is kept.
SELECT outbox.alter_destination('orders', '{"linger.ms": 1, "compression.type": null}');
SELECT config FROM outbox.destinations WHERE name = 'orders';
-- An invalid change is refused and changes nothing.
SELECT outbox.alter_destination('orders', '{"bootstrap.servers": null, "acks": "1"}');
\echo :SQLSTATE
SELECT config FROM outbox.destinations WHERE name = 'orders';
SELECT outbox.alter_destination('nope', '{"linger.ms": 1}');
\echo :SQLSTATE
SELECT outbox.alter_destination('orders', '"linger.ms"');
\echo :SQLSTATE
SELECT outbox.alter_destination('orders', NULL);
\echo :SQLSTATE
-- Renaming or changing the kind is refused even to a superuser writing the table directly.
UPDATE outbox.destinations SET name = 'orders2' WHERE name = 'orders';
\echo :SQLSTATE
UPDATE outbox.destinations SET kind = 'webhook' WHERE name = 'orders';
\echo :SQLSTATE
-- Direct writes are checked like the functions' writes.
INSERT INTO outbox.destinations (name, kind, config) VALUES ('direct', 'kafka', '{}');

\echo :SQLSTATE
-- Pause and resume.
SELECT outbox.pause('orders');
SELECT name, paused FROM outbox.destinations WHERE name = 'orders';
SELECT outbox.resume('orders');
SELECT name, paused FROM outbox.destinations WHERE name = 'orders';
SELECT outbox.pause('nope');
\echo :SQLSTATE
SELECT outbox.resume('nope');

\echo :SQLSTATE
-- Dropping: refused while messages wait, unless forced; forced moves them to the dead letters.
INSERT INTO outbox.messages (destination, key, payload) VALUES ('rotating', 'k1', '{"n": 1}'), ('rotating', 'k2', '{"n": 2}');
SELECT outbox.drop_destination('rotating');
\echo :SQLSTATE
SELECT count(*) AS still_queued FROM outbox.messages WHERE destination = 'rotating';
SELECT outbox.drop_destination('rotating', force => true);
SELECT count(*) AS queued FROM outbox.messages WHERE destination = 'rotating';
SELECT destination, key, payload, reason, last_error FROM outbox.dead_letters ORDER BY id;
SELECT outbox.drop_destination('rotating');
\echo :SQLSTATE
-- Messages for a dropped destination are refused from then on.
INSERT INTO outbox.messages (destination, payload) VALUES ('rotating', '{"n": 3}');
\echo :SQLSTATE
SELECT outbox.drop_destination('hooks');
SELECT name FROM outbox.destinations ORDER BY name;

-- Switching TLS verification off is explicit and visible.
SELECT outbox.create_destination('insecure', 'webhook', '{"url": "https://127.0.0.1:8443/", "tls_verify": false}');
SELECT outbox.create_destination('insecure-kafka', 'kafka',
    '{"bootstrap.servers": "127.0.0.1:9093", "security.protocol": "ssl", "enable.ssl.certificate.verification": false}');
SELECT destination, kind, tls_verify FROM outbox.stats() ORDER BY destination;

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
