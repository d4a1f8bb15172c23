-- Trace context, one rule for every source of a W3C traceparent/tracestate: the producer's own
-- headers (an INSERT's, or outbox.publish's), outbox.traceparent/outbox.tracestate, and the
-- statement's SQLCommenter comment. A malformed value is left out with one WARNING (SQLSTATE
-- 22023) per statement, and the message is queued as if it had not been given: never an error
-- (a bad trace id never fails a business transaction). A malformed traceparent header takes the
-- tracestate header with it, and the session's or the comment's context then applies.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never
SELECT outbox.create_destination('tr', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "tr"}');
SELECT outbox.create_destination('tr2', 'kafka', '{"bootstrap.servers": "127.0.0.1:9092", "topic": "tr2"}');

CREATE TEMP TABLE bad_traceparent (name text PRIMARY KEY, value text NOT NULL);
INSERT INTO bad_traceparent VALUES
    ('upper_hex',       '00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01'),
    ('zero_trace_id',   '00-00000000000000000000000000000000-b7ad6b7169203331-01'),
    ('zero_parent_id',  '00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01'),
    ('version_ff',      'ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'),
    ('version_not_hex', '0x-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'),
    ('trace_id_not_hex','00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01'),
    ('flags_not_hex',   '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0x'),
    ('short_fields',    '00-abc-def-01'),
    ('underscores',     '00_0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331_01'),
    ('v00_suffix',      '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra'),
    ('v00_long_flags',  '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-011'),
    ('v01_bad_suffix',  '01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x'),
    ('leading_space',   ' 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'),
    ('trailing_space',  '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 '),
    ('empty',           ''),
    ('words',           'not-a-traceparent');
CREATE TEMP TABLE bad_tracestate (name text PRIMARY KEY, value text NOT NULL);
INSERT INTO bad_tracestate VALUES
    ('upper_key',        'Rojo=00f067aa0ba902b7'),
    ('no_equals',        'rojo'),
    ('empty_value',      'rojo='),
    ('equals_in_value',  'rojo=a=b'),
    ('digit_first_key',  '1rojo=x'),
    ('space_in_key',     'bad key=1'),
    ('non_ascii_value',  'rojo=café'),
    ('tab_in_value',     E'rojo=a\tb'),
    ('key_257',          repeat('k', 257) || '=v'),
    ('system_15',        'acme@abcdefghijklmno=v'),
    ('members_33',       (SELECT string_agg('k' || g || '=v', ',') FROM generate_series(1, 33) g)),
    ('chars_608',        (SELECT string_agg(chr(96 + g) || '=' || repeat('x', 200), ',') FROM generate_series(1, 3) g));

-- Well-formed: kept as given (a later version may append fields; any case of the name).
INSERT INTO outbox.messages (destination, key, payload, headers) VALUES
    ('tr', 'ok-00', '{}', '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'),
    ('tr', 'ok-01', '{}', '{"traceparent": "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-comes"}'),
    ('tr', 'ok-state', '{}', '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"}'),
    ('tr', 'ok-case', '{}', '{"TraceParent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}');
SELECT key, headers FROM outbox.messages WHERE key LIKE 'ok-%' ORDER BY id;

-- The WARNING's SQLSTATE.
\set VERBOSITY sqlstate
INSERT INTO outbox.messages (destination, key, payload, headers)
VALUES ('tr', 'sqlstate', '{}', '{"traceparent": "00-abc-def-01"}');
\set VERBOSITY default
-- One WARNING for a statement of several rows.
INSERT INTO outbox.messages (destination, key, payload, headers)
SELECT 'tr', 'rows', '{}', '{"traceparent": "00-abc-def-01"}' FROM generate_series(1, 3);

-- Every malformed traceparent, from each source: a header (next to another header, which stays),
-- outbox.traceparent, a SQLCommenter comment, outbox.publish's headers. One statement each. (An
-- empty outbox.traceparent is no setting at all: no WARNING.)
SELECT format($q$INSERT INTO outbox.messages (destination, key, payload, headers)
                VALUES ('tr', %L, '{}', jsonb_build_object('traceparent', %L, 'x-a', '1'))$q$,
              'header:' || name, value)
  FROM bad_traceparent ORDER BY name COLLATE "C" \gexec
SELECT format($q$BEGIN; SET LOCAL outbox.traceparent = %L;
                INSERT INTO outbox.messages (destination, key, payload) VALUES ('tr', %L, '{}'); COMMIT$q$,
              value, 'setting:' || name)
  FROM bad_traceparent ORDER BY name COLLATE "C" \gexec
SELECT format($q$INSERT INTO outbox.messages (destination, key, payload) VALUES ('tr', %L, '{}')
                /*application='shop',traceparent='%s'*/$q$,
              'comment:' || name, value)
  FROM bad_traceparent ORDER BY name COLLATE "C" \gexec
