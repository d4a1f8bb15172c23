# Inbox handlers run in a sandbox, apart from delivery (issue 35): tried as a hostile
# subscription owner would, with only the grants docs/security.md gives one (USAGE on schema
# outbox, EXECUTE on outbox.create_subscription).
# - The handler tries to leave state in the session it runs in: settings at every level
#   (set_config(..., false), SET SESSION) including a search_path that puts its own schema, with
#   a shadowing now(), statement_timestamp(), clock_timestamp() and =, <, <=, >, >=, <> for
#   bigint, integer, text and timestamptz, first; default_transaction_read_only = on; a custom
#   setting; a session advisory lock; a cursor left open; SET ROLE, SET SESSION AUTHORIZATION,
#   CREATE TEMP TABLE and PREPARE attempts; and every fourth record raises after doing all that.
#   Each record must find the session as the first one did, none of the shadowing objects is
#   ever called (by the inbox worker or the delivery workers), the owner stays a
#   non-superuser, and delivery of another destination goes on meanwhile.
# - A handler over outbox.inbox_handler_timeout (5 s) is cancelled: its record rolled back and
#   dead-lettered with 57014, also when the handler catches the cancel; the next record goes on.
# (That a 15 s handler does not delay another destination's latency: test/t/107.)
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
$broker->ctl("create $_ 1") for qw(sandbox slow plain);
my $node = outbox_node('sandbox', conf => "outbox.inbox_handler_timeout = '5s'\n");

$node->safe_psql('postgres', q{
    CREATE ROLE mallory LOGIN;
    GRANT USAGE ON SCHEMA outbox TO mallory;
    GRANT EXECUTE ON FUNCTION outbox.create_subscription(text, text, jsonb, regprocedure) TO mallory;
    CREATE SCHEMA mal AUTHORIZATION mallory;
});

# The shadowing objects: each records who called it and tries to make mallory a superuser.
my @functions = map { [ $_, 'timestamptz', '' ] } qw(now statement_timestamp clock_timestamp);
my @operators;
for my $type (qw(bigint integer text timestamptz)) {
    my %names = ('=' => 'eq', '<' => 'lt', '<=' => 'le', '>' => 'gt', '>=' => 'ge', '<>' => 'ne');
    for my $op (sort keys %names) {
        my $fn = "op_$names{$op}_" . ($type =~ s/ /_/gr);
        push @operators, [ $op, $type, $fn ];
    }
}
my $shadows = q{
    SET ROLE mallory;
    CREATE TABLE mal.calls (fn text, by_role name, backend_type text);
    GRANT INSERT ON mal.calls TO PUBLIC;
    CREATE FUNCTION mal.record(fn text) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO mal.calls SELECT fn, current_user, backend_type
          FROM pg_catalog.pg_stat_activity WHERE pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid();
        BEGIN
            EXECUTE 'ALTER ROLE mallory SUPERUSER';
        EXCEPTION WHEN OTHERS THEN NULL;
        END;
    END $$;
};
for my $f (@functions) {
    my ($name, $type) = @$f;
    $shadows .= qq{
    CREATE FUNCTION mal.$name() RETURNS $type LANGUAGE plpgsql AS \$\$
    BEGIN PERFORM mal.record('$name()'); RETURN pg_catalog.$name(); END \$\$;};
}
for my $o (@operators) {
    my ($op, $type, $fn) = @$o;
    $shadows .= qq{
    CREATE FUNCTION mal.$fn(a $type, b $type) RETURNS boolean LANGUAGE plpgsql AS \$\$
    BEGIN PERFORM mal.record('$op($type)'); RETURN a OPERATOR(pg_catalog.$op) b; END \$\$;
    CREATE OPERATOR mal.$op (LEFTARG = $type, RIGHTARG = $type, FUNCTION = mal.$fn);};
}
$node->safe_psql('postgres', $shadows);

