-- Bad input, edge by edge: what producers and destination managers can send that the other
-- regress files do not already try. Every refusal shows its exact error and SQLSTATE; at the
-- end, nothing was written or changed by any of them.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

SELECT outbox.create_destination('orders', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "orders"}');
SELECT outbox.create_destination('notopic', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092"}');
SELECT outbox.create_destination('hook', 'webhook', '{"url": "http://127.0.0.1:8080/"}');
SELECT md5(string_agg(name || kind || config::text || paused, ',' ORDER BY name)) AS destinations_before
  FROM outbox.destinations \gset

--------------------------------------------------------------------------------------------------
-- Headers
--------------------------------------------------------------------------------------------------
-- CR or LF alone in a value; CR, LF or other separators in a name.
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-cr": "a\rb"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-lf": "a\nb"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('hook', '{}', '{"x-lf": "\nX-Injected: 1"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-a\nx-b": "v"}');
\echo :SQLSTATE
-- The message quotes the name raw (control characters and all); shown escaped here.
DO $$
BEGIN
    INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-a\r\nx-b": "v"}');
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE '% %', SQLSTATE, replace(replace(SQLERRM, E'\r', '\r'), E'\n', '\n');
END
$$;
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-a:b": "v"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"": "v"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-naïve": "v"}');
\echo :SQLSTATE
-- NUL cannot even reach the check: jsonb refuses \u0000 in names and values, text refuses chr(0).
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-\u0000": "v"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', jsonb_build_object('x-nul', 'a' || chr(0)));
\echo :SQLSTATE
-- Header values that are not strings, every JSON type.
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-bool": true}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-bool": false}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-null": null}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-float": -1.5e3}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-array": ["a"]}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-object": {}}');
\echo :SQLSTATE
-- The first bad header is the one named, whatever comes after it.
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '{"x-ok": "v", "x-n": 1, "bad name": "v"}');
\echo :SQLSTATE
-- Headers that are not an object: JSON null, a number, an empty array.
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', 'null');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '42');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', '[]');
\echo :SQLSTATE
-- Names at and just over 256 bytes; values at and just over 8192 bytes (bytes, not characters).
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', jsonb_build_object(repeat('n', 257), 'v'));
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', jsonb_build_object('x-long', repeat('é', 4096) || 'x'));
\echo :SQLSTATE
-- Reserved names, in any case: framing, proxy and CloudEvents headers.
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('hook', '{}', '{"Host": "evil.example"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('hook', '{}', '{"CONTENT-LENGTH": "0"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('hook', '{}', '{"Transfer-Encoding": "chunked"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('hook', '{}', '{"Proxy-Authorization": "Basic eA=="}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('hook', '{}', '{"CE-Source": "/forged"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('hook', '{}', '{"webhook-id": "msg_forged"}');
\echo :SQLSTATE
SELECT count(*) AS rows_after_header_refusals FROM outbox.messages;

-- Accepted: names of exactly 256 bytes, values of exactly 8192 bytes (ASCII and two-byte
-- characters), the empty value, a tab, an empty object, unicode in values.
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{"h": 1}', jsonb_build_object(repeat('n', 256), repeat('v', 8192)));
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{"h": 2}', jsonb_build_object('x-long', repeat('é', 4096)));
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{"h": 3}', '{"x-empty": "", "x-tab": "a\tb", "x-uni": "\u2028 ✓ 😀"}');
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{"h": 4}', '{}');
-- Control characters other than tab (here U+0001, DEL and ESC) are refused: HTTP allows none
-- but tab in a field value.
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('hook', '{"h": 5}', '{"x-ctl": "a\u0001b"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('hook', '{"h": 5}', '{"x-ctl": "a\u007fc"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('hook', '{"h": 5}', '{"x-ctl": "\u001b[31mred"}');
\echo :SQLSTATE
SELECT payload->>'h' AS h, (SELECT max(octet_length(k)) FROM jsonb_object_keys(headers) k) AS longest_name,
       (SELECT max(octet_length(v)) FROM jsonb_each_text(headers) e(k, v)) AS longest_value
  FROM outbox.messages ORDER BY id;
DELETE FROM outbox.messages;

-- The webhook topic becomes the ce-type request header: no CR or LF (a second header line).
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('hook', E'order.created\r\nX-Injected: yes', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('hook', E'order.created\n', '{}');
\echo :SQLSTATE
-- Nor any other control character, as in header values.
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('hook', E'order\x01created', '{}');
\echo :SQLSTATE
SELECT count(*) AS rows_after_topic_refusals FROM outbox.messages;
-- The same topic is refused where it is a destination's default.
SELECT outbox.create_destination('bad_hook', 'webhook', jsonb_build_object('url', 'http://127.0.0.1:8080/', 'topic', E'a\r\nX-Injected: yes'));
\echo :SQLSTATE

--------------------------------------------------------------------------------------------------
-- Invalid UTF-8 cannot get into text or jsonb; bytea takes any bytes.
--------------------------------------------------------------------------------------------------
INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', convert_from('\x6bff'::bytea, 'UTF8'), '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', jsonb_build_object('x-h', convert_from('\xc0af'::bytea, 'UTF8')));
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', to_jsonb(convert_from('\xeda080'::bytea, 'UTF8')));
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '"\ud800"');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{"a": "\u0000"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload_bytes) VALUES ('orders', '\x00ff80c0afeda080fffe0d0a'::bytea);
SELECT payload_bytes, length(payload_bytes) AS bytes FROM outbox.messages;
DELETE FROM outbox.messages;
-- Error messages cut the name they quote at 64 bytes on a character boundary and mark the cut,
-- so a client whose encoding is not UTF8 gets the real error; control characters show as '?'
-- (no line injected into the server log).
SET client_encoding = 'LATIN1';
INSERT INTO outbox.messages (destination, payload) VALUES ('x' || repeat(chr(233), 40), '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, headers) VALUES ('orders', '{}', jsonb_build_object('x' || repeat(chr(233), 40), 'v'));
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('orders', 'x' || repeat(chr(233), 40), '{}');
\echo :SQLSTATE
RESET client_encoding;
-- The config check cuts what it quotes on a character boundary, and says so with "...".
SELECT outbox.create_destination('bad_hook', 'webhook', jsonb_build_object('url', 'http://127.0.0.1:8080/', 'x' || repeat(chr(233), 40), 1));
\echo :SQLSTATE

--------------------------------------------------------------------------------------------------
-- Keys, destinations, topics
--------------------------------------------------------------------------------------------------
-- At 1024 bytes and just over, counted in bytes.
INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', repeat('k', 1024), '{"k": 1}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', repeat('é', 512), '{"k": 2}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', '', '{"k": 3}');
INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', repeat('é', 512) || 'k', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', repeat('k', 100000), '{}');
\echo :SQLSTATE
SELECT payload->>'k' AS k, octet_length(key) AS key_bytes FROM outbox.messages ORDER BY id;
DELETE FROM outbox.messages;
-- Destinations: empty, too long to be one, a different case, surrounding blanks.
INSERT INTO outbox.messages (destination, payload) VALUES ('', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES (repeat('o', 10000), '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES ('ORDERS', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES (' orders', '{}');
\echo :SQLSTATE
-- A topic where one is required: NULL through publish too, and empty.
SELECT outbox.publish(ARRAY['notopic'], NULL, '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('notopic', '', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('notopic', '..', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('hook', repeat('t', 250), '{}');
\echo :SQLSTATE
-- event_id may be given, but not as NULL (terse: the failing row shows timestamps).
\set VERBOSITY terse
INSERT INTO outbox.messages (destination, payload, event_id) VALUES ('orders', '{}', NULL);
\echo :SQLSTATE
\set VERBOSITY default
SELECT count(*) AS rows_after_key_refusals FROM outbox.messages;

--------------------------------------------------------------------------------------------------
-- Payloads
--------------------------------------------------------------------------------------------------
-- At the default outbox.max_payload_bytes (1MB = 1048576) and one byte over, for jsonb (the
-- delivered text: a string of 1048574 characters plus its quotes) and bytea (to a webhook:
-- Kafka destinations have a lower limit of their own, below).
INSERT INTO outbox.messages (destination, payload) VALUES ('hook', to_jsonb(repeat('a', 1048574)));
INSERT INTO outbox.messages (destination, payload) VALUES ('hook', to_jsonb(repeat('a', 1048575)));
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload_bytes) VALUES ('hook', decode(repeat('ff', 1048576), 'hex'));
INSERT INTO outbox.messages (destination, payload_bytes) VALUES ('hook', decode(repeat('ff', 1048577), 'hex'));
\echo :SQLSTATE
-- Delivered bytes, not characters: 524288 two-byte characters plus quotes are 2 bytes over.
INSERT INTO outbox.messages (destination, payload) VALUES ('hook', to_jsonb(repeat('é', 524288)));
\echo :SQLSTATE
SELECT octet_length(payload::text) AS json_bytes, length(payload_bytes) AS binary_bytes FROM outbox.messages ORDER BY id;
DELETE FROM outbox.messages;
-- A Kafka destination sends at most librdkafka's message.max.bytes (1,000,000 unless set) per
-- record, key, headers and outbox's own headers (1,024 bytes kept for them) included: a message
-- under outbox.max_payload_bytes that could not be sent is refused at INSERT, not dead-lettered.
INSERT INTO outbox.messages (destination, payload_bytes) VALUES ('orders', decode(repeat('ab', 998976), 'hex'));
INSERT INTO outbox.messages (destination, payload_bytes) VALUES ('orders', decode(repeat('ab', 998977), 'hex'));
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, key, headers)
VALUES ('orders', to_jsonb(repeat('a', 998000)), repeat('k', 1000), '{"x-big": "v"}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', to_jsonb(repeat('a', 1040000)));
\echo :SQLSTATE
-- With a larger message.max.bytes, outbox.max_payload_bytes is the limit again.
SELECT outbox.create_destination('big', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "big", "message.max.bytes": 2000000}');
INSERT INTO outbox.messages (destination, payload) VALUES ('big', to_jsonb(repeat('a', 1040000)));
INSERT INTO outbox.messages (destination, payload) VALUES ('big', to_jsonb(repeat('a', 1048575)));
\echo :SQLSTATE
SELECT destination, octet_length(coalesce(payload::text, '')) + coalesce(length(payload_bytes), 0) AS bytes
  FROM outbox.messages ORDER BY id;
DELETE FROM outbox.messages;
SELECT outbox.drop_destination('big');
-- Empty and degenerate payloads are deliverable: JSON null, an empty string, zero bytes, deep
-- nesting within what jsonb itself accepts.
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', 'null'), ('orders', '""'), ('orders', '{}');
INSERT INTO outbox.messages (destination, payload_bytes) VALUES ('orders', ''::bytea);
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', (repeat('[', 5000) || repeat(']', 5000))::jsonb);
SELECT count(*) AS degenerate_payloads FROM outbox.messages;
DELETE FROM outbox.messages;
-- The limit applies to the delivered text, not the jsonb binary size: a numeric such as
-- 1e131071 is stored in a few bytes and printed as 131072 digits.
INSERT INTO outbox.messages (destination, payload)
SELECT 'orders', jsonb_agg('1e131071'::numeric) FROM generate_series(1, 20);
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload)
SELECT 'orders', jsonb_agg('1e131071'::numeric) FROM generate_series(1, 7);
SELECT octet_length(payload::text) AS delivered_bytes FROM outbox.messages;
DELETE FROM outbox.messages;

--------------------------------------------------------------------------------------------------
-- Times
--------------------------------------------------------------------------------------------------
INSERT INTO outbox.messages (destination, payload, available_at) VALUES ('orders', '{}', 'infinity');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, available_at) VALUES ('orders', '{}', '294276-12-31 23:59:59+00');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, expires_at) VALUES ('orders', '{}', '-infinity');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, expires_at) VALUES ('orders', '{}', now());
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, available_at, expires_at) VALUES ('orders', '{}', '2000-01-01', '2000-01-01');
\echo :SQLSTATE
SELECT count(*) AS rows_after_time_refusals FROM outbox.messages;
-- Accepted: due at once when in the past, however far; never expiring.
INSERT INTO outbox.messages (destination, payload, available_at) VALUES ('orders', '{"t": 1}', '-infinity');
INSERT INTO outbox.messages (destination, payload, available_at) VALUES ('orders', '{"t": 2}', '4713-01-01 00:00:00+00 BC');
INSERT INTO outbox.messages (destination, payload, expires_at) VALUES ('orders', '{"t": 3}', 'infinity');
SELECT payload->>'t' AS t, available_at <= now() AS due, expires_at FROM outbox.messages ORDER BY id;
DELETE FROM outbox.messages;

--------------------------------------------------------------------------------------------------
-- Relay-owned columns a producer can still set.
--------------------------------------------------------------------------------------------------
-- id and created_at are assigned at INSERT: a producer that sets them (OVERRIDING SYSTEM VALUE
-- included, which needs only INSERT) is refused, so a forged id can never collide with a
-- later message or a dead letter.
CREATE ROLE outbox_regress_forger;
GRANT USAGE ON SCHEMA outbox TO outbox_regress_forger;
GRANT INSERT ON outbox.messages TO outbox_regress_forger;
GRANT SELECT ON outbox.messages_id_seq TO outbox_regress_forger;
SET ROLE outbox_regress_forger;
INSERT INTO outbox.messages (id, destination, payload) OVERRIDING SYSTEM VALUE
SELECT last_value + 1, 'orders', '{"forged": "id"}' FROM outbox.messages_id_seq;
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload, created_at) VALUES ('orders', '{"forged": "created_at"}', '1970-01-01 00:00:00+00');
\echo :SQLSTATE
-- A NULL id is numbered, never kept.
INSERT INTO outbox.messages (id, destination, payload) VALUES (NULL, 'orders', '{"forged": "null id"}');
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{"forged": "nothing"}');
RESET ROLE;
SELECT payload->>'forged' AS forged, id IS NOT NULL AS numbered, created_at = now() AS created_now
  FROM outbox.messages ORDER BY id;
-- Only the owner of outbox.messages (a superuser: pg_restore, and outbox.requeue, which runs
-- with the owner's rights) inserts rows that keep their id; the id sequence then moves past it,
-- so the next producer's number never meets it.
INSERT INTO outbox.messages (id, destination, payload, created_at)
SELECT last_value + 5, 'orders', '{"kept": "id"}', '2000-01-01 00:00:00+00' FROM outbox.messages_id_seq;
SET ROLE outbox_regress_forger;
INSERT INTO outbox.messages (destination, payload) VALUES ('orders', '{"after": "kept id"}');
RESET ROLE;
SELECT coalesce(payload->>'kept', payload->>'after') AS message, created_at = '2000-01-01 00:00:00+00' AS kept_created_at
  FROM outbox.messages WHERE payload ? 'kept' OR payload ? 'after' ORDER BY id;
DELETE FROM outbox.messages;
REVOKE ALL ON outbox.messages, outbox.messages_id_seq FROM outbox_regress_forger;
REVOKE ALL ON SCHEMA outbox FROM outbox_regress_forger;
DROP ROLE outbox_regress_forger;

--------------------------------------------------------------------------------------------------
-- Destination configs: every setting of both kinds with a value of the wrong type. One call
-- per kind and type; every problem is reported in the one error.
--------------------------------------------------------------------------------------------------
-- Numbers (and booleans) as strings: durations and librdkafka properties take strings (as in
-- postgresql.conf and librdkafka's own API); counts and tls_verify do not.
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092",
    "max_attempts": "5", "retry_base": "500", "retry_max": "10000", "topic": "orders",
    "ordering": "key", "on_dead": "skip", "linger.ms": "5", "enable.idempotence": "true",
    "message.timeout.ms": "5000", "acks": "-1"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "http://127.0.0.1:8080/",
    "max_attempts": "5", "retry_base": "500", "retry_max": "10000", "timeout_ms": "5000",
    "max_in_flight": "8", "tls_verify": "true"}');
\echo :SQLSTATE
-- Numbers where strings belong.
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": 9092, "topic": 5,
    "ordering": 1, "on_dead": 0, "compression.type": 4}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": 80, "secret": 1, "topic": 5,
    "headers": 1, "ca_file": 0, "tls_verify": 1, "ordering": 1}');