SELECT format($q$DO $d$ BEGIN PERFORM outbox.publish(ARRAY['tr', 'tr2'], 't', '{}', %L,
                    jsonb_build_object('traceparent', %L, 'x-a', '1')); END $d$$q$,
              'publish:' || name, value)
  FROM bad_traceparent ORDER BY name COLLATE "C" \gexec
-- Each queued without the malformed value, everything else as given: the header rows keep x-a.
SELECT split_part(key, ':', 1) AS source, count(*) AS queued,
       count(*) FILTER (WHERE headers ? 'traceparent') AS with_traceparent,
       string_agg(DISTINCT coalesce(headers::text, 'NULL'), ' ') AS headers
  FROM outbox.messages WHERE key LIKE '%:%' GROUP BY 1 ORDER BY 1;
SELECT count(*) = (SELECT count(*) FROM bad_traceparent) * 5 AS one_row_each
  FROM outbox.messages WHERE key LIKE '%:%';
DELETE FROM outbox.messages;

-- Every malformed tracestate, beside a well-formed traceparent: the traceparent is kept.
SELECT format($q$INSERT INTO outbox.messages (destination, key, payload, headers)
                VALUES ('tr', %L, '{}', jsonb_build_object(
                    'traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
                    'tracestate', %L, 'x-a', '1'))$q$,
              'header:' || name, value)
  FROM bad_tracestate ORDER BY name COLLATE "C" \gexec
SELECT format($q$BEGIN; SET LOCAL outbox.traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
                SET LOCAL outbox.tracestate = %L;
                INSERT INTO outbox.messages (destination, key, payload) VALUES ('tr', %L, '{}'); COMMIT$q$,
              value, 'setting:' || name)
  FROM bad_tracestate ORDER BY name COLLATE "C" \gexec
SELECT format($q$INSERT INTO outbox.messages (destination, key, payload) VALUES ('tr', %L, '{}')
                /*traceparent='00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',tracestate='%s'*/$q$,
              'comment:' || name, value)
  FROM bad_tracestate ORDER BY name COLLATE "C" \gexec
SELECT format($q$DO $d$ BEGIN PERFORM outbox.publish(ARRAY['tr', 'tr2'], 't', '{}', %L, jsonb_build_object(
                    'traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
                    'tracestate', %L, 'x-a', '1')); END $d$$q$,
              'publish:' || name, value)
  FROM bad_tracestate ORDER BY name COLLATE "C" \gexec
SELECT split_part(key, ':', 1) AS source, count(*) AS queued,
       count(*) FILTER (WHERE headers ? 'tracestate') AS with_tracestate,
       string_agg(DISTINCT coalesce(headers::text, 'NULL'), ' ') AS headers
  FROM outbox.messages WHERE key LIKE '%:%' GROUP BY 1 ORDER BY 1;
SELECT count(*) = (SELECT count(*) FROM bad_tracestate) * 5 AS one_row_each
  FROM outbox.messages WHERE key LIKE '%:%';
DELETE FROM outbox.messages;

-- How the sources combine when the producer's header is malformed: the header (with its
-- tracestate) goes, and the session's context, or the comment's, applies.
BEGIN;
SET LOCAL outbox.traceparent = '00-5bd66ef5095369c7b0d1f8f4bd33716a-c532cb4098ac3dd2-01';
SET LOCAL outbox.tracestate = 'congo=t61rcWkgMzE';
INSERT INTO outbox.messages (destination, key, payload, headers)
VALUES ('tr', 'bad-header,session', '{}', '{"traceparent": "00-abc-def-01", "tracestate": "rojo=1", "x-a": "1"}');
INSERT INTO outbox.messages (destination, key, payload, headers)
VALUES ('tr', 'bad-state-header,session', '{}', '{"tracestate": "Rojo=1", "x-a": "1"}');
INSERT INTO outbox.messages (destination, key, payload, headers)
VALUES ('tr', 'good-header,bad-state-header', '{}',
        '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "tracestate": "Rojo=1"}');
COMMIT;
INSERT INTO outbox.messages (destination, key, payload, headers)
VALUES ('tr', 'bad-header,comment', '{}', '{"traceparent": "00-abc-def-01"}')
/*traceparent='00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'*/;
INSERT INTO outbox.messages (destination, key, payload, headers)
VALUES ('tr', 'bad-header,bad-comment', '{}', '{"traceparent": "00-abc-def-01", "x-a": "1"}')
/*traceparent='00-zzz'*/;
INSERT INTO outbox.messages (destination, key, payload, headers)
VALUES ('tr', 'bad-header-only', '{}', '{"traceparent": "00-abc-def-01"}');
SELECT key, headers FROM outbox.messages ORDER BY id;

SET outbox.drop_nonempty = on;  -- what the test left queued goes with it
DROP EXTENSION outbox;