# The handler: first records what it finds, then tries to leave all of it behind.
$node->safe_psql('postgres', q{
    SET ROLE mallory;
    CREATE TABLE mal.seen (n int, search_path text, read_only text, statement_timeout text,
        work_mem text, custom text, advisory_locks bigint, cursors bigint, set_role text,
        set_session_authorization text, temp_table text, prepare text);
    CREATE FUNCTION mal.apply(m outbox.inbox_message) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        c1 CURSOR FOR SELECT 1;
        k int := (m.payload->>'n')::int;
        outcome text;
    BEGIN
        INSERT INTO mal.seen (n, search_path, read_only, statement_timeout, work_mem, custom,
                              advisory_locks, cursors)
        SELECT k, current_setting('search_path'), current_setting('default_transaction_read_only'),
               current_setting('statement_timeout'), current_setting('work_mem'),
               current_setting('mal.x', true),
               (SELECT count(*) FROM pg_catalog.pg_locks
                 WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid()),
               (SELECT count(*) FROM pg_catalog.pg_cursors);
        PERFORM set_config('search_path', 'mal, pg_catalog, pg_temp', false);
        PERFORM set_config('default_transaction_read_only', 'on', false);
        PERFORM set_config('statement_timeout', '1s', false);
        PERFORM set_config('mal.x', 'leaked', false);
        EXECUTE 'SET SESSION work_mem = ''64kB''';
        PERFORM pg_advisory_lock(4242);
        OPEN c1;
        BEGIN EXECUTE 'SET ROLE postgres'; outcome := 'allowed';
        EXCEPTION WHEN OTHERS THEN outcome := SQLSTATE; END;
        -- From here on the handler's own statements qualify their operators: a call of a
        -- shadowing one is then always one that leaked.
        UPDATE mal.seen SET set_role = outcome WHERE seen.n OPERATOR(pg_catalog.=) k;
        BEGIN EXECUTE 'SET SESSION AUTHORIZATION postgres'; outcome := 'allowed';
        EXCEPTION WHEN OTHERS THEN outcome := SQLSTATE; END;
        UPDATE mal.seen SET set_session_authorization = outcome WHERE seen.n OPERATOR(pg_catalog.=) k;
        BEGIN EXECUTE 'CREATE TEMP TABLE leak (x int)'; outcome := 'allowed';
        EXCEPTION WHEN OTHERS THEN outcome := SQLSTATE; END;
        UPDATE mal.seen SET temp_table = outcome WHERE seen.n OPERATOR(pg_catalog.=) k;
        BEGIN EXECUTE 'PREPARE leak AS SELECT 1'; outcome := 'allowed';
        EXCEPTION WHEN OTHERS THEN outcome := SQLSTATE; END;
        UPDATE mal.seen SET prepare = outcome WHERE seen.n OPERATOR(pg_catalog.=) k;
        IF k OPERATOR(pg_catalog.%) 4 OPERATOR(pg_catalog.=) 0 THEN
            RAISE EXCEPTION 'record % raises after changing the session', k;
        END IF;
    END $$;
});
$node->safe_psql('postgres', qq{
    SET ROLE mallory;
    SELECT outbox.create_subscription('sandbox_in', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topics": ["sandbox"], "batch_size": 5}',
        'mal.apply(outbox.inbox_message)');
});
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('sandbox', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "sandbox"}');
    SELECT outbox.create_destination('plain', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "plain"}');
    CREATE TABLE plain_sent (n int);
});

my $records = 40;
$node->safe_psql('postgres', qq{
    INSERT INTO outbox.messages (destination, payload)
    SELECT 'sandbox', jsonb_build_object('n', g) FROM generate_series(1, $records) g});
ok(wait_until(sub {
    $node->safe_psql('postgres', q{SELECT coalesce(sum(consumed + dead_lettered), 0) FROM outbox.subscriptions()})
      == $records }, 60), "all $records records consumed or dead-lettered");
# Meanwhile and after: another destination delivers (the read-only default and the rest stay
# in the handler's call).
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, payload)
    SELECT 'plain', jsonb_build_object('n', g) FROM generate_series(1, 100) g});
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages}) eq '0' }, 60),
    'the other destination delivered all 100 messages after the handlers ran');
is(scalar(@{ kafka_event_ids($broker, 'plain') }), 100, 'kcat reads the 100 messages');

my $applied = $records - $records / 4;
is($node->safe_psql('postgres', q{SELECT count(*) FROM mal.seen}), $applied,
    "$applied records applied (every fourth one raised)");
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.inbox_dead_letters WHERE last_error LIKE '%raises after changing the session%'}),
    $records / 4, 'the raising records are dead-lettered with their error');
is($node->safe_psql('postgres', q{
    SELECT string_agg(DISTINCT concat_ws('|', search_path, read_only, statement_timeout, work_mem,
                                         coalesce(nullif(custom, ''), '-'), advisory_locks, cursors), ',')
      FROM mal.seen}),
    "pg_catalog, pg_temp|off|0|4MB|-|0|0",
    'every record found the session as the first one did: search_path, read-only default, '
    . '(a custom setting the first call made is still defined, empty: PostgreSQL keeps placeholders) '
    . 'statement_timeout, work_mem, custom setting, no advisory lock, no open cursor');
is($node->safe_psql('postgres', q{
    SELECT string_agg(DISTINCT concat_ws('|', set_role, set_session_authorization, temp_table, prepare), ',')
      FROM mal.seen}),
    '42501|42501|42501|42501',
    'SET ROLE, SET SESSION AUTHORIZATION, CREATE TEMP TABLE and PREPARE are refused in a handler');
is($node->safe_psql('postgres', q{SELECT count(*) FROM mal.calls}), '0',
    'none of the shadowing functions and operators was ever called')
  or diag($node->safe_psql('postgres', q{SELECT fn, by_role, backend_type, count(*) FROM mal.calls GROUP BY 1, 2, 3}));