\echo :SQLSTATE
-- Objects.
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": {"host": "b"},
    "max_attempts": {"n": 5}, "retry_base": {"ms": 5}, "retry_max": {}, "topic": {},
    "ordering": {}, "on_dead": {}, "linger.ms": {}, "acks": {"all": true},
    "enable.idempotence": {}}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": {"href": "http://x/"},
    "secret": {"v1": "whsec_c2VjcmV0"}, "headers": {"x-a": {}}, "timeout_ms": {}, "max_in_flight": {},
    "ca_file": {}, "tls_verify": {}, "max_attempts": {}, "retry_base": {}, "retry_max": {},
    "topic": {}, "ordering": {}, "on_dead": {}}');
\echo :SQLSTATE
-- Arrays.
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": ["127.0.0.1:9092"],
    "max_attempts": [5], "retry_base": ["1s"], "retry_max": [], "topic": ["orders"],
    "ordering": ["key"], "on_dead": ["skip"], "linger.ms": [5], "acks": ["all"],
    "enable.idempotence": [true]}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": ["http://x/"], "secret": [],
    "headers": [["x-a", "b"]], "timeout_ms": [1], "max_in_flight": [1], "ca_file": ["/etc/hosts"],
    "tls_verify": [true], "max_attempts": [1], "retry_base": [1], "retry_max": [1],
    "topic": ["t"], "ordering": ["none"]}');
