-- Destination kind redis (Redis Streams): the config checked at definition time (every problem
-- in one error, the password never echoed, nothing written), privileges for the files it reads,
-- the server address rule for roles other than a superuser, the producer's stream rule.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

SELECT outbox.create_destination('rs', 'redis',
    '{"server": "127.0.0.1:6379", "stream": "orders", "user": "outbox", "password": "s3cret",
      "maxlen": 100000, "wait": {"replicas": 1, "timeout": "100ms"}, "ordering": "key"}');
SELECT outbox.create_destination('rs_nostream', 'redis', '{"server": "rediss://127.0.0.1:6380", "tls_verify": false}');
SELECT name, kind, paused FROM outbox.destinations ORDER BY name;
SELECT destination, kind FROM outbox.stats() ORDER BY destination;

-- Every problem at once; the server (it may hold a mistyped password) and the password are
-- never quoted.
SELECT outbox.create_destination('bad_redis', 'redis',
    '{"server": "redis://outbox:hunter2@cache:6379", "stream": "", "password": ["hunter2"],
      "user": "u", "database": -1, "maxlen": 0, "wait": {"replicas": 0, "after": 1},
      "ack_timeout": "1ms", "topic": "orders", "tls_verify": "no", "key_file": "/etc/hostname",
      "whatever": null}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_redis', 'redis', '{}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_redis', 'redis', '{"server": "h", "tls_verify": false, "wait": 2}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_redis', 'redis', '{"server": "rediss://h", "ca_file": "/nonexistent/ca.pem"}');
\echo :SQLSTATE
SELECT count(*) AS written FROM outbox.destinations WHERE name = 'bad_redis';

-- Files the server would read need a superuser or pg_read_server_files; literal internal
-- addresses need outbox.broker_allowed_networks (empty here) for other roles.
CREATE ROLE outbox_regress_redis_manager;
GRANT USAGE ON SCHEMA outbox TO outbox_regress_redis_manager;
GRANT EXECUTE ON FUNCTION outbox.create_destination(text, text, jsonb),
    outbox.alter_destination(text, jsonb), outbox.drop_destination(text, boolean)
    TO outbox_regress_redis_manager;
SET ROLE outbox_regress_redis_manager;
SELECT outbox.create_destination('files', 'redis', '{"server": "rediss://cache.example.com", "ca_file": "/etc/hostname"}');
\echo :SQLSTATE
SELECT outbox.create_destination('local', 'redis', '{"server": "127.0.0.1:6379", "stream": "s"}');
\echo :SQLSTATE
SELECT outbox.create_destination('local', 'redis', '{"server": "[::1]:6379", "stream": "s"}');
\echo :SQLSTATE
SELECT outbox.create_destination('local', 'redis', '{"server": "redis://10.1.2.3", "stream": "s"}');
\echo :SQLSTATE
-- Names are checked when the driver connects; public addresses are fine.
SELECT outbox.create_destination('mine', 'redis', '{"server": "cache.example.com:6379", "stream": "mine"}');
SELECT outbox.create_destination('mine6', 'redis', '{"server": "[2001:db8::1]:6379", "stream": "mine"}');
SELECT outbox.alter_destination('mine', '{"server": "192.168.0.10:6379"}');
\echo :SQLSTATE
RESET ROLE;
SELECT name FROM outbox.destinations WHERE name IN ('files', 'local', 'mine', 'mine6') ORDER BY name;
SELECT outbox.drop_destination('mine');
SELECT outbox.drop_destination('mine6');
REVOKE ALL ON SCHEMA outbox FROM outbox_regress_redis_manager;
REVOKE ALL ON FUNCTION outbox.create_destination(text, text, jsonb),
    outbox.alter_destination(text, jsonb), outbox.drop_destination(text, boolean)
    FROM outbox_regress_redis_manager;
DROP ROLE outbox_regress_redis_manager;

-- Producers: a redis message needs a stream, its own or the destination's (filled in at INSERT).
INSERT INTO outbox.messages (destination, payload) VALUES ('rs', '{}');
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('rs', 'tenant:42:orders', '{}');
SELECT destination, topic FROM outbox.messages ORDER BY id;
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES ('rs_nostream', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('rs', E'a\nb', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, key, payload) VALUES ('rs', 'tomb', NULL);
\echo :SQLSTATE
SELECT count(*) AS queued FROM outbox.messages;

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