is($node->safe_psql('postgres', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'}), 'f',
    'the owner is still not a superuser');
my $inbox_pid = $node->safe_psql('postgres', q{
    SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox inbox worker'});
isnt($inbox_pid, '', 'the inbox worker runs');
is($node->safe_psql('postgres', qq{
    SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $inbox_pid}), '0',
    'the inbox worker holds no advisory lock after the handlers');
ok(!grep({ $_ eq $inbox_pid } worker_pids($node)), 'the handlers did not run in a delivery worker');

#-------------------------------------------------------------------------------------------
# The handler timeout.
#-------------------------------------------------------------------------------------------
$node->safe_psql('postgres', q{
    CREATE TABLE slow_seen (n int);
    CREATE FUNCTION slow_apply(m outbox.inbox_message) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE n int := (m.payload->>'n')::int;
    BEGIN
        INSERT INTO public.slow_seen VALUES (n);
        IF n = 1 THEN
            PERFORM pg_sleep(15);
        ELSIF n = 2 THEN
            -- catches the cancel and returns: still too long
            BEGIN PERFORM pg_sleep(15); EXCEPTION WHEN query_canceled THEN NULL; END;
        END IF;
    END $$;
});
$node->safe_psql('postgres', qq{
    SELECT outbox.create_subscription('slow_in', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topics": ["slow"], "batch_size": 1}',
        'slow_apply(outbox.inbox_message)');
    SELECT outbox.create_destination('slow', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "slow"}');
});
my $t0 = time;
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, payload)
    SELECT 'slow', jsonb_build_object('n', g) FROM generate_series(1, 3) g});
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM slow_seen}) eq '1'
      && $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.inbox_dead_letters WHERE subscription = 'slow_in'}) eq '2' }, 60),
    'the two slow records are dead-lettered, the third applied');
my $took = time - $t0;
cmp_ok($took, '<', 25, sprintf('each was cancelled after about 5 s, not 15 (%.1f s for both)', $took));
is($node->safe_psql('postgres', q{
    SELECT string_agg(last_sqlstate || ' ' || last_error, E'\n' ORDER BY "offset")
      FROM outbox.inbox_dead_letters WHERE subscription = 'slow_in'}),
    join("\n", ('57014 the handler ran longer than its handler_timeout (5s) and was cancelled') x 2),
    'with 57014 and what happened, also for the handler that caught the cancel');
is($node->safe_psql('postgres', q{SELECT string_agg(n::text, ',') FROM slow_seen}), '3',
    'their effects were rolled back; the next record was applied');

#-------------------------------------------------------------------------------------------
# The workers' own statements: a database default that puts the shadowing schema first on
# every session's search_path (the workers' included) changes nothing they run. The test's own
# sessions name their path first.
#-------------------------------------------------------------------------------------------
sub as_test { my ($sql) = @_; $node->safe_psql('postgres', "SET search_path = pg_catalog, public; $sql") }
as_test(q{
    ALTER DATABASE postgres SET search_path = mal, pg_catalog, pg_temp;
    TRUNCATE mal.calls;
});
$node->restart;
as_test(qq{
    SELECT outbox.create_destination('ordered', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "plain", "ordering": "key", "max_attempts": 1}');
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT d, 'k' || (g % 7), jsonb_build_object('n', g)
      FROM generate_series(1, 200) g, (VALUES ('plain'), ('ordered'), ('sandbox')) v(d);
});
ok(wait_until(sub { as_test(q{SELECT count(*) FROM outbox.messages}) eq '0' }, 90),
    'under the shadowing default path: every message delivered');
# A dead letter to requeue: the broker refuses the next produce for good.
$broker->ctl('errors produce 1 MSG_SIZE_TOO_LARGE');
as_test(q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('ordered', 'x', '{}')});
ok(wait_until(sub { as_test(q{SELECT count(*) FROM outbox.dead_letters}) eq '1' }, 60),
    'and a refused one dead-lettered');
# An operator's session with the shadowing schema first: the outbox functions pin their own.
$node->safe_psql('postgres', q{
    SELECT * FROM outbox.stats();
    SELECT outbox.requeue(array_agg(id)) FROM outbox.dead_letters;
    SELECT * FROM outbox.subscriptions();
});
ok(wait_until(sub { as_test(q{SELECT count(*) FROM outbox.messages}) eq '0' }, 90),
    'the requeued message is handled again');
is(as_test(q{SELECT count(*) FROM mal.calls}), '0',
    'with the shadowing schema first on the database\'s path, none of its functions or operators ran')
  or diag(as_test(q{SELECT fn, by_role, backend_type, count(*) FROM mal.calls GROUP BY 1, 2, 3}));
is(as_test(q{SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'}), 'f', 'mallory is still not a superuser');
as_test(q{ALTER DATABASE postgres RESET search_path});

check_server_log($node);
done_testing();