\echo :SQLSTATE
-- JSON null (create_destination stores it; alter_destination would remove the key).
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": null,
    "max_attempts": null, "retry_base": null, "retry_max": null, "topic": null,
    "ordering": null, "on_dead": null, "linger.ms": null, "acks": null, "enable.idempotence": null}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": null, "secret": null,
    "headers": null, "timeout_ms": null, "max_in_flight": null, "ca_file": null,
    "tls_verify": null, "max_attempts": null, "retry_base": null, "retry_max": null,
    "topic": null, "ordering": null, "on_dead": null}');
\echo :SQLSTATE
-- Numbers out of range, fractions, exponents.
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "http://127.0.0.1:8080/",
    "max_attempts": 1001, "max_in_flight": 1025, "timeout_ms": 600001, "retry_base": 86400001,
    "retry_max": "7.5d"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "http://127.0.0.1:8080/",
    "max_attempts": 2.5, "max_in_flight": -1, "timeout_ms": -0.5, "retry_base": 1e-3}');
\echo :SQLSTATE
-- A number beyond the range of a double (jsonb keeps 1e400 exactly) is reported where it is,
-- next to the other problems.
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "http://127.0.0.1:8080/",
    "max_attempts": 2.5, "retry_base": 1e400}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "http://127.0.0.1:8080/",
    "retry_base": "2s", "retry_max": "1s"}');
