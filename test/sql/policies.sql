-- Destination policies of issue 26 beyond max_pending (back_pressure.sql): "ttl" (a default
-- expires_at), "retry_budget" (a wall-clock limit on retrying; its effect is test/t/068),
-- "compaction" (a newer message of a key supersedes the older queued one; test/t/069).
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

-- "compaction": "key" (or "none", the default); any other value is refused with 22023 and
-- nothing is created or changed.
SELECT outbox.create_destination('state', 'webhook', '{"url": "http://127.0.0.1:1/", "compaction": "keys"}');
\echo :SQLSTATE
SELECT outbox.create_destination('state', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "t", "compaction": true}');
\echo :SQLSTATE
SELECT count(*) AS destinations FROM outbox.destinations;
SELECT outbox.create_destination('state', 'webhook', '{"url": "http://127.0.0.1:1/", "compaction": "key"}');
SELECT outbox.create_destination('other', 'webhook', '{"url": "http://127.0.0.1:1/", "compaction": "none"}');
SELECT outbox.alter_destination('state', '{"compaction": "latest"}');
\echo :SQLSTATE
SELECT name, config->>'compaction' AS compaction FROM outbox.destinations ORDER BY name;
-- The counts start here (conservation from now on).
SELECT count(*) FROM outbox.stats();

-- Applied: a newer message of a key supersedes the older undelivered one, also within one
-- transaction and one statement; other keys, rows without a key and other destinations are
-- left alone.
INSERT INTO outbox.messages (destination, key, payload) VALUES ('state', 'a', '{"v": 1}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('state', 'b', '{"v": 1}');
INSERT INTO outbox.messages (destination, payload) VALUES ('state', '{"v": "no key 1"}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('other', 'a', '{"v": 1}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('state', 'a', '{"v": 2}');
BEGIN;
INSERT INTO outbox.messages (destination, key, payload) VALUES ('state', 'a', '{"v": 3}');
INSERT INTO outbox.messages (destination, key, payload)
VALUES ('state', 'b', '{"v": 2}'), ('state', 'b', '{"v": 3}');
COMMIT;
INSERT INTO outbox.messages (destination, payload) VALUES ('state', '{"v": "no key 2"}');
SELECT outbox.publish(ARRAY['state', 'other'], 'fan', '{"v": 4}', key => 'a') IS NOT NULL AS published;
SELECT destination, key, payload, compacts FROM outbox.messages ORDER BY id;
SELECT destination, superseded_total, pending FROM outbox.stats() WHERE destination IN ('state', 'other');

-- A rolled-back supersession leaves the older message queued and counts nothing.
BEGIN;
INSERT INTO outbox.messages (destination, key, payload) VALUES ('state', 'a', '{"v": "rolled back"}');
ROLLBACK;
SELECT key, payload FROM outbox.messages WHERE destination = 'state' AND key = 'a';

-- A message in flight (leased by a worker) is never superseded: it completes, and the newer one
-- is queued behind it.
UPDATE outbox.messages SET lease_token = 42, attempts = 1, available_at = now() + interval '30 s'
 WHERE destination = 'state' AND key = 'b';
INSERT INTO outbox.messages (destination, key, payload) VALUES ('state', 'b', '{"v": 5}');
SELECT key, payload, lease_token FROM outbox.messages WHERE destination = 'state' AND key = 'b' ORDER BY id;
-- Producers may not set compacts.
INSERT INTO outbox.messages (destination, key, payload, compacts) VALUES ('other', 'z', '{}', true);
\echo :SQLSTATE
SELECT destination, superseded_total FROM outbox.stats() WHERE destination = 'state';
SELECT destination, produced, superseded, removed, queued, balance FROM outbox.conservation()
 WHERE destination IN ('state', 'other');

-- With outbox.retention on, a superseded message is kept in outbox.archive with reason
-- 'superseded'.
ALTER SYSTEM SET outbox.retention = '1d';
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SHOW outbox.retention;
INSERT INTO outbox.messages (destination, key, payload) VALUES ('state', 'a', '{"v": 6}');
SELECT key, payload, reason, attempts FROM outbox.archive ORDER BY id;
ALTER SYSTEM RESET outbox.retention;
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
INSERT INTO outbox.messages (destination, key, payload) VALUES ('state', 'a', '{"v": 7}');
SELECT count(*) AS archived FROM outbox.archive;
SELECT key, payload FROM outbox.messages WHERE destination = 'state' AND key = 'a';
-- The archive takes no other reason.
\set VERBOSITY terse
INSERT INTO outbox.archive (id, event_id, destination, created_at, attempts, reason)
VALUES (1, outbox.uuid_generate_v7(), 'state', now(), 0, 'lost');
\set VERBOSITY default
\echo :SQLSTATE
SELECT destination, superseded_total FROM outbox.stats() WHERE destination = 'state';
SELECT destination, superseded, balance FROM outbox.conservation() WHERE destination = 'state';

-- With max_pending, a message that supersedes one takes its place: a full queue still takes
-- a newer version of a queued key (in the same transaction too), and refuses a new key.
SELECT outbox.create_destination('capped_state', 'webhook', '{"url": "http://127.0.0.1:1/", "compaction": "key", "max_pending": 2}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('capped_state', 'a', '{"v": 1}'), ('capped_state', 'b', '{"v": 1}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('capped_state', 'a', '{"v": 2}');
BEGIN;
INSERT INTO outbox.messages (destination, key, payload) VALUES ('capped_state', 'b', '{"v": 2}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('capped_state', 'b', '{"v": 3}');
COMMIT;
INSERT INTO outbox.messages (destination, key, payload) VALUES ('capped_state', 'c', '{"v": 1}');
\echo :SQLSTATE
SELECT key, payload FROM outbox.messages WHERE destination = 'capped_state' ORDER BY id;
SELECT destination, pending, superseded_total, refused_total FROM outbox.stats() WHERE destination = 'capped_state';
DELETE FROM outbox.messages WHERE destination = 'capped_state';
SELECT outbox.drop_destination('capped_state');

-- Turned off, a new message supersedes nothing.
SELECT outbox.alter_destination('state', '{"compaction": null}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('state', 'a', '{"v": 8}');
SELECT key, payload, compacts FROM outbox.messages WHERE destination = 'state' AND key = 'a' ORDER BY id;
DELETE FROM outbox.messages;
DELETE FROM outbox.archive;
SELECT destination, balance FROM outbox.conservation() WHERE destination IN ('state', 'other');
SELECT outbox.drop_destination('state');
SELECT outbox.drop_destination('other');
DROP EXTENSION outbox;
