-- outbox 0.3.0: the transactional outbox, delivered from inside PostgreSQL.
-- Producers INSERT into outbox.messages in their own transaction; the outbox background workers
-- (started by the module, see docs/architecture.md) deliver the rows and record the outcome.

\echo Use "CREATE EXTENSION outbox" to load this file. \quit

--------------------------------------------------------------------------------------------------
-- Destinations: where messages go. Configs may hold secrets, so the table is readable only by
-- its owner; operators use outbox.stats().
--------------------------------------------------------------------------------------------------
CREATE TABLE outbox.destinations (
    name        text PRIMARY KEY,
    kind        text NOT NULL,
    config      jsonb NOT NULL,
    paused      boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    -- Set by the check trigger: whether a superuser wrote the config as it stands (an UPDATE
    -- of the config by anyone else clears it). Only then may a webhook's error texts quote
    -- response bodies, which can carry an internal service's secrets.
    created_by_superuser boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE outbox.destinations IS
    'Kafka clusters, webhook endpoints, RabbitMQ (amqp) and NATS JetStream (nats) servers messages are delivered to; change with outbox.create_destination/alter_destination/drop_destination';
COMMENT ON COLUMN outbox.destinations.created_by_superuser IS
    'a superuser wrote the config as it stands: webhook errors may quote response bodies';

-- Every row is validated on its way in, with the parser the worker uses (librdkafka itself for
-- Kafka properties); all problems are reported in one error.
CREATE FUNCTION outbox._destinations_check() RETURNS trigger
    AS 'MODULE_PATHNAME', 'outbox_destinations_check' LANGUAGE C;
CREATE TRIGGER destinations_check BEFORE INSERT OR UPDATE OF name, kind, config
    ON outbox.destinations FOR EACH ROW EXECUTE FUNCTION outbox._destinations_check();

-- Any change reaches every backend's copy of this table at commit, and wakes the workers.
CREATE FUNCTION outbox._destinations_changed() RETURNS trigger
    AS 'MODULE_PATHNAME', 'outbox_destinations_changed' LANGUAGE C;
CREATE TRIGGER destinations_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON outbox.destinations FOR EACH STATEMENT EXECUTE FUNCTION outbox._destinations_changed();
ALTER TABLE outbox.destinations ENABLE ALWAYS TRIGGER destinations_check;
ALTER TABLE outbox.destinations ENABLE ALWAYS TRIGGER destinations_changed;

--------------------------------------------------------------------------------------------------
-- Messages: the queue. Producers set the first group of columns; the relay owns the rest.
-- While a worker holds a row, available_at is the end of its lease: an expired lease makes the
-- row due again, so one index serves claims, retries and lease recovery.
--------------------------------------------------------------------------------------------------
CREATE FUNCTION outbox.uuid_generate_v7() RETURNS uuid
    AS 'MODULE_PATHNAME', 'outbox_uuid_generate_v7' LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION outbox.uuid_generate_v7() IS 'a new UUIDv7 (time ordered); the default event_id';

CREATE TABLE outbox.messages (
    id              bigint PRIMARY KEY,  -- assigned at INSERT from messages_id_seq
    event_id        uuid NOT NULL DEFAULT outbox.uuid_generate_v7(),
    destination     text NOT NULL,
    topic           text,
    key             text,
    payload         jsonb,
    payload_bytes   bytea,
    headers         jsonb,
    available_at    timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz,
    -- owned by the relay (set at INSERT; a producer that sets them is refused)
    created_at      timestamptz NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    lease_token     bigint,
    last_error      text,
    first_failed_at timestamptz,
    -- ordering = key: the message takes part in its key's order (it has a key, and its
    -- destination orders by key); see outbox._order_key
    order_key       bigint,
    -- compaction = key: the message supersedes, and is superseded by, the queued messages of its
    -- key (it has a key, and its destination compacts by key); NULL otherwise
    compacts        boolean
);
COMMENT ON TABLE outbox.messages IS
    'messages waiting for delivery; INSERT here (or call outbox.publish) in the transaction that makes the business change';
-- Not an identity column: OVERRIDING SYSTEM VALUE needs only INSERT, and a producer that chose
-- ids could collide with queued or dead-lettered messages. The insert check numbers every row.
CREATE SEQUENCE outbox.messages_id_seq OWNED BY outbox.messages.id;
CREATE INDEX messages_due ON outbox.messages (destination, available_at, id) WHERE order_key IS NULL;
-- Per-key ordering: the messages of each key in id order; the first one of a key is its head,
-- the only one that may be claimed. A claim finds it with one descent from the key's floor
-- (outbox.ordered_keys), never crossing the entries of the key's delivered messages.
CREATE INDEX messages_key_order ON outbox.messages (order_key, id) WHERE order_key IS NOT NULL;
-- Compaction by key: the queued messages of a key that a new one supersedes (only the rows of
-- compacting destinations are in it).
CREATE INDEX messages_compaction ON outbox.messages (destination, key) WHERE compacts;
-- A queue: every row is deleted soon after it is inserted. Autovacuum comes for it after 10,000
-- dead rows (not a fraction of the table), at full speed, so that the index entries of delivered
-- messages do not pile up for long (claims start past them meanwhile: src/pg/queue.cpp).
ALTER TABLE outbox.messages SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 100000);

-- Per-key ordering: one row per (destination, order key) that has or recently had queued
-- messages. Producers of a key take turns on its row's lock (the insert check upserts it before
-- it numbers the message, and holds it until commit), so ids follow commit order within a key.
-- The worker reads these rows to find the keys whose head is due and where each key's messages
-- begin; it claims messages of a key only while its transaction holds the key's row FOR KEY
-- SHARE (which producers' turns do not conflict with), and never waits for a lock. The rules
-- every writer keeps (src/pg/key_order.cpp, src/pg/queue.cpp):
--   floor   no queued message of the key has a lower id; lowered (with floor_version + 1) only
--           by a transaction that puts a message back with its old id (requeue, restore,
--           ordering turned on), which takes the row FOR UPDATE before it writes it (so it
--           waits for the workers holding the key, and they skip the key until it ends); raised
--           by the worker past a head it removed, only while floor_version is the one it read
--           when it found that head.
--   due_at  the key's head cannot be claimed before this ('infinity': no queued message);
--           producers lower it, the worker sets it from what it saw of the head, only while
--           version (bumped by every write) is the one it read.
-- Not kept by pg_dump: the insert check rebuilds it as the queue is restored.
CREATE TABLE outbox.ordered_keys (
    destination   text NOT NULL,
    order_key     bigint NOT NULL,
    key           text NOT NULL,     -- a key of this order (keys whose hashes collide share one)
    floor         bigint NOT NULL,
    due_at        timestamptz NOT NULL,
    floor_version bigint NOT NULL DEFAULT 0,
    version       bigint NOT NULL DEFAULT 0,
    idle_since    timestamptz,       -- when due_at became 'infinity'; swept after a while
    PRIMARY KEY (destination, order_key)
);
COMMENT ON TABLE outbox.ordered_keys IS
    'per-key ordering: the keys of ordering = key destinations, where their queued messages begin and when their head is due; kept by outbox';
CREATE INDEX ordered_keys_due ON outbox.ordered_keys (destination, due_at, order_key);
-- Written once per key per worker transaction, mostly without changing an indexed column: room
-- on each page for those updates to stay there (HOT, pruned in place), and autovacuum soon.
ALTER TABLE outbox.ordered_keys SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);

-- The destination must exist (checked against a per-backend cache, not a foreign key), the
-- payload must be deliverable, and the workers are woken when the transaction commits.
CREATE FUNCTION outbox._messages_check() RETURNS trigger
    AS 'MODULE_PATHNAME', 'outbox_messages_check' LANGUAGE C;
CREATE TRIGGER messages_check BEFORE INSERT ON outbox.messages
    FOR EACH ROW EXECUTE FUNCTION outbox._messages_check();
-- Fires under session_replication_role = replica too: nothing unchecked enters the queue.
ALTER TABLE outbox.messages ENABLE ALWAYS TRIGGER messages_check;

--------------------------------------------------------------------------------------------------
-- Dead letters: messages that stopped, why and when, with everything needed to requeue them.
--------------------------------------------------------------------------------------------------
CREATE TABLE outbox.dead_letters (
    id              bigint PRIMARY KEY,
    event_id        uuid NOT NULL,
    destination     text NOT NULL,
    topic           text,
    key             text,
    payload         jsonb,
    payload_bytes   bytea,
    headers         jsonb,
    expires_at      timestamptz,
    created_at      timestamptz NOT NULL,
    attempts        integer NOT NULL,
    reason          text NOT NULL
        CHECK (reason IN ('rejected', 'max_attempts', 'expired', 'poison', 'dropped')),
    last_error      text NOT NULL,
    first_failed_at timestamptz,
    failed_at       timestamptz NOT NULL DEFAULT now(),
    -- set by outbox.skip(): with ordering = key and on_dead = block, this dead letter no longer
    -- holds back the later messages of its key
    skipped_at      timestamptz
);
COMMENT ON TABLE outbox.dead_letters IS
    'messages that will not be delivered without help; bring them back with outbox.requeue';