\echo :SQLSTATE
-- Accepted: integral numbers however written, and the largest values (timeout_ms: half of
-- outbox.lease_timeout, 30 s here).
SELECT outbox.create_destination('edge_hook', 'webhook', '{"url": "http://127.0.0.1:8080/",
    "max_attempts": 1e3, "max_in_flight": 1024.0, "timeout_ms": "15s", "retry_base": "1d",
    "retry_max": "7d"}');
SELECT config FROM outbox.destinations WHERE name = 'edge_hook';
-- A request must end within half of the lease, or another worker takes the message over and
-- sends it again: a longer timeout_ms is refused (the parser's own limit is 10min), on
-- create and when alter_destination changes it, and nothing changes.
SELECT outbox.create_destination('long_hook', 'webhook', '{"url": "http://127.0.0.1:8080/",
    "timeout_ms": "10min"}');
\echo :SQLSTATE
SELECT outbox.alter_destination('edge_hook', '{"timeout_ms": 15001}');
\echo :SQLSTATE
SELECT config->'timeout_ms' AS timeout_ms FROM outbox.destinations WHERE name = 'edge_hook';
SELECT count(*) FROM outbox.destinations WHERE name = 'long_hook';
SELECT outbox.drop_destination('edge_hook');

--------------------------------------------------------------------------------------------------
-- librdkafka properties that would break the guarantees or the server.
--------------------------------------------------------------------------------------------------
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "enable.idempotence": "false"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "enable.idempotence": 0}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "acks": 0}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "acks": "1"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "request.required.acks": 1}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "request.required.acks": "0", "acks": "all"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "transactional.id": ""}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "internal.termination.signal": 0}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "plugin.library.paths": "/tmp/x.so"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "retries": 0, "max.in.flight": 6}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "dr_msg_cb": "x", "error_cb": "x", "opaque": "x"}');
\echo :SQLSTATE
-- Property names are case-sensitive in librdkafka: other spellings are unknown, not a way round.
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "ACKS": "0", "Enable.Idempotence": false, "Transactional.Id": "t"}');
\echo :SQLSTATE
-- Accepted: the spellings of "all" and true librdkafka normalises.
SELECT outbox.create_destination('ok_kafka', 'kafka', '{"bootstrap.servers": "b:9092", "acks": -1, "request.required.acks": "all", "enable.idempotence": "t"}');
SELECT outbox.drop_destination('ok_kafka');
-- Refused in every spelling librdkafka accepts: acks = 0 on the default topic config, and a
-- queuing strategy the idempotent producer cannot start with.
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092",
    "topic.request.required.acks": 0, "topic.acks": "1", "queuing.strategy": "lifo"}');
