-- Destination kind sqs (Amazon SQS): configs checked at definition time (every problem in one
-- error, secrets never echoed, nothing written), the ca_file privilege, the literal host of a
-- non-superuser's config against outbox.broker_allowed_networks (empty in the regression
-- server), the producer's topic rule, stats().
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

SELECT outbox.create_destination('q', 'sqs',
    '{"queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders",
      "access_key_id": "AKIDEXAMPLE", "secret_access_key": "wJalrXUtnFEMI", "topic": "orders.created"}');
SELECT outbox.create_destination('f', 'sqs',
    '{"queue_url": "http://127.0.0.1:9324/000000000000/events.fifo", "region": "elasticmq",
      "access_key_id": "test", "secret_access_key": "test", "session_token": "tok",
      "group": "all", "ordering": "key", "timeout": "2s", "max_in_flight": 100,
      "tls_verify": false}');
SELECT name, kind FROM outbox.destinations ORDER BY name;
-- tls_verify shows where verification was switched off.
SELECT destination, kind, tls_verify FROM outbox.stats() ORDER BY destination;

\echo :SQLSTATE
-- Every problem at once; the secret access key and the session token are never quoted.
SELECT outbox.create_destination('bad', 'sqs',
    '{"queue_url": "ftp://h/1/q", "endpoint": "https://h/?a=b", "region": "EU West",
      "access_key_id": "a:b", "secret_access_key": "hunter2 hunter2", "session_token": "",
      "group": "", "topic": "", "tls_verify": "no", "max_in_flight": 0, "timeout": "1h",
      "colour": "blue"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad', 'sqs', '{}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad', 'sqs',
    '{"queue_url": "http://127.0.0.1:9324/000000000000/plain", "access_key_id": "a",
      "secret_access_key": "hunter2", "group": "g"}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad', 'sqs',
    '{"queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q", "access_key_id": "a",
      "secret_access_key": "hunter2", "ca_file": "/nonexistent/ca.pem"}');
\echo :SQLSTATE
SELECT count(*) FROM outbox.destinations WHERE name = 'bad';

-- A role other than a superuser: no literal loopback or private host, no file to read.
CREATE ROLE outbox_regress_sqs_tenant;
GRANT USAGE ON SCHEMA outbox TO outbox_regress_sqs_tenant;
GRANT EXECUTE ON FUNCTION outbox.create_destination(text, text, jsonb) TO outbox_regress_sqs_tenant;
SET ROLE outbox_regress_sqs_tenant;
SELECT outbox.create_destination('t', 'sqs',
    '{"queue_url": "http://127.0.0.1:9324/000000000000/q", "region": "elasticmq",
      "access_key_id": "a", "secret_access_key": "hunter2"}');
\echo :SQLSTATE
SELECT outbox.create_destination('t', 'sqs',
    '{"queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q", "endpoint": "http://10.1.2.3:4566",
      "access_key_id": "a", "secret_access_key": "hunter2"}');
\echo :SQLSTATE
SELECT outbox.create_destination('t', 'sqs',
    '{"queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q", "access_key_id": "a",
      "secret_access_key": "hunter2", "ca_file": "/etc/hostname"}');
\echo :SQLSTATE
SELECT outbox.create_destination('t', 'sqs',
    '{"queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q", "access_key_id": "a",
      "secret_access_key": "hunter2"}');
RESET ROLE;
SELECT name, kind FROM outbox.destinations ORDER BY name;

-- The topic: any 1..249 bytes of UTF-8 without control characters (it is the ce-type).
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('q', 'orders.paid', '{}');
INSERT INTO outbox.messages (destination, payload) VALUES ('q', '{}');
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('q', E'a\nb', '{}');
\echo :SQLSTATE
SELECT destination, topic FROM outbox.messages ORDER BY id;

DROP OWNED BY outbox_regress_sqs_tenant;  -- its grants
DROP ROLE outbox_regress_sqs_tenant;
SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