CREATE INDEX dead_letters_destination ON outbox.dead_letters (destination, failed_at);
CREATE INDEX dead_letters_key_order ON outbox.dead_letters (destination, key, id) WHERE key IS NOT NULL;

--------------------------------------------------------------------------------------------------
-- Archive: delivered messages, kept for outbox.retention when it is above 0 (swept by the
-- workers in bounded batches).
--------------------------------------------------------------------------------------------------
CREATE TABLE outbox.archive (
    id              bigint PRIMARY KEY,
    event_id        uuid NOT NULL,
    destination     text NOT NULL,
    topic           text,
    key             text,
    payload         jsonb,
    payload_bytes   bytea,
    headers         jsonb,
    created_at      timestamptz NOT NULL,
    attempts        integer NOT NULL,
    delivered_at    timestamptz NOT NULL DEFAULT now(),
    -- why it left the queue: delivered, or superseded by a newer message of its key
    -- (compaction = key; delivered_at is then when it was superseded)
    reason          text NOT NULL DEFAULT 'delivered'
        CONSTRAINT archive_reason_check CHECK (reason IN ('delivered', 'superseded'))
);
COMMENT ON TABLE outbox.archive IS
    'delivered messages, kept for outbox.retention (0: not kept), and superseded ones (compaction = key)';
CREATE INDEX archive_delivered_at ON outbox.archive (delivered_at);

