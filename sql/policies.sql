-- Destination policies of issue 26 beyond max_pending (back_pressure.sql): "ttl" (a default
-- expires_at), "retry_budget" (a wall-clock limit on retrying; its effect is test/t/068).
-- Each setting is validated at definition time with SQLSTATE 22023, and a refused definition
-- changes nothing.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

-- "ttl": a duration from 1s to 366d, as a number of milliseconds or a string with a unit.
SELECT outbox.create_destination('short', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "t", "ttl": "500ms"}');
\echo :SQLSTATE
SELECT outbox.create_destination('short', 'webhook', '{"url": "http://127.0.0.1:1/", "ttl": "367d"}');
\echo :SQLSTATE
SELECT outbox.create_destination('short', 'webhook', '{"url": "http://127.0.0.1:1/", "ttl": "soon"}');
SELECT outbox.create_destination('short', 'webhook', '{"url": "http://127.0.0.1:1/", "ttl": -1000}');
SELECT outbox.create_destination('short', 'webhook', '{"url": "http://127.0.0.1:1/", "ttl": true}');
SELECT count(*) AS destinations FROM outbox.destinations;
SELECT outbox.create_destination('short', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "t", "ttl": "15min"}');
SELECT outbox.create_destination('plain', 'webhook', '{"url": "http://127.0.0.1:1/"}');
SELECT outbox.create_destination('millis', 'webhook', '{"url": "http://127.0.0.1:1/", "ttl": 90000}');
-- A bad change is refused and the config stays as it was.
SELECT outbox.alter_destination('short', '{"ttl": "0s"}');
\echo :SQLSTATE
SELECT config->>'ttl' AS ttl FROM outbox.destinations WHERE name = 'short';

-- Applied at INSERT when the producer gives no expires_at: available_at + ttl (a scheduled
-- message gets the whole of it).
BEGIN;
INSERT INTO outbox.messages (destination, payload) VALUES ('short', '{"n": 1}');
INSERT INTO outbox.messages (destination, payload, available_at)
VALUES ('short', '{"n": 2}', now() + interval '1 hour');
INSERT INTO outbox.messages (destination, payload) VALUES ('millis', '{"n": 3}');
-- Not applied when the producer gives expires_at, nor for a destination without a ttl.
INSERT INTO outbox.messages (destination, payload, expires_at)
VALUES ('short', '{"n": 4}', now() + interval '2 days');
INSERT INTO outbox.messages (destination, payload) VALUES ('plain', '{"n": 5}');
SELECT outbox.publish(ARRAY['short', 'plain'], 'fan', '{"n": 6}') IS NOT NULL AS published;
SELECT destination, payload, expires_at - available_at AS lifetime,
       available_at - now() AS scheduled
  FROM outbox.messages ORDER BY id;
COMMIT;
-- The producer's expires_at is still checked against available_at; the ttl does not hide it.
INSERT INTO outbox.messages (destination, payload, expires_at) VALUES ('short', '{"n": 7}', now() - interval '1 second');
\echo :SQLSTATE
-- A changed ttl applies to the next message (the cached destination is reloaded); removing it
-- stops it.
SELECT outbox.alter_destination('short', '{"ttl": "2h"}');
INSERT INTO outbox.messages (destination, payload) VALUES ('short', '{"n": 8}');
SELECT outbox.alter_destination('short', '{"ttl": null}');
INSERT INTO outbox.messages (destination, payload) VALUES ('short', '{"n": 9}');
SELECT payload, expires_at - available_at AS lifetime FROM outbox.messages
 WHERE payload->>'n' IN ('7', '8', '9') ORDER BY id;
DELETE FROM outbox.messages;

-- "retry_budget": a duration from 1s to 366d; several problems are reported together.
SELECT outbox.create_destination('budget', 'webhook', '{"url": "http://127.0.0.1:1/", "retry_budget": "500ms"}');
\echo :SQLSTATE
SELECT outbox.create_destination('budget', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "retry_budget": "forever", "ttl": 0}');
\echo :SQLSTATE
SELECT outbox.create_destination('budget', 'webhook', '{"url": "http://127.0.0.1:1/", "retry_budget": "24h", "max_attempts": 50}');
SELECT outbox.alter_destination('budget', '{"retry_budget": "367d"}');
\echo :SQLSTATE
SELECT config->>'retry_budget' AS retry_budget FROM outbox.destinations WHERE name = 'budget';
SELECT outbox.alter_destination('budget', '{"retry_budget": 2000}');
SELECT config->'retry_budget' AS retry_budget FROM outbox.destinations WHERE name = 'budget';
SELECT outbox.drop_destination('budget');
SELECT outbox.drop_destination('short');
SELECT outbox.drop_destination('plain');
SELECT outbox.drop_destination('millis');
DROP EXTENSION outbox;
