-- Destination kind mqtt (MQTT 5): configs checked at definition time (every problem in one
-- error, the password never echoed, nothing written), privileges for the files it reads, the
-- broker address rule for a role other than a superuser, the producer's topic rule, stats().
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

SELECT outbox.create_destination('sensors', 'mqtt',
    '{"host": "127.0.0.1", "port": 1883, "topic": "plant/readings", "qos": 2,
      "username": "outbox", "password": "s3cret", "ack_timeout": "2s", "ordering": "key"}');
SELECT outbox.create_destination('sensors_notopic', 'mqtt', '{"host": "mqtt.example.com", "tls": true, "tls_verify": false}');
SELECT name, kind, paused FROM outbox.destinations ORDER BY name;
SELECT destination, kind FROM outbox.stats() ORDER BY destination;

\echo :SQLSTATE
-- Every problem at once; the password is never quoted.
SELECT outbox.create_destination('bad_mqtt', 'mqtt',
    '{"host": "mqtt://u:hunter2@h:1883", "port": 70000, "topic": "plant/+/x", "qos": 0,
      "password": "hunter2", "retain": "yes", "keepalive": "1s", "session_expiry": "30d",
      "subject": "x", "cert_file": "/nonexistent/c.pem", "whatever": null}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_mqtt', 'mqtt', '{}');
\echo :SQLSTATE
SELECT outbox.create_destination('bad_mqtt', 'mqtt', '{"host": "h", "topic": "$SYS/broker"}');
\echo :SQLSTATE
SELECT count(*) AS destinations FROM outbox.destinations;

-- Files the server would read need a superuser or pg_read_server_files; brokers of a role
-- other than a superuser may not be at a literal loopback or private address.
CREATE ROLE outbox_regress_mqtt_manager;
GRANT USAGE ON SCHEMA outbox TO outbox_regress_mqtt_manager;
GRANT EXECUTE ON FUNCTION outbox.create_destination(text, text, jsonb),
    outbox.drop_destination(text, boolean) TO outbox_regress_mqtt_manager;
SET ROLE outbox_regress_mqtt_manager;
SELECT outbox.create_destination('files', 'mqtt', '{"host": "mqtt.example.com", "ca_file": "/etc/hostname"}');
\echo :SQLSTATE
SELECT outbox.create_destination('inside', 'mqtt', '{"host": "10.1.2.3", "topic": "t"}');
\echo :SQLSTATE
SELECT outbox.create_destination('inside', 'mqtt', '{"host": "localhost", "topic": "t"}');
\echo :SQLSTATE
SELECT outbox.create_destination('mine', 'mqtt', '{"host": "mqtt.example.com", "topic": "mine"}');
SELECT outbox.drop_destination('mine');
RESET ROLE;
REVOKE ALL ON SCHEMA outbox FROM outbox_regress_mqtt_manager;
REVOKE ALL ON FUNCTION outbox.create_destination(text, text, jsonb),
    outbox.drop_destination(text, boolean) FROM outbox_regress_mqtt_manager;
DROP ROLE outbox_regress_mqtt_manager;

-- Producers: a message needs a topic, its own or the destination's; no wildcards, no '$'.
INSERT INTO outbox.messages (destination, payload) VALUES ('sensors', '{}');
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('sensors', 'plant/ü/7', '{}');
SELECT destination, topic FROM outbox.messages ORDER BY id;
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, payload) VALUES ('sensors_notopic', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('sensors', 'plant/#', '{}');
\echo :SQLSTATE
INSERT INTO outbox.messages (destination, topic, payload) VALUES ('sensors', '$SYS/x', '{}');
\echo :SQLSTATE
SELECT count(*) AS queued FROM outbox.messages;

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