\echo :SQLSTATE
-- Settings that run code or read files on the server (Kerberos kinit, OpenSSL engines, key
-- files) are a superuser's choice: a superuser may set them (091_security.pl shows a plain
-- role refused with 42501), and checking them runs nothing.
SELECT outbox.create_destination('kerberos_kafka', 'kafka', '{"bootstrap.servers": "b:9092",
    "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI",
    "sasl.kerberos.kinit.cmd": "touch /tmp/outbox_regress_kinit", "ssl.engine.location": "/tmp/x.so"}');
SELECT pg_stat_file('/tmp/outbox_regress_kinit', true) IS NULL AS kinit_did_not_run;
SELECT outbox.drop_destination('kerberos_kafka');
-- librdkafka's unsecured JWT is refused: librdkafka 2.0.2 crashes inside the worker (the whole
-- server goes through crash recovery) when it cannot parse "sasl.oauthbearer.config", and its
-- error quotes that config, a secret, to the log.
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092",
    "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
    "enable.sasl.oauthbearer.unsecure.jwt": true, "sasl.oauthbearer.config": "bogus=1"}');
\echo :SQLSTATE

--------------------------------------------------------------------------------------------------
-- Secret-bearing settings with bad values: the value never appears in the error.
--------------------------------------------------------------------------------------------------
SELECT outbox.create_destination('bad_kafka', 'kafka', '{"bootstrap.servers": "b:9092",
    "sasl.password": {"value": "MARKER-sasl-password"}, "ssl.key.password": ["MARKER-ssl-key"],
    "ssl.keystore.password": null, "sasl.oauthbearer.client.secret": ["MARKER-oidc"],
    "SASL.PASSWORD": "MARKER-wrong-case", "sasl.passwd": "MARKER-typo"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "ftp://user:MARKER-url-password@example.com/",
    "secret": ["whsec_c2VjcmV0", "whsec_MARKER!", {"k": "MARKER-object"}],
    "headers": {"authorization": "Bearer MARKER-token\r\n"}}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "http://user:MARKER-url-password@/hook"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "http://127.0.0.1:8080/", "secret": "MARKER-no-prefix"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_hook', 'webhook', '{"url": "http://127.0.0.1:8080/", "secret": "whsec_"}');
\echo :SQLSTATE
SELECT outbox.alter_destination('hook', '{"secret": "whsec_MARKER-alter!!", "timeout_ms": "soon"}');
\echo :SQLSTATE
SELECT outbox.alter_destination('orders', '{"sasl.password": ["MARKER-alter"], "linger.ms": "MARKER-not-secret"}');
\echo :SQLSTATE

--------------------------------------------------------------------------------------------------
-- Nothing above wrote or changed anything.
--------------------------------------------------------------------------------------------------
SELECT count(*) AS messages FROM outbox.messages;
SELECT count(*) AS dead_letters FROM outbox.dead_letters;
SELECT md5(string_agg(name || kind || config::text || paused, ',' ORDER BY name)) = :'destinations_before' AS destinations_unchanged
  FROM outbox.destinations;
SELECT name FROM outbox.destinations ORDER BY name;

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
