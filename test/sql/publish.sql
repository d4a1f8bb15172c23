-- outbox.publish: one event to several destinations, one row each, one event_id.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never

SELECT outbox.create_destination('kafka_a', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "a"}');
SELECT outbox.create_destination('hook_b', 'webhook', '{"url": "http://127.0.0.1:8080/b"}');
SELECT outbox.create_destination('hook_c', 'webhook', '{"url": "http://127.0.0.1:8080/c"}');

SELECT outbox.publish(ARRAY['kafka_a', 'hook_b', 'hook_c'], 'order.created', '{"order": 7}',
                      key => 'customer-7', headers => '{"x-tenant": "t1"}') AS event_id \gset
SELECT destination, topic, key, payload, headers, event_id = :'event_id' AS same_event
  FROM outbox.messages ORDER BY id;
-- Without the optional arguments.
SELECT outbox.publish(ARRAY['hook_b'], 'ping', '{}') IS NOT NULL AS published;
SELECT count(*) AS rows, count(DISTINCT event_id) AS events FROM outbox.messages;

-- Refused: nothing is written.
SELECT outbox.publish(ARRAY[]::text[], 't', '{}');
\echo :SQLSTATE
SELECT outbox.publish(NULL, 't', '{}');
\echo :SQLSTATE
SELECT outbox.publish(ARRAY['hook_b', NULL], 't', '{}');
\echo :SQLSTATE
SELECT outbox.publish(ARRAY['hook_b', 'hook_b'], 't', '{}');
\echo :SQLSTATE
SELECT outbox.publish(ARRAY[['hook_b'], ['hook_c']], 't', '{}');
\echo :SQLSTATE
SELECT outbox.publish(ARRAY['hook_b', 'nope'], 't', '{}');
\echo :SQLSTATE
SELECT outbox.publish(ARRAY['hook_b'], 't', NULL);
\echo :SQLSTATE
SELECT outbox.publish(ARRAY['kafka_a'], 'bad topic', '{}');
\echo :SQLSTATE
SELECT outbox.publish(ARRAY['hook_b'], 't', '{}', headers => '{"n": 1}');
\echo :SQLSTATE
SELECT count(*) AS rows FROM outbox.messages;

-- Inside the producer's transaction: rolled back with it.
BEGIN;
SELECT outbox.publish(ARRAY['kafka_a', 'hook_b'], 'rolled.back', '{}') IS NOT NULL AS published;
ROLLBACK;
SELECT count(*) AS rows FROM outbox.messages WHERE topic = 'rolled.back';

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