-- pg_dump keeps the contents of extension tables only when told to.
SELECT pg_catalog.pg_extension_config_dump('outbox.destinations', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.messages', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.messages_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.dead_letters', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.archive', '');

--------------------------------------------------------------------------------------------------
-- Producer API
--------------------------------------------------------------------------------------------------
-- outbox.internal_call: the insert check's errors carry no CONTEXT (it would show this
-- function's INSERT, not anything the caller wrote).
CREATE FUNCTION outbox.publish(destinations text[], topic text, payload jsonb,
                               key text DEFAULT NULL, headers jsonb DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET outbox.internal_call = on AS $$
DECLARE
    event uuid;
BEGIN
    IF destinations IS NULL OR cardinality(destinations) = 0 THEN
        RAISE EXCEPTION 'outbox.publish needs at least one destination'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass an array of destination names, for example ARRAY[''orders''].';
    END IF;
    IF array_ndims(destinations) > 1 THEN
        RAISE EXCEPTION 'outbox.publish destinations must be a one-dimensional array'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF array_position(destinations, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'outbox.publish destinations contains NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF (SELECT count(DISTINCT d) FROM unnest(destinations) AS d) <> cardinality(destinations) THEN
        RAISE EXCEPTION 'outbox.publish destinations names a destination more than once'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Each destination receives the event once; list it once.';
    END IF;
    event := outbox.uuid_generate_v7();
    INSERT INTO outbox.messages (event_id, destination, topic, key, payload, headers)
    SELECT event, u.d, publish.topic, publish.key, publish.payload, publish.headers
      FROM unnest(destinations) WITH ORDINALITY AS u(d, n)
     ORDER BY u.n;
    RETURN event;
END
$$;
COMMENT ON FUNCTION outbox.publish(text[], text, jsonb, text, jsonb) IS
    'queue one event for several destinations: one row each, one event_id';

--------------------------------------------------------------------------------------------------
-- Destination management (SECURITY DEFINER: callers need EXECUTE, not access to the table)
--------------------------------------------------------------------------------------------------
CREATE FUNCTION outbox.create_destination(name text, kind text, config jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- The calling statement carries the config and its secrets: an error raised in here must not
-- log it (log_min_error_statement is back to its setting when the transaction aborts).
SET log_min_error_statement = panic AS $$
BEGIN
    -- created_by_superuser: asked for here, granted by the check trigger only to a superuser.
    INSERT INTO outbox.destinations (name, kind, config, created_by_superuser)
    VALUES (create_destination.name, create_destination.kind, create_destination.config, true)
    ON CONFLICT ON CONSTRAINT destinations_pkey DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'destination "%" already exists', create_destination.name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with outbox.alter_destination(), or drop it first.';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.create_destination(text, text, jsonb) IS
    'define a kafka, webhook, amqp, nats, redis, mqtt or sqs destination; the config is checked now, every problem reported at once';

CREATE FUNCTION outbox.alter_destination(name text, config jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- The calling statement carries the config and its secrets: an error raised in here must not
-- log it (log_min_error_statement is back to its setting when the transaction aborts).
SET log_min_error_statement = panic AS $$
DECLARE
    new_config jsonb;
BEGIN
    IF config IS NULL OR jsonb_typeof(config) <> 'object' THEN
        RAISE EXCEPTION 'outbox.alter_destination needs a JSON object of settings to change'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Settings given are replaced, settings given as null are removed, others are kept.';
    END IF;
    UPDATE outbox.destinations AS d
       SET config = jsonb_strip_nulls(d.config || alter_destination.config), updated_at = now()
     WHERE d.name = alter_destination.name
    RETURNING d.config INTO new_config;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'destination "%" does not exist', alter_destination.name
            USING ERRCODE = 'undefined_object';
    END IF;
    -- Queued messages follow the new ordering: without it they all go at once; with it the
    -- messages of a key go in id order from now on.
    IF new_config->>'ordering' IS DISTINCT FROM 'key' THEN
        UPDATE outbox.messages AS m SET order_key = NULL
         WHERE m.destination = alter_destination.name AND m.order_key IS NOT NULL;
        DELETE FROM outbox.ordered_keys AS k WHERE k.destination = alter_destination.name;
    ELSE
        -- A message given its order key now may lie below its key's floor: the floor goes down
        -- with floor_version + 1, the key's row taken FOR UPDATE first (see
        -- outbox.ordered_keys), as a requeue does. (Rows exist only if ordering was on.)
        PERFORM FROM outbox.ordered_keys AS k
         WHERE k.destination = alter_destination.name
           AND k.order_key IN (SELECT outbox._order_key(m.destination, m.key)
                                 FROM outbox.messages AS m
                                WHERE m.destination = alter_destination.name
                                  AND m.key IS NOT NULL AND m.order_key IS NULL)
           FOR UPDATE OF k;
        WITH ordered AS (
            UPDATE outbox.messages AS m SET order_key = outbox._order_key(m.destination, m.key)
             WHERE m.destination = alter_destination.name AND m.key IS NOT NULL
               AND m.order_key IS NULL
            RETURNING m.order_key, m.key, m.id)
        INSERT INTO outbox.ordered_keys AS k (destination, order_key, key, floor, due_at)
        SELECT alter_destination.name, o.order_key, min(o.key), min(o.id), now()
          FROM ordered AS o GROUP BY o.order_key
        ON CONFLICT (destination, order_key) DO UPDATE
           SET floor = least(k.floor, excluded.floor), floor_version = k.floor_version + 1,
               due_at = least(k.due_at, excluded.due_at), version = k.version + 1;
        -- on_dead may have changed: keys held back are looked at again now.
        UPDATE outbox.ordered_keys AS k SET due_at = now(), version = k.version + 1
         WHERE k.destination = alter_destination.name AND k.due_at > now()
           AND k.due_at < 'infinity';
    END IF;
    -- Keys a dead letter held may go on (on_dead = skip), or messages changed queues.
    PERFORM outbox.wake();
END
$$;
COMMENT ON FUNCTION outbox.alter_destination(text, jsonb) IS
    'change settings of a destination: given keys replace, null removes, the rest is kept';

CREATE FUNCTION outbox.drop_destination(name text, force boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pending bigint;
BEGIN
    -- Wait for producers in flight and hold new ones until commit, so no message for this
    -- destination can appear after it was counted.
    LOCK TABLE outbox.messages IN SHARE MODE;
    PERFORM FROM outbox.destinations AS d WHERE d.name = drop_destination.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'destination "%" does not exist', drop_destination.name
            USING ERRCODE = 'undefined_object';
    END IF;
    SELECT count(*) INTO pending FROM outbox.messages AS m WHERE m.destination = drop_destination.name;
    IF pending > 0 AND NOT coalesce(force, false) THEN
        RAISE EXCEPTION 'destination "%" has % undelivered messages', drop_destination.name, pending
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'Wait for them to be delivered, or pass force => true to move them to outbox.dead_letters.';
    END IF;
    IF pending > 0 THEN
        WITH moved AS (
            DELETE FROM outbox.messages AS m WHERE m.destination = drop_destination.name RETURNING m.*
        )
        INSERT INTO outbox.dead_letters (id, event_id, destination, topic, key, payload,
                                         payload_bytes, headers, expires_at, created_at, attempts,
                                         reason, last_error, first_failed_at)
        SELECT id, event_id, destination, topic, key, payload, payload_bytes, headers, expires_at,
               created_at, attempts, 'dropped', 'destination dropped with force => true',
               first_failed_at
          FROM moved;
        RAISE NOTICE '% undelivered messages of destination "%" moved to outbox.dead_letters',
            pending, drop_destination.name;
    END IF;
    DELETE FROM outbox.ordered_keys AS k WHERE k.destination = drop_destination.name;
    DELETE FROM outbox.destinations AS d WHERE d.name = drop_destination.name;
END
$$;
COMMENT ON FUNCTION outbox.drop_destination(text, boolean) IS
    'remove a destination; refused while it has undelivered messages unless force => true';

CREATE FUNCTION outbox.pause(name text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    found_any boolean;
BEGIN
    UPDATE outbox.destinations AS d SET paused = true, updated_at = now() WHERE d.name = pause.name;
    found_any := FOUND;
    -- A subscription of that name too (the inbox): its partitions stop being consumed.
    UPDATE outbox.inbox_subscriptions AS s SET paused = true, updated_at = now() WHERE s.name = pause.name;
    IF NOT (found_any OR FOUND) THEN
        RAISE EXCEPTION 'destination or subscription "%" does not exist', pause.name USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.pause(text) IS 'stop delivering to a destination (messages keep queueing), or consuming for a subscription';

CREATE FUNCTION outbox.resume(name text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    found_any boolean;
BEGIN
    UPDATE outbox.destinations AS d SET paused = false, updated_at = now() WHERE d.name = resume.name;
    found_any := FOUND;
    UPDATE outbox.inbox_subscriptions AS s SET paused = false, updated_at = now() WHERE s.name = resume.name;
    IF NOT (found_any OR FOUND) THEN
        RAISE EXCEPTION 'destination or subscription "%" does not exist', resume.name USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.resume(text) IS 'resume delivery to a paused destination, or consumption for a paused subscription';

--------------------------------------------------------------------------------------------------
-- Dead letters back to the queue. A requeued message keeps its id (and so its place in per-key
-- order) and event_id, and gets a fresh retry budget; expires_at is cleared, since an operator
-- asked for it to be delivered.
--------------------------------------------------------------------------------------------------
CREATE FUNCTION outbox.requeue(ids bigint[])
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET outbox.internal_call = on AS $$
DECLARE
    moved_count bigint;
    missing text;
    deadlocks int := 0;
BEGIN
    IF ids IS NULL THEN
        RAISE EXCEPTION 'outbox.requeue needs an array of dead letter ids'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT dl.destination INTO missing FROM outbox.dead_letters AS dl
     WHERE dl.id = ANY (ids)
       AND NOT EXISTS (SELECT FROM outbox.destinations AS d WHERE d.name = dl.destination)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'outbox destination "%" does not exist', missing
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'Create it with outbox.create_destination(), or check the name against outbox.destinations.';
    END IF;
    -- The rows keep their id: only the owner of outbox.messages (this function's) may insert
    -- rows that carry one (src/pg/producer.cpp).
    --
    -- An ordered key's row is taken FOR UPDATE, key after key, and a worker's FOR KEY SHARE
    -- SKIP LOCKED can wait on it all the same: PostgreSQL locks the newer versions of a row a
    -- producer has just updated without SKIP LOCKED. A worker that holds another key of this
    -- call then closes a deadlock; PostgreSQL aborts this call's side (the worker waits longer
    -- before it looks for deadlocks), and the call starts again from where this block began,
    -- after a pause that lets the worker take the key and finish its batch (about 0.3 s).
    LOOP
        BEGIN
            WITH moved AS (
                DELETE FROM outbox.dead_letters AS dl WHERE dl.id = ANY (ids) RETURNING dl.*
            )
            INSERT INTO outbox.messages (id, event_id, destination, topic, key, payload,
                                         payload_bytes, headers, created_at)
            SELECT moved.id, moved.event_id, moved.destination, moved.topic, moved.key,
                   moved.payload, moved.payload_bytes, moved.headers, moved.created_at
              FROM moved ORDER BY moved.id;
            GET DIAGNOSTICS moved_count = ROW_COUNT;
            RETURN moved_count;
        EXCEPTION WHEN deadlock_detected THEN
            deadlocks := deadlocks + 1;
            IF deadlocks >= 5 THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.05 * deadlocks);
        END;
    END LOOP;
END
$$;
COMMENT ON FUNCTION outbox.requeue(bigint[]) IS
    'move the given dead letters back to the queue; returns how many were moved';

CREATE FUNCTION outbox.requeue(destination text, failed_before timestamptz DEFAULT now())
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF failed_before IS NULL THEN
        RAISE EXCEPTION 'outbox.requeue failed_before must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM FROM outbox.destinations AS d WHERE d.name = requeue.destination;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'destination "%" does not exist', requeue.destination
            USING ERRCODE = 'undefined_object',
                  HINT = 'Dead letters of a dropped destination can be requeued after creating it again.';
    END IF;
    RETURN outbox.requeue(ARRAY(
        SELECT dl.id FROM outbox.dead_letters AS dl
         WHERE dl.destination = requeue.destination AND dl.failed_at < failed_before));
END
$$;
COMMENT ON FUNCTION outbox.requeue(text, timestamptz) IS
    'move the dead letters of a destination that failed before a time back to the queue';

-- Dead letters are never removed automatically; this removes old ones on request.
CREATE FUNCTION outbox.purge_dead_letters(older_than interval, destination text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    purged bigint;
BEGIN
    IF older_than IS NULL OR older_than < interval '0' THEN
        RAISE EXCEPTION 'outbox.purge_dead_letters needs an age of zero or more'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'For example: SELECT outbox.purge_dead_letters(interval ''30 days'');';
    END IF;
    -- A purged dead letter no longer holds its key (ordering = key, on_dead = block): the key's
    -- head is looked at again now.
    WITH gone AS (
        DELETE FROM outbox.dead_letters AS dl
         WHERE dl.failed_at < now() - older_than
           AND (purge_dead_letters.destination IS NULL OR dl.destination = purge_dead_letters.destination)
        RETURNING dl.destination, dl.key
    ), released AS (
        UPDATE outbox.ordered_keys AS k SET due_at = least(k.due_at, now()), version = k.version + 1
          FROM (SELECT DISTINCT g.destination, g.key FROM gone AS g WHERE g.key IS NOT NULL) AS g
         WHERE k.destination = g.destination AND k.order_key = outbox._order_key(g.destination, g.key)
    )
    SELECT count(*) INTO purged FROM gone;
    RETURN purged;
END
$$;
COMMENT ON FUNCTION outbox.purge_dead_letters(interval, text) IS
    'delete dead letters that failed longer ago than older_than (of one destination, or all); returns how many';

--------------------------------------------------------------------------------------------------
-- Per-key ordering: what is held back, and letting a key go on without its dead letter.
--------------------------------------------------------------------------------------------------
-- The order key of a message of (destination, key): the destination's hash in the high half,
-- the key's in the low half, so that one destination's keys are one range of
-- messages_key_order.
CREATE FUNCTION outbox._order_key(destination text, key text) RETURNS bigint
    AS 'MODULE_PATHNAME', 'outbox_order_key' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
-- The head of each key of a destination (its first queued message), found as a claim finds it:
-- one descent of messages_key_order per key, from the key's floor. Keys without queued
-- messages ('infinity') are not looked at.
CREATE FUNCTION outbox._key_heads(destination text)
RETURNS TABLE (order_key bigint, id bigint, tid tid) LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT k.order_key, h.id, h.ctid
      FROM outbox.ordered_keys AS k
     CROSS JOIN LATERAL (
           SELECT m.id, m.ctid FROM outbox.messages AS m
            WHERE m.order_key = k.order_key AND m.id >= k.floor AND m.destination = k.destination
            ORDER BY m.id LIMIT 1) AS h
     WHERE k.destination = _key_heads.destination AND k.due_at < 'infinity'
$$;

CREATE FUNCTION outbox.skip(id bigint)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    skipped outbox.dead_letters;
BEGIN
    IF id IS NULL THEN
        RAISE EXCEPTION 'outbox.skip needs the id of a dead letter' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    UPDATE outbox.dead_letters AS dl SET skipped_at = now()
     WHERE dl.id = skip.id AND dl.skipped_at IS NULL
    RETURNING dl.* INTO skipped;
    IF FOUND THEN
        -- the key's next message may go now
        UPDATE outbox.ordered_keys AS k SET due_at = least(k.due_at, now()), version = k.version + 1
         WHERE k.destination = skipped.destination
           AND k.order_key = outbox._order_key(skipped.destination, skipped.key);
        PERFORM outbox.wake();
    ELSE
        PERFORM FROM outbox.dead_letters AS dl WHERE dl.id = skip.id;
        IF FOUND THEN
            RAISE NOTICE 'dead letter % was already skipped', skip.id;
        ELSE
            RAISE EXCEPTION 'dead letter % does not exist', skip.id
                USING ERRCODE = 'undefined_object',
                      HINT = 'outbox.dead_letters lists them; a requeued message is no longer a dead letter.';
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.skip(bigint) IS
    'let the later messages of a dead letter''s key go on without it (ordering = key, on_dead = block); the dead letter stays';

-- The keys whose head message is failing: retrying, or dead-lettered while the destination's
-- on_dead is block. `waiting` counts the messages held back behind it.
CREATE FUNCTION outbox.blocked_keys(destination text)
RETURNS TABLE (key text, blocked_by bigint, reason text, since timestamptz, last_error text,
               waiting bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH dest AS (
        SELECT d.name, coalesce(d.config->>'on_dead', 'block') = 'block' AS block
          FROM outbox.destinations AS d
         WHERE d.name = blocked_keys.destination AND d.config->>'ordering' = 'key'
    ), heads AS (
        SELECT m.key, m.id, 'retrying'::text AS reason, m.first_failed_at AS since, m.last_error,
               m.order_key
          FROM dest, outbox._key_heads(dest.name) AS h
          JOIN outbox.messages AS m ON m.ctid = h.tid
         WHERE m.attempts > 0 AND m.lease_token IS NULL AND m.available_at > now()
        UNION ALL
        (SELECT DISTINCT ON (dl.key) dl.key, dl.id, 'dead:' || dl.reason, dl.failed_at,
                dl.last_error, outbox._order_key(dl.destination, dl.key)
           FROM outbox.dead_letters AS dl, dest
          WHERE dest.block AND dl.destination = dest.name AND dl.key IS NOT NULL
            AND dl.skipped_at IS NULL AND dl.reason IN ('rejected', 'max_attempts', 'poison')
          ORDER BY dl.key, dl.id)
    )
    SELECT h.key, h.id, h.reason, h.since, h.last_error, w.n
      FROM heads AS h
     CROSS JOIN LATERAL (
           SELECT count(*) AS n FROM outbox.messages AS w
            WHERE w.order_key = h.order_key AND w.id > h.id
              AND w.destination = blocked_keys.destination AND w.key = h.key) AS w
     WHERE h.reason = 'retrying' OR w.n > 0
     ORDER BY h.since, h.key
$$;
COMMENT ON FUNCTION outbox.blocked_keys(text) IS
    'keys of an ordering = key destination held back by a failing head message, and how many messages wait behind it';

--------------------------------------------------------------------------------------------------
-- Visibility
--------------------------------------------------------------------------------------------------
CREATE FUNCTION outbox._destination_counters(
    OUT destination text, OUT delivered bigint, OUT failed bigint, OUT dead bigint,
    OUT expired bigint, OUT deferred bigint, OUT last_success_at timestamptz,
    OUT last_error text, OUT stats_reset timestamptz, OUT refused bigint,
    OUT superseded bigint, OUT recovered bigint, OUT transactions_open bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'outbox_destination_counters' LANGUAGE C;

-- The size of each queue, kept exact at every commit (see src/pg/queue_counts.cpp): stats()
-- must answer in milliseconds on a backlog of millions. The worker counts its own changes;
-- every other write to outbox.messages goes through these triggers.
CREATE FUNCTION outbox._messages_changed() RETURNS trigger
    AS 'MODULE_PATHNAME', 'outbox_messages_changed' LANGUAGE C;
CREATE TRIGGER messages_changed AFTER DELETE OR UPDATE OF destination
    ON outbox.messages FOR EACH ROW EXECUTE FUNCTION outbox._messages_changed();
CREATE TRIGGER messages_truncated AFTER TRUNCATE
    ON outbox.messages FOR EACH STATEMENT EXECUTE FUNCTION outbox._messages_changed();
-- What was actually inserted (not what an ON CONFLICT clause or another trigger left out);
-- ALWAYS: an insert applied as a replica counts too (the worker itself never inserts).
CREATE FUNCTION outbox._messages_inserted() RETURNS trigger
    AS 'MODULE_PATHNAME', 'outbox_messages_inserted' LANGUAGE C;
CREATE TRIGGER messages_inserted AFTER INSERT ON outbox.messages
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._messages_inserted();
ALTER TABLE outbox.messages ENABLE ALWAYS TRIGGER messages_inserted;
-- Per destination: the queue size, the size the counts started from, and since then:
-- produced, removed (deleted by SQL), delivered, dead-lettered, expired, superseded.
CREATE FUNCTION outbox._queue_counts(
    OUT destination text, OUT queued bigint, OUT initial bigint,
    OUT produced bigint, OUT removed bigint, OUT delivered bigint, OUT dead_lettered bigint,
    OUT expired bigint, OUT superseded bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'outbox_queue_counts' LANGUAGE C;
CREATE FUNCTION outbox.recount() RETURNS void
    AS 'MODULE_PATHNAME', 'outbox_recount' LANGUAGE C;
COMMENT ON FUNCTION outbox.recount() IS
    'count the queues again on the next outbox.stats() (after writes that skipped the outbox triggers)';

-- Issue 35 (item 6): why no worker delivers this database's messages, or NULL: the database is
-- not in outbox.databases (src/pg/served.cpp). stats() shows it as last_error of the
-- destinations with queued messages.
CREATE FUNCTION outbox._not_served_reason() RETURNS text
    AS 'MODULE_PATHNAME', 'outbox_not_served_reason' LANGUAGE C STABLE;

-- Gauges: queued from the kept counts; what is leased, retrying or scheduled from the part of
-- the claim index that is not due yet (small) and, with ordering = key, from the head of each
-- key (outbox._key_heads); waiting is what a key's head holds back while it cannot go
-- (retrying, dead-lettered with on_dead = block, or scheduled for later); pending is the rest.
-- Nothing here reads the whole queue. The heads of an empty queue are not walked (NULL instead
-- of its name): after a big ordered drain, until VACUUM, that walk would still cross every
-- delivered message's entry, fetching each from the heap the first time. (A key is blocked only
-- while messages wait behind its head.)
CREATE FUNCTION outbox.stats()
RETURNS TABLE (destination text, kind text, paused boolean, pending bigint, in_flight bigint,
               retrying bigint, dead bigint, oldest_pending_age interval, delivered_total bigint,
               failed_total bigint, last_error text, last_success_at timestamptz,
               scheduled bigint, dead_lettered_total bigint, expired_total bigint,
               deferred_total bigint, stats_reset timestamptz, blocked_keys bigint,
               waiting bigint, tls_verify boolean, queue_dead_tuples bigint,
               queue_last_autovacuum timestamptz, max_pending bigint, refused_total bigint,
               superseded_total bigint, delivery text, transactions_open bigint,
               recovered_total bigint)
-- enable_seqscan off: right after a bulk load, before ANALYZE, the planner believes the queue is
-- empty and would scan all of it; every part of this query has an index to use. jit off: the
-- estimates can pass jit_above_cost, and compiling takes far longer than running (~1 ms).
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off SET jit = off AS $$
    WITH counts AS (SELECT * FROM outbox._queue_counts())
    SELECT d.name, d.kind, d.paused,
           greatest(coalesce(q.queued, 0) - coalesce(blocked.waiting + keyed.behind_scheduled, 0)
                    - ahead.in_flight - ahead.retrying - ahead.scheduled
                    - coalesce(keyed.in_flight, 0) - coalesce(keyed.retrying, 0)
                    - coalesce(keyed.scheduled, 0), 0),
           ahead.in_flight + coalesce(keyed.in_flight, 0),
           ahead.retrying + coalesce(keyed.retrying, 0), dead.n,
           now() - least(head.created_at, ahead.oldest, keyed.oldest),
           coalesce(c.delivered, 0), coalesce(c.failed, 0),
           coalesce(CASE WHEN coalesce(q.queued, 0) > 0 THEN outbox._not_served_reason() END,
                    c.last_error),
           c.last_success_at,
           ahead.scheduled + coalesce(keyed.scheduled, 0), coalesce(c.dead, 0),
           coalesce(c.expired, 0), coalesce(c.deferred, 0), c.stats_reset,
           blocked.keys, coalesce(blocked.waiting + keyed.behind_scheduled, 0),
           -- false only where TLS certificate verification was switched off explicitly: every
           -- kind but kafka (librdkafka's property) names it tls_verify (redis, mqtt, sqs: issue 42)
           CASE WHEN d.kind <> 'kafka'
                THEN coalesce((d.config->>'tls_verify')::boolean, true)
                ELSE coalesce((d.config->>'enable.ssl.certificate.verification')::boolean, true) END,
           t.n_dead_tup, t.last_autovacuum,
           (d.config->>'max_pending')::bigint, coalesce(c.refused, 0),
           coalesce(c.superseded, 0),
           -- issue 41: "delivery", and its exactly-once transactions
           coalesce(d.config->>'delivery', 'at_least_once'), coalesce(c.transactions_open, 0),
           coalesce(c.recovered, 0)
      FROM outbox.destinations AS d
      LEFT JOIN counts AS q ON q.destination = d.name
      CROSS JOIN LATERAL (
          SELECT count(*) FILTER (WHERE m.lease_token IS NOT NULL) AS in_flight,
                 count(*) FILTER (WHERE m.lease_token IS NULL AND m.attempts > 0) AS retrying,
                 count(*) FILTER (WHERE m.lease_token IS NULL AND m.attempts = 0) AS scheduled,
                 min(m.created_at) AS oldest
            FROM outbox.messages AS m
           WHERE m.destination = d.name AND m.order_key IS NULL
             AND m.available_at > now()) AS ahead
      LEFT JOIN LATERAL (
          SELECT m.created_at FROM outbox.messages AS m
           WHERE m.destination = d.name AND m.order_key IS NULL
           ORDER BY m.available_at, m.id LIMIT 1) AS head ON true
      -- ordering = key: the head of each key (the messages behind a head are pending or
      -- waiting, never in flight)
      LEFT JOIN LATERAL (
          SELECT count(*) FILTER (WHERE m.lease_token IS NOT NULL AND m.available_at > now())
                     AS in_flight,
                 count(*) FILTER (WHERE m.lease_token IS NULL AND m.attempts > 0
                                    AND m.available_at > now()) AS retrying,
                 count(*) FILTER (WHERE m.lease_token IS NULL AND m.attempts = 0
                                    AND m.available_at > now()) AS scheduled,
                 min(m.created_at) AS oldest,
                 coalesce(sum(behind.n), 0) AS behind_scheduled
            FROM outbox._key_heads(CASE WHEN coalesce(q.queued, 0) > 0 THEN d.name END) AS h
            JOIN outbox.messages AS m ON m.ctid = h.tid
            LEFT JOIN LATERAL (
                SELECT count(*) AS n FROM outbox.messages AS w
                 WHERE m.lease_token IS NULL AND m.attempts = 0 AND m.available_at > now()
                   AND w.order_key = m.order_key AND w.id > m.id) AS behind ON true) AS keyed
        ON d.config->>'ordering' = 'key'
      LEFT JOIN LATERAL (
          SELECT count(*) AS keys, coalesce(sum(b.waiting), 0) AS waiting
            FROM outbox.blocked_keys(CASE WHEN coalesce(q.queued, 0) > 0 THEN d.name END) AS b)
          AS blocked
        ON d.config->>'ordering' = 'key'
      CROSS JOIN LATERAL (
          SELECT count(*) AS n FROM outbox.dead_letters AS dl WHERE dl.destination = d.name) AS dead
      LEFT JOIN outbox._destination_counters() AS c ON c.destination = d.name
      LEFT JOIN pg_stat_all_tables AS t ON t.relid = 'outbox.messages'::regclass
     ORDER BY d.name
$$;
COMMENT ON FUNCTION outbox.stats() IS
    'one row per destination: queue gauges kept exact at commit, counters since server start';

-- Every message accounted for since server start (as outbox.stats() counts; since CREATE
-- EXTENSION for an extension created again after the start), `initial` being the queue then:
-- initial + produced = delivered + dead_lettered + expired + removed + superseded + queued,
-- i.e. balance = 0 (src/pg/queue_counts.cpp).
CREATE FUNCTION outbox.conservation()
RETURNS TABLE (destination text, initial bigint, produced bigint, delivered bigint,
               dead_lettered bigint, expired bigint, removed bigint, queued bigint, balance bigint,
               superseded bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT q.destination, q.initial, q.produced, q.delivered, q.dead_lettered, q.expired,
           q.removed, q.queued,
           q.initial + q.produced - q.delivered - q.dead_lettered - q.expired - q.removed
               - q.superseded - q.queued,
           q.superseded
      FROM outbox._queue_counts() AS q
      JOIN outbox.destinations AS d ON d.name = q.destination
     ORDER BY q.destination
$$;
COMMENT ON FUNCTION outbox.conservation() IS
    'initial + produced = delivered + dead_lettered + expired + removed + superseded + queued, per destination, since the counts started';

CREATE FUNCTION outbox.workers(
    OUT pid integer, OUT database text, OUT worker integer, OUT state text,
    OUT destination text, OUT in_flight bigint, OUT started_at timestamptz,
    OUT last_cycle_at timestamptz, OUT cycles bigint, OUT claimed bigint, OUT delivered bigint,
    OUT retried bigint, OUT deferred bigint, OUT dead bigint, OUT expired bigint,
    OUT driver_pid integer, OUT driver_restarts bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'outbox_workers' LANGUAGE C;
COMMENT ON FUNCTION outbox.workers() IS
    'the delivery workers of every served database, live from shared memory: state, current destination, counters, driver process';

CREATE FUNCTION outbox.wake() RETURNS void
    AS 'MODULE_PATHNAME', 'outbox_wake' LANGUAGE C;
COMMENT ON FUNCTION outbox.wake() IS 'nudge the workers of this database (now and at commit)';

--------------------------------------------------------------------------------------------------
-- The inbox (consuming side, issue 23): each event applied once. (This block is the inbox's
-- alone; sql/outbox--0.2.0.sql and sql/outbox--0.1.0--0.2.0.sql carry the same text.)
--------------------------------------------------------------------------------------------------
-- Dedup rows: one per event a subscription applied, or a caller of outbox.inbox_accept()
-- accepted (subscription is then the caller's source name). topic, partition and offset say
-- where the worker read the event (NULL for inbox_accept). Rows older than
-- outbox.inbox_retention are swept by the workers in bounded batches.
CREATE TABLE outbox.inbox (
    subscription text NOT NULL,
    event_id     uuid NOT NULL,
    topic        text,
    "partition"  integer,
    "offset"     bigint,
    received_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT inbox_pkey PRIMARY KEY (subscription, event_id)
);
COMMENT ON TABLE outbox.inbox IS
    'inbox dedup rows: the events each subscription (or inbox_accept source) has applied, swept after outbox.inbox_retention';
CREATE INDEX inbox_received_at ON outbox.inbox (received_at);
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox', '');

-- For consumers other than the worker: in the caller's transaction, true the first time an
-- event id is accepted for a source, false after (the dedup row commits or rolls back with the
-- caller's effects). A concurrent caller with the same id waits for the first to finish.
CREATE FUNCTION outbox.inbox_accept(source text, event_id uuid)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF source IS NULL OR source !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'invalid inbox source %', coalesce(quote_literal(left(source, 64)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A source name is 1 to 63 characters of letters, digits, ''_'', ''.'' and ''-'', starting with a letter or digit.',
                  HINT = 'Name the consumer whose events these are, for example ''billing''.';
    END IF;
    IF event_id IS NULL THEN
        RAISE EXCEPTION 'outbox.inbox_accept needs an event id'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass the event''s stable id: the ce_id header or webhook-id of an outbox message is its event_id.';
    END IF;
    -- A subscription's dedup rows are its worker's: a row added here would make it skip an event.
    PERFORM FROM outbox.inbox_subscriptions AS s WHERE s.name = inbox_accept.source;
    IF FOUND THEN
        RAISE EXCEPTION 'inbox source "%" is a subscription', source
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'The workers record the events a subscription applies; an event accepted here would be skipped by it.',
                  HINT = 'Name the source after your consumer, not after a subscription.';
    END IF;
    INSERT INTO outbox.inbox AS i (subscription, event_id)
    VALUES (inbox_accept.source, inbox_accept.event_id)
    ON CONFLICT ON CONSTRAINT inbox_pkey DO NOTHING;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION outbox.inbox_accept(text, uuid) IS
    'true the first time an event id is accepted for a source, in the caller''s transaction; false for a duplicate';
REVOKE ALL ON FUNCTION outbox.inbox_accept(text, uuid) FROM PUBLIC;

-- What a subscription's handler is called with, once per record: handler(m outbox.inbox_message)
-- RETURNS void.
CREATE TYPE outbox.inbox_message AS (
    subscription  text,
    topic         text,
    "partition"   integer,
    "offset"      bigint,
    key           text,
    headers       jsonb,
    payload       jsonb,
    payload_bytes bytea,
    event_id      uuid,
    "timestamp"   timestamptz
);
COMMENT ON TYPE outbox.inbox_message IS
    'one consumed record, as a subscription''s handler receives it';

-- Subscriptions: where the workers consume from, and the handler each record goes to. Configs
-- may hold secrets: readable only by the table's owner; operators use outbox.subscriptions().
-- handler is kept as its signature text (schema-qualified), looked up when the workers load
-- the subscription: a regprocedure column would stop pg_upgrade. The handler runs as owner.
CREATE TABLE outbox.inbox_subscriptions (
    name        text PRIMARY KEY,
    kind        text NOT NULL,
    config      jsonb NOT NULL,
    handler     text NOT NULL,
    owner       regrole,
    paused      boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    -- Why the workers cannot consume it now (a bad handler, an unknown topic, the cluster
    -- unreachable), written by them; NULL when they can.
    last_error  text
);
COMMENT ON TABLE outbox.inbox_subscriptions IS
    'Kafka topics the workers consume into PostgreSQL through a handler; change with outbox.create_subscription/alter_subscription/drop_subscription';
-- Every row is validated on its way in (name, kind, config with librdkafka itself, the
-- handler's signature and the owner's right to run it), and only the owner (or a superuser)
-- may change or drop it; see src/pg/subscriptions.cpp.
CREATE FUNCTION outbox._subscriptions_check() RETURNS trigger
    AS 'MODULE_PATHNAME', 'outbox_subscriptions_check' LANGUAGE C;
CREATE TRIGGER subscriptions_check BEFORE INSERT OR UPDATE OF name, kind, config, handler, owner OR DELETE
    ON outbox.inbox_subscriptions FOR EACH ROW EXECUTE FUNCTION outbox._subscriptions_check();
ALTER TABLE outbox.inbox_subscriptions ENABLE ALWAYS TRIGGER subscriptions_check;

-- Where each subscription stands in each partition, committed in the same transaction as the
-- dedup rows and the handlers' effects (Kafka's group offsets are not used): "offset" is the
-- next record to apply. The counters are kept with it, so they are exact across crashes.
CREATE TABLE outbox.inbox_offsets (
    subscription   text NOT NULL REFERENCES outbox.inbox_subscriptions (name) ON DELETE CASCADE,
    topic          text NOT NULL,
    "partition"    integer NOT NULL,
    "offset"       bigint NOT NULL,
    high_watermark bigint,
    consumed       bigint NOT NULL DEFAULT 0,
    duplicates     bigint NOT NULL DEFAULT 0,
    dead_lettered  bigint NOT NULL DEFAULT 0,
    last_error     text,
    last_record_at timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT inbox_offsets_pkey PRIMARY KEY (subscription, topic, "partition")
);
COMMENT ON TABLE outbox.inbox_offsets IS
    'per subscription and partition: the next offset to apply and the counts, committed with the handlers'' effects';
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_subscriptions', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_offsets', '');

CREATE FUNCTION outbox.create_subscription(name text, kind text, config jsonb, handler regprocedure)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- The calling statement carries the config and its secrets: an error raised in here must not
-- log it (log_min_error_statement is back to its setting when the transaction aborts).
SET log_min_error_statement = panic AS $$
BEGIN
    IF handler IS NULL THEN
        RAISE EXCEPTION 'subscription "%" needs a handler', create_subscription.name
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Pass a function f(m outbox.inbox_message) RETURNS void, for example ''myschema.apply_order(outbox.inbox_message)''::regprocedure.';
    END IF;
    -- The owner is the calling role, set by the check trigger.
    INSERT INTO outbox.inbox_subscriptions (name, kind, config, handler)
    VALUES (create_subscription.name, create_subscription.kind, create_subscription.config,
            create_subscription.handler::oid::regprocedure::text)
    ON CONFLICT ON CONSTRAINT inbox_subscriptions_pkey DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'subscription "%" already exists', create_subscription.name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Change it with outbox.alter_subscription(), or drop it first.';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.create_subscription(text, text, jsonb, regprocedure) IS
    'consume Kafka topics into PostgreSQL: each record applied once through the handler, run as the calling role';

CREATE FUNCTION outbox.alter_subscription(name text, config jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET log_min_error_statement = panic AS $$
BEGIN
    IF config IS NULL OR jsonb_typeof(config) <> 'object' THEN
        RAISE EXCEPTION 'outbox.alter_subscription needs a JSON object of settings to change'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Settings given are replaced, settings given as null are removed, others are kept.';
    END IF;
    UPDATE outbox.inbox_subscriptions AS s
       SET config = jsonb_strip_nulls(s.config || alter_subscription.config), updated_at = now()
     WHERE s.name = alter_subscription.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'subscription "%" does not exist', alter_subscription.name
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.alter_subscription(text, jsonb) IS
    'change settings of a subscription: given keys replace, null removes, the rest is kept';

-- Its offsets go with it; its dedup rows stay (until outbox.inbox_retention), so a subscription
-- created again under the same name applies none of the events already applied.
CREATE FUNCTION outbox.drop_subscription(name text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM outbox.inbox_subscriptions AS s WHERE s.name = drop_subscription.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'subscription "%" does not exist', drop_subscription.name
            USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox.drop_subscription(text) IS
    'remove a subscription and its offsets; its dedup rows stay until outbox.inbox_retention';

-- Records whose handler raised (issue 23): with "on_error": "skip" consumption goes on past
-- them; with "block" their partition stops at them (blocking = true) while the row exists.
-- outbox.requeue_inbox() asks the worker that consumes the partition to apply one again: it
-- runs the handler once more (the dedup row guards it), and the row goes when it succeeds; a
-- blocked partition goes on once its blocking row is gone (requeued and applied, or deleted
-- by the operator to skip the record).
CREATE TABLE outbox.inbox_dead_letters (
    id               bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    subscription     text NOT NULL,
    topic            text NOT NULL,
    "partition"      integer NOT NULL,
    "offset"         bigint NOT NULL,
    event_id         uuid NOT NULL,
    key              text,
    headers          jsonb,
    payload          jsonb,
    payload_bytes    bytea,
    record_timestamp timestamptz,
    blocking         boolean NOT NULL DEFAULT false,
    attempts         integer NOT NULL DEFAULT 1,
    last_error       text NOT NULL,
    last_sqlstate    text NOT NULL,
    failed_at        timestamptz NOT NULL DEFAULT now(),
    requeued_at      timestamptz,
    CONSTRAINT inbox_dead_letters_record UNIQUE (subscription, topic, "partition", "offset")
);
COMMENT ON TABLE outbox.inbox_dead_letters IS
    'consumed records whose handler raised: error and SQLSTATE; outbox.requeue_inbox applies one again';
CREATE INDEX inbox_dead_letters_requeued ON outbox.inbox_dead_letters (subscription, requeued_at)
    WHERE requeued_at IS NOT NULL;
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_dead_letters', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_dead_letters_id_seq', '');

-- Marks dead-lettered records to be applied again by the worker consuming their partition;
-- returns how many were marked. By ids, or every one of a subscription.
CREATE FUNCTION outbox.requeue_inbox(ids bigint[])
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    IF ids IS NULL THEN
        RAISE EXCEPTION 'outbox.requeue_inbox needs an array of dead letter ids'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'SELECT outbox.requeue_inbox(array_agg(id)) FROM outbox.inbox_dead_letters WHERE ...; or outbox.requeue_inbox(''subscription'').';
    END IF;
    UPDATE outbox.inbox_dead_letters AS d SET requeued_at = now()
     WHERE d.id = ANY (requeue_inbox.ids) AND d.requeued_at IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM outbox.wake();
    RETURN n;
END
$$;
COMMENT ON FUNCTION outbox.requeue_inbox(bigint[]) IS
    'apply dead-lettered inbox records again (their handler runs once more); returns how many were requeued';

CREATE FUNCTION outbox.requeue_inbox(subscription text)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM FROM outbox.inbox_subscriptions AS s WHERE s.name = requeue_inbox.subscription;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'subscription "%" does not exist', requeue_inbox.subscription
            USING ERRCODE = 'undefined_object';
    END IF;
    UPDATE outbox.inbox_dead_letters AS d SET requeued_at = now()
     WHERE d.subscription = requeue_inbox.subscription AND d.requeued_at IS NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM outbox.wake();
    RETURN n;
END
$$;
COMMENT ON FUNCTION outbox.requeue_inbox(text) IS
    'apply every dead-lettered record of a subscription again; returns how many were requeued';

-- Issue 43: on a hot standby, the NOTICE that says no worker runs there and the figures are as
-- replicated (outbox.stats(), conservation() and workers() send it from C).
CREATE FUNCTION outbox._note_replica() RETURNS boolean
    AS 'MODULE_PATHNAME', 'outbox_note_replica' LANGUAGE C STABLE;
-- Per subscription and partition (one row with no partition before the workers first read
-- it): where it stands, how far behind, and what happened. blocked: "on_error": "block" holds
-- the partition at a dead-lettered record.
CREATE FUNCTION outbox.subscriptions(
    OUT subscription text, OUT kind text, OUT paused boolean, OUT topic text,
    OUT "partition" integer, OUT stored_offset bigint, OUT high_watermark bigint, OUT lag bigint,
    OUT consumed bigint, OUT duplicates bigint, OUT dead_lettered bigint, OUT blocked boolean,
    OUT last_error text, OUT last_record_at timestamptz)
RETURNS SETOF record LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    -- Issue 43: on a hot standby a NOTICE says that no inbox worker reads there.
    SELECT outbox._note_replica();
    -- Issue 35 (item 6): a lag is known only from a high watermark (NULL while the cluster
    -- cannot be reached, or before it answered).
    SELECT s.name, s.kind, s.paused, o.topic, o."partition", o."offset", o.high_watermark,
           CASE WHEN o.high_watermark IS NOT NULL THEN greatest(o.high_watermark - o."offset", 0) END,
           coalesce(o.consumed, 0),
           coalesce(o.duplicates, 0), coalesce(o.dead_lettered, 0),
           EXISTS (SELECT FROM outbox.inbox_dead_letters AS d
                    WHERE d.subscription = s.name AND d.topic = o.topic
                      AND d."partition" = o."partition" AND d.blocking),
           coalesce(s.last_error, o.last_error), o.last_record_at
      FROM outbox.inbox_subscriptions AS s
      LEFT JOIN outbox.inbox_offsets AS o ON o.subscription = s.name
     ORDER BY s.name, o.topic, o."partition"
$$;
COMMENT ON FUNCTION outbox.subscriptions() IS
    'per subscription and partition: stored offset, high watermark, lag, consumed, duplicates skipped, dead-lettered, blocked, last error, last record time';
REVOKE ALL ON FUNCTION outbox._subscriptions_check(), outbox.create_subscription(text, text, jsonb, regprocedure),
    outbox.alter_subscription(text, jsonb), outbox.drop_subscription(text), outbox.subscriptions(),
    outbox.requeue_inbox(bigint[]), outbox.requeue_inbox(text)
    FROM PUBLIC;
-- (end of the inbox block)

--------------------------------------------------------------------------------------------------
-- Standard Webhooks verification for applications that receive our webhooks (issue 23/25).
--------------------------------------------------------------------------------------------------
CREATE FUNCTION outbox._verify_webhook(secrets text[], id text, "timestamp" text,
                                       signature text, body bytea, tolerance_s float8)
RETURNS boolean AS 'MODULE_PATHNAME', 'outbox_verify_webhook' LANGUAGE C STABLE PARALLEL SAFE;
-- The three headers, found case-insensitively (HTTP header names are); a missing one: false.
-- SECURITY DEFINER: it reads no table, and a receiving application needs EXECUTE on this
-- function alone.
CREATE FUNCTION outbox.verify_webhook(secrets text[], headers jsonb, body bytea,
                                      tolerance interval DEFAULT '5 minutes')
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
    SELECT outbox._verify_webhook(secrets,
        (SELECT h.value FROM jsonb_each_text(headers) AS h WHERE lower(h.key) = 'webhook-id' LIMIT 1),
        (SELECT h.value FROM jsonb_each_text(headers) AS h WHERE lower(h.key) = 'webhook-timestamp' LIMIT 1),
        (SELECT h.value FROM jsonb_each_text(headers) AS h WHERE lower(h.key) = 'webhook-signature' LIMIT 1),
        body, extract(epoch FROM tolerance)::float8)
$$;
COMMENT ON FUNCTION outbox.verify_webhook(text[], jsonb, bytea, interval) IS
    'Standard Webhooks verification: whsec_ secrets check v1, whpk_ public keys check v1a, any of several, within the tolerance';

--------------------------------------------------------------------------------------------------
-- Role grant sets (docs/security.md): what a producer, a consumer, an operator and an admin
-- need, kept here beside the functions so that a function added to the API is added to its set
-- in the same change. Each grants its set to a role and returns the statements it ran. They run
-- with the caller's rights (not SECURITY DEFINER): only the owner of the extension's objects (a
-- superuser) can grant them.
--------------------------------------------------------------------------------------------------
CREATE FUNCTION outbox._grant(grantee regrole, statements text[])
RETURNS SETOF text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    statement text;
BEGIN
    IF grantee IS NULL THEN
        RAISE EXCEPTION 'outbox needs a role to grant to' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT pg_has_role(current_user, (SELECT c.relowner FROM pg_class AS c
                                       WHERE c.oid = 'outbox.messages'::regclass), 'USAGE') THEN
        RAISE EXCEPTION 'permission denied to grant the privileges of outbox'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Only the owner of the extension''s objects may grant them.',
                  HINT = 'Run it as a superuser.';
    END IF;
    FOREACH statement IN ARRAY statements LOOP
        -- regrole's text is the role's name quoted as an identifier
        statement := format(statement, grantee);
        EXECUTE statement;
        RETURN NEXT statement;
    END LOOP;
END
$$;

-- Producers: INSERT into outbox.messages (the ids of the rows they queued with RETURNING id,
-- event_id: SELECT on those two columns only) and outbox.publish.
CREATE FUNCTION outbox.grant_producer(grantee regrole)
RETURNS SETOF text LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT outbox._grant(grantee, ARRAY[
        'GRANT USAGE ON SCHEMA outbox TO %s',
        'GRANT INSERT, SELECT (id, event_id) ON outbox.messages TO %s',
        'GRANT EXECUTE ON FUNCTION outbox.publish(text[], text, jsonb, text, jsonb) TO %s'])
$$;
COMMENT ON FUNCTION outbox.grant_producer(regrole) IS
    'grant a role what producers need: INSERT into outbox.messages (RETURNING id, event_id) and outbox.publish; returns the GRANT statements';

-- Consumers of our events that deduplicate or verify webhooks in their own transactions.
CREATE FUNCTION outbox.grant_consumer(grantee regrole)
RETURNS SETOF text LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT outbox._grant(grantee, ARRAY[
        'GRANT USAGE ON SCHEMA outbox TO %s',
        'GRANT EXECUTE ON FUNCTION outbox.inbox_accept(text, uuid), outbox.verify_webhook(text[], jsonb, bytea, interval) TO %s'])
$$;
COMMENT ON FUNCTION outbox.grant_consumer(regrole) IS
    'grant a role what consumers of your own need: outbox.inbox_accept and outbox.verify_webhook; returns the GRANT statements';

-- Operators: see the queues and the dead letters (never the destination or subscription
-- configs, which hold secrets), and act on them.
CREATE FUNCTION outbox.grant_operator(grantee regrole)
RETURNS SETOF text LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT outbox._grant(grantee, ARRAY[
        'GRANT USAGE ON SCHEMA outbox TO %s',
        'GRANT SELECT ON outbox.messages, outbox.dead_letters, outbox.archive, outbox.inbox_dead_letters TO %s',
        'GRANT DELETE ON outbox.inbox_dead_letters TO %s',
        'GRANT EXECUTE ON FUNCTION outbox.stats(), outbox.workers(), outbox.conservation(), outbox.wake(), outbox.recount() TO %s',
        'GRANT EXECUTE ON FUNCTION outbox.pause(text), outbox.resume(text), outbox.requeue(bigint[]), outbox.requeue(text, timestamp with time zone), outbox.skip(bigint), outbox.blocked_keys(text), outbox.purge_dead_letters(interval, text) TO %s',
        'GRANT EXECUTE ON FUNCTION outbox.subscriptions(), outbox.requeue_inbox(bigint[]), outbox.requeue_inbox(text) TO %s'])
$$;
COMMENT ON FUNCTION outbox.grant_operator(regrole) IS
    'grant a role what operators need: stats, workers, conservation, the queue and dead letters (not the configs), pause, resume, requeue, skip, purge; returns the GRANT statements';

-- Admins: an operator who also defines destinations and subscriptions.
CREATE FUNCTION outbox.grant_admin(grantee regrole)
RETURNS SETOF text LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT outbox.grant_operator(grantee)
    UNION ALL
    SELECT outbox._grant(grantee, ARRAY[
        'GRANT EXECUTE ON FUNCTION outbox.create_destination(text, text, jsonb), outbox.alter_destination(text, jsonb), outbox.drop_destination(text, boolean) TO %s',
        'GRANT EXECUTE ON FUNCTION outbox.create_subscription(text, text, jsonb, regprocedure), outbox.alter_subscription(text, jsonb), outbox.drop_subscription(text) TO %s'])
$$;
COMMENT ON FUNCTION outbox.grant_admin(regrole) IS
    'grant a role what admins need: the operator''s set plus creating, altering and dropping destinations and subscriptions; returns the GRANT statements';

--------------------------------------------------------------------------------------------------
-- Descriptions of the columns users read and write (\d+ shows them; docs/reference/sql.md is
-- generated from them and from the COMMENTs above).
--------------------------------------------------------------------------------------------------
COMMENT ON COLUMN outbox.destinations.name IS 'the name producers write in outbox.messages.destination';
COMMENT ON COLUMN outbox.destinations.kind IS 'kafka, webhook, amqp, nats, redis, mqtt or sqs';
COMMENT ON COLUMN outbox.destinations.config IS 'the settings (docs/destinations.md), secrets included: readable by the table''s owner only';
COMMENT ON COLUMN outbox.destinations.paused IS 'set by outbox.pause (or a webhook''s 410 Gone): messages keep queueing, none is delivered';

COMMENT ON COLUMN outbox.messages.id IS 'numbered at INSERT; a message keeps it through retries, dead letters and requeues (set by outbox)';
COMMENT ON COLUMN outbox.messages.event_id IS 'UUIDv7, the same on every attempt and for every copy of a publish: the consumer''s deduplication key';
COMMENT ON COLUMN outbox.messages.destination IS 'required: the name of a destination';
COMMENT ON COLUMN outbox.messages.topic IS 'Kafka topic, AMQP routing key or NATS subject; default: the destination''s';
COMMENT ON COLUMN outbox.messages.key IS 'Kafka key; the unit of per-key ordering and compaction (at most 1024 bytes)';
COMMENT ON COLUMN outbox.messages.payload IS 'JSON payload; at most one of payload and payload_bytes (neither: a Kafka tombstone)';
COMMENT ON COLUMN outbox.messages.payload_bytes IS 'binary payload, sent as it is (Avro, Protobuf, a schema registry''s framing)';
COMMENT ON COLUMN outbox.messages.headers IS 'JSON object of strings, sent as headers; content-type and ce_type set the CloudEvents content type and type';
COMMENT ON COLUMN outbox.messages.available_at IS 'not delivered before this (at most 366 days ahead); while a worker holds the message, the end of its lease';
COMMENT ON COLUMN outbox.messages.expires_at IS 'not delivered after this, but dead-lettered as expired (default: available_at + the destination''s ttl)';
COMMENT ON COLUMN outbox.messages.created_at IS 'when it was queued: the CloudEvents time (set by outbox)';
COMMENT ON COLUMN outbox.messages.attempts IS 'delivery attempts spent (set by outbox)';
COMMENT ON COLUMN outbox.messages.lease_token IS 'the claim of the worker that holds the message, NULL when none (set by outbox)';
COMMENT ON COLUMN outbox.messages.last_error IS 'why the last attempt failed or was deferred (set by outbox)';
COMMENT ON COLUMN outbox.messages.first_failed_at IS 'when an attempt first failed: the start of the destination''s retry_budget (set by outbox)';
COMMENT ON COLUMN outbox.messages.order_key IS 'ordering = key: the order of the message''s key (set by outbox)';
COMMENT ON COLUMN outbox.messages.compacts IS 'compaction = key: a newer message of the key supersedes this one (set by outbox)';

COMMENT ON COLUMN outbox.dead_letters.reason IS 'rejected (a permanent failure), max_attempts (max_attempts or retry_budget spent), expired, poison (in flight during outbox.poison_after driver crashes), dropped (drop_destination with force)';
COMMENT ON COLUMN outbox.dead_letters.last_error IS 'the last failure, as the broker or endpoint reported it';
COMMENT ON COLUMN outbox.dead_letters.attempts IS 'delivery attempts spent';
COMMENT ON COLUMN outbox.dead_letters.first_failed_at IS 'when an attempt first failed';
COMMENT ON COLUMN outbox.dead_letters.failed_at IS 'when it became a dead letter';
COMMENT ON COLUMN outbox.dead_letters.skipped_at IS 'set by outbox.skip: it no longer holds back the later messages of its key (ordering = key, on_dead = block)';

COMMENT ON COLUMN outbox.archive.delivered_at IS 'when it was delivered, or superseded';
COMMENT ON COLUMN outbox.archive.reason IS 'delivered, or superseded by a newer message of its key (compaction = key)';

COMMENT ON COLUMN outbox.inbox.subscription IS 'the subscription that applied the event, or the source given to outbox.inbox_accept';
COMMENT ON COLUMN outbox.inbox.event_id IS 'the event''s id: the record''s ce_id header, the subscription''s event_id_header, or its place in the stream';
COMMENT ON COLUMN outbox.inbox.received_at IS 'when it was applied; swept after outbox.inbox_retention';

COMMENT ON COLUMN outbox.inbox_subscriptions.config IS 'the settings (docs/inbox.md), secrets included: readable by the table''s owner only';
COMMENT ON COLUMN outbox.inbox_subscriptions.handler IS 'the handler, schema-qualified: f(m outbox.inbox_message) RETURNS void';
COMMENT ON COLUMN outbox.inbox_subscriptions.owner IS 'the role that created the subscription; the handler runs as this role';
COMMENT ON COLUMN outbox.inbox_subscriptions.paused IS 'set by outbox.pause: its partitions are not consumed';
COMMENT ON COLUMN outbox.inbox_subscriptions.last_error IS 'why it cannot be consumed now (NULL when it can)';

COMMENT ON COLUMN outbox.inbox_offsets."offset" IS 'the next offset to apply, committed with the handlers'' effects';
COMMENT ON COLUMN outbox.inbox_offsets.high_watermark IS 'the partition''s end offset, as last read from the broker';

COMMENT ON COLUMN outbox.inbox_dead_letters.blocking IS 'on_error = block: its partition stops at this record while the row exists';
COMMENT ON COLUMN outbox.inbox_dead_letters.last_error IS 'the handler''s error';
COMMENT ON COLUMN outbox.inbox_dead_letters.last_sqlstate IS 'the handler''s SQLSTATE';
COMMENT ON COLUMN outbox.inbox_dead_letters.requeued_at IS 'set by outbox.requeue_inbox: to be applied again';

COMMENT ON COLUMN outbox.inbox_message.subscription IS 'the subscription that read the record';
COMMENT ON COLUMN outbox.inbox_message.topic IS 'where the record was read: its topic';
COMMENT ON COLUMN outbox.inbox_message."partition" IS 'where the record was read: its partition';
COMMENT ON COLUMN outbox.inbox_message."offset" IS 'where the record was read: its offset';
COMMENT ON COLUMN outbox.inbox_message.key IS 'the record''s key';
COMMENT ON COLUMN outbox.inbox_message.headers IS 'the record''s headers, name: value (an array of values for a name sent several times)';
COMMENT ON COLUMN outbox.inbox_message.payload IS 'the value, when it is JSON (a JSON content-type or none); else NULL';
COMMENT ON COLUMN outbox.inbox_message.payload_bytes IS 'the value, when it is not JSON; else NULL (both NULL: a tombstone)';
COMMENT ON COLUMN outbox.inbox_message.event_id IS 'what the record is deduplicated by: its ce_id header, the subscription''s event_id_header, or its place in the stream';
COMMENT ON COLUMN outbox.inbox_message."timestamp" IS 'the record''s timestamp';

--------------------------------------------------------------------------------------------------
-- Privileges: nothing for PUBLIC. outbox.grant_producer() and the other grant sets above give roles theirs.
--------------------------------------------------------------------------------------------------
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
-- The event_id default runs with the producer's rights.
GRANT EXECUTE ON FUNCTION outbox.uuid_generate_v7() TO PUBLIC;
