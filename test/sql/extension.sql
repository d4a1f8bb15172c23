-- Installing, reinstalling and the settings the module defines.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never
SELECT extname, extversion, extrelocatable, nspname AS schema
  FROM pg_extension JOIN pg_namespace ON pg_namespace.oid = extnamespace WHERE extname = 'outbox';

-- A second CREATE is refused; IF NOT EXISTS is a no-op.
CREATE EXTENSION outbox;
\echo :SQLSTATE
CREATE EXTENSION IF NOT EXISTS outbox;

\echo :SQLSTATE
-- The schema is fixed: functions and the worker refer to outbox.*.
CREATE SCHEMA elsewhere;
ALTER EXTENSION outbox SET SCHEMA elsewhere;
\echo :SQLSTATE
DROP SCHEMA elsewhere;

-- Everything the extension owns. (PostgreSQL 17 and later also record each table's row type and
-- every array type as members; they come and go with the tables and types, and are left out
-- here so that the list is the same on every major.)
SELECT pg_describe_object(classid, objid, 0) AS object
  FROM pg_depend
 WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox') AND deptype = 'e'
   AND NOT (classid = 'pg_type'::regclass AND objid IN (
       SELECT t.oid FROM pg_type t JOIN pg_class c ON c.relkind IN ('r', 'p')
          AND t.oid IN (c.reltype, (SELECT typarray FROM pg_type WHERE oid = c.reltype))
       UNION ALL SELECT t.oid FROM pg_type t WHERE t.typcategory = 'A'))
 ORDER BY 1;

-- pg_dump keeps the queue, the dead letters and the destinations.
SELECT unnest(extconfig)::regclass FROM pg_extension WHERE extname = 'outbox' ORDER BY 1;

-- DROP EXTENSION is refused while messages or dead letters exist (CASCADE included, and DROP
-- SCHEMA outbox CASCADE): nothing is lost.
SELECT outbox.create_destination('orders', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "orders"}');
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{"n": 1}');
DROP EXTENSION outbox;
\echo :SQLSTATE
DROP EXTENSION outbox CASCADE;
\echo :SQLSTATE
DROP SCHEMA outbox CASCADE;
\echo :SQLSTATE
SELECT count(*) AS still_queued FROM outbox.messages;
DELETE FROM outbox.messages;
INSERT INTO outbox.dead_letters (id, event_id, destination, payload, created_at, attempts, reason, last_error)
VALUES (1, '0190a8c0-0000-7000-8000-000000000001', 'orders', '{}', now(), 1, 'rejected', 'x');
DROP EXTENSION outbox;
\echo :SQLSTATE
-- With outbox.drop_nonempty on, DROP then CREATE gives a clean, working extension again.
SET outbox.drop_nonempty = on;
DROP EXTENSION outbox;
RESET outbox.drop_nonempty;
-- PostgreSQL creates the schema named in the control file but does not drop it: it stays, empty.
SELECT count(*) AS objects_left FROM pg_class WHERE relnamespace = 'outbox'::regnamespace;
CREATE EXTENSION outbox;
SELECT count(*) AS destinations FROM outbox.destinations;
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{"n": 1}');
\echo :SQLSTATE
SELECT outbox.create_destination('orders', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "orders"}');
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{"n": 1}');
SELECT destination, topic, payload FROM outbox.messages;

-- Settings: every outbox.* GUC, its default and who may change it.
SELECT name, setting, unit, context FROM pg_settings WHERE name LIKE 'outbox.%' ORDER BY name;
-- The prefix is reserved: a misspelt setting is an error, not a silent placeholder.
SET outbox.batchsize = 10;
\echo :SQLSTATE
-- Reload-only settings cannot be changed in a session; the payload limit can, by a superuser.
SET outbox.batch_size = 10;
\echo :SQLSTATE
SET outbox.max_payload_bytes = '2MB';
SHOW outbox.max_payload_bytes;
-- (The message's wording of the range differs between majors; the range is pg_settings'.)
\set VERBOSITY sqlstate
SET outbox.max_payload_bytes = 0;
\set VERBOSITY default
SELECT min_val, max_val, unit FROM pg_settings WHERE name = 'outbox.max_payload_bytes';
RESET outbox.max_payload_bytes;

SET outbox.drop_nonempty = on;
DROP EXTENSION outbox;
