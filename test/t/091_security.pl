# Security, end to end:
#  1. Secrets never leak: destinations with a webhook secret, a Kafka sasl.password and URLs
#     with user:password@ credentials fail in every way (HTTP 500 and 404, refused
#     connections, failed SASL); no secret shows in the server log, the dead letters, the
#     queue, outbox.stats(), outbox.workers(), pg_stat_activity, or the errors of refused
#     create/alter_destination calls.
#  2. Privileges: a producer, an operator and a destination manager with exactly the GRANTs
#     README.md documents, and a plain role; PUBLIC has nothing in schema outbox.
#  3. The worker runs as a superuser: the owner of a database and of its public schema shadows
#     the built-ins the worker's SQL uses and puts public first on the database's and its own
#     search_path; the restarted worker still delivers and never calls them.
#  4. A destination manager (not a superuser) cannot make the server run a command.
#  5. A producer cannot take over relay-owned columns to break other producers or the worker.
use strict;
use warnings;
use IO::Socket::INET;
use JSON::PP;
use MIME::Base64 qw(encode_base64);
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $sink = webhook_sink();
my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('security', conf => join("\n",
    # PostgreSQL::Test::Cluster logs every statement; a production server does not. Failing
    # statements are still logged (log_min_error_statement = error, the default).
    "log_statement = 'none'",
    "log_min_messages = debug1",
    "outbox.databases = 'postgres, app'",
    "outbox.retry_base = '50ms'", "outbox.retry_max = '200ms'", "outbox.lease_timeout = '10s'"));

sub sql { my ($sql, $db) = @_; return $node->safe_psql($db // 'postgres', $sql); }

# Runs $sql as $role; returns (exit code, stdout, stderr).
sub as_role {
    my ($role, $sql, $db) = @_;
    my ($out, $err) = ('', '');
    my $rc = $node->psql($db // 'postgres', $sql, stdout => \$out, stderr => \$err,
        extra_params => ['-U', $role]);
    return ($rc, $out, $err);
}
sub allowed {
    my ($role, $sql, $what, $db) = @_;
    my ($rc, $out, $err) = as_role($role, $sql, $db);
    is($rc, 0, "$role can $what") or diag($err);
    return $out;
}
sub denied {
    my ($role, $sql, $what, $db) = @_;
    my ($rc, $out, $err) = as_role($role, $sql, $db);
    ok($rc != 0 && $err =~ /permission denied/, "$role cannot $what")
      or diag("rc=$rc stdout=$out stderr=$err");
}
sub free_port {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1) or die $!;
    my $port = $s->sockport;
    close $s;
    return $port;
}
sub json { return JSON::PP->new->canonical->encode($_[0]); }
sub lit { my ($s) = @_; return "'" . ($s =~ s/'/''/gr) . "'"; }

#-------------------------------------------------------------------------------------------
# 1. Secrets never leak.
#-------------------------------------------------------------------------------------------
my $uniq = sprintf('%d%06d', $$, int(rand(1_000_000)));
my %marker = map { $_ => "${_}MARK$uniq" } qw(WHSEC SASL SASLREFUSED URLPW URLPWREFUSED
    HDR BAD1 BAD2 BAD3 BAD4 BAD5 BAD6 BAD7);
my $whsec = 'whsec_' . encode_base64($marker{WHSEC}, '');
my %forms = (%marker, WHSEC_B64 => substr($whsec, 6));   # the secret as stored, too
my $refused = free_port();
my $sink_port = $sink->port;

my %dest = (
    sec_hook_500 => ['webhook', { url => "http://outbox:$marker{URLPW}\@127.0.0.1:$sink_port/fail;status=500",
        secret => $whsec, headers => { authorization => "Bearer $marker{HDR}" }, max_attempts => 2 }],
    sec_hook_404 => ['webhook', { url => $sink->url('/gone;status=404'), secret => $whsec }],
    sec_hook_refused => ['webhook', { url => "http://outbox:$marker{URLPWREFUSED}\@127.0.0.1:$refused/",
        secret => [$whsec, 'whsec_c2VjcmV0Mg=='] }],
    sec_kafka_sasl => ['kafka', { 'bootstrap.servers' => $bootstrap, topic => 'sec',
        'security.protocol' => 'SASL_PLAINTEXT', 'sasl.mechanisms' => 'PLAIN',
        'sasl.username' => 'outbox', 'sasl.password' => $marker{SASL} }],
    sec_kafka_refused => ['kafka', { 'bootstrap.servers' => "127.0.0.1:$refused", topic => 'sec',
        'security.protocol' => 'SASL_PLAINTEXT', 'sasl.mechanisms' => 'SCRAM-SHA-256',
        'sasl.username' => 'outbox', 'sasl.password' => $marker{SASLREFUSED} }],
);
# (A SASL/OAUTHBEARER config is tested in 092_kafka_oauthbearer.pl: a bad one crashes the worker.)
for my $name (sort keys %dest) {
    my ($kind, $config) = @{ $dest{$name} };
    sql("SELECT outbox.create_destination('$name', '$kind', " . lit(json($config)) . ')');
}
sql(q{INSERT INTO outbox.messages (destination, payload)
      SELECT d, jsonb_build_object('n', g)
        FROM unnest(ARRAY['sec_hook_500', 'sec_hook_404', 'sec_hook_refused', 'sec_kafka_sasl',
                          'sec_kafka_refused']) d, generate_series(1, 3) g});
ok(wait_until(sub { sql(q{SELECT count(*) FROM outbox.dead_letters WHERE destination IN ('sec_hook_500', 'sec_hook_404')}) eq '6' }, 60),
    'the webhooks answering 500 and 404 have their messages dead-lettered');
ok(wait_until(sub { sql(q{SELECT count(*) FROM outbox.stats() WHERE destination LIKE 'sec_%' AND last_error IS NULL}) eq '0' }, 60),
    'every failing destination has a last_error');
note(sql(q{SELECT string_agg(destination || ': ' || last_error, E'\n') FROM outbox.stats() WHERE destination LIKE 'sec_%'}));
ok(wait_until(sub { sql(q{SELECT last_error FROM outbox.stats() WHERE destination = 'sec_kafka_sasl'}) =~ /_AUTHENTICATION/ }, 30),
    'last_error names the failed SASL authentication, not just the purge of what waited');
sleep 2;   # a few more rounds of failures: librdkafka's reconnects and SASL retries go by its own timers

# Refused create/alter_destination calls with secrets in bad values: the errors name the
# setting, never the value.
my @refusals = (
    ['webhook URL credentials and a bad secret', sprintf(q|SELECT outbox.create_destination('sec_bad1', 'webhook', '{"url": "http://outbox:%s@/x", "secret": "whsec_%s!!"}')|, $marker{BAD1}, $marker{BAD2})],
    ['a sasl.password of the wrong type', sprintf(q|SELECT outbox.create_destination('sec_bad2', 'kafka', '{"bootstrap.servers": "", "sasl.password": {"x": "%s"}}')|, $marker{BAD3})],
    ['a bad secret in an array', sprintf(q|SELECT outbox.alter_destination('sec_hook_404', '{"secret": ["whsec_%s!!"], "timeout_ms": "x"}')|, $marker{BAD4})],
    ['a sasl.password next to a bad setting', sprintf(q|SELECT outbox.alter_destination('sec_kafka_sasl', '{"sasl.password": "%s", "linger.ms": "soon"}')|, $marker{BAD5})],
    ['a static authorization header with CR/LF', sprintf(q|SELECT outbox.create_destination('sec_bad3', 'webhook', '{"url": "http://127.0.0.1:1/", "headers": {"authorization": "Bearer %s\r\n"}}')|, $marker{BAD6})],
);
my @config_error_markers = qw(BAD1 BAD2 BAD3 BAD4 BAD5 BAD6);
for my $r (@refusals) {
    my ($what, $stmt) = @$r;
    my ($rc, $out, $err) = $node->psql('postgres', $stmt);
    ok($rc != 0 && $err =~ /invalid configuration/, "refused: $what");
    my @seen = grep { index($err, $forms{$_}) >= 0 } sort keys %forms;
    is("@seen", '', "the error for $what shows no secret") or diag($err);
}
# A secret in a call refused for another reason (the name is taken).
$node->psql('postgres', sprintf(q|SELECT outbox.create_destination('sec_hook_404', 'kafka', '{"bootstrap.servers": "b:9092", "sasl.password": "%s"}')|, $marker{BAD7}));

sub markers_in {
    my ($text) = @_;
    return join(' ', grep { index($text, $forms{$_}) >= 0 } sort keys %forms);
}
is(markers_in(sql(q{SELECT coalesce(string_agg(last_error, E'\n'), '') FROM outbox.dead_letters})), '',
    'no secret in outbox.dead_letters.last_error');
is(markers_in(sql(q{SELECT coalesce(string_agg(last_error, E'\n'), '') FROM outbox.messages})), '',
    'no secret in outbox.messages.last_error');
is(markers_in(sql(q{SELECT coalesce(string_agg(row_to_json(s)::text, E'\n'), '') FROM outbox.stats() s})), '',
    'no secret in any column of outbox.stats()');
is(markers_in(sql(q{SELECT coalesce(string_agg(row_to_json(w)::text, E'\n'), '') FROM outbox.workers() w})), '',
    'no secret in any column of outbox.workers()');
is(markers_in(sql(q{SELECT coalesce(string_agg(row_to_json(a)::text, E'\n'), '') FROM pg_stat_activity a WHERE pid <> pg_backend_pid()})), '',
    'no secret in pg_stat_activity (every backend, the worker included)');
my @log = split /\n/, slurp_file($node->logfile);
my @leaks = grep { markers_in($_) ne '' && !/\bSTATEMENT:/ } @log;
is(scalar(@leaks), 0, 'no secret in any server log message')
  or diag(join("\n", map { substr($_, 0, 300) } @leaks[0 .. ($#leaks < 4 ? $#leaks : 4)]));
my $config_markers = join('|', map { quotemeta($forms{$_}) } @config_error_markers);
my @statements = grep { /\bSTATEMENT:/ && /$config_markers/ } @log;
is(scalar(@statements), 0,
    'the server log does not echo the statement of a refused create/alter_destination (it holds the secret)')
  or diag(substr($statements[0], 0, 300));
is(scalar(grep { /STATEMENT:/ && index($_, $forms{BAD7}) >= 0 } @log), 0,
    'nor the statement of a call refused for its name (create_destination logs no statement)');

#-------------------------------------------------------------------------------------------
# 2. Privileges, with the GRANTs of README.md.
#-------------------------------------------------------------------------------------------
my $ok_url = $sink->url('/ok');
sql(qq{
    SELECT outbox.create_destination('hook_ok', 'webhook', '{"url": "$ok_url"}');
    CREATE ROLE app LOGIN; CREATE ROLE app2 LOGIN; CREATE ROLE ops LOGIN;
    CREATE ROLE platform LOGIN; CREATE ROLE nobody LOGIN;
    -- a producer
    GRANT USAGE ON SCHEMA outbox TO app, app2;
    GRANT INSERT ON outbox.messages TO app, app2;
    GRANT EXECUTE ON FUNCTION outbox.publish(text[], text, jsonb, text, jsonb) TO app, app2;
    -- an operator
    GRANT USAGE ON SCHEMA outbox TO ops;
    GRANT SELECT ON outbox.messages, outbox.dead_letters TO ops;
    GRANT EXECUTE ON FUNCTION outbox.stats(), outbox.workers(), outbox.wake(), outbox.pause(text),
        outbox.resume(text), outbox.requeue(bigint[]), outbox.requeue(text, timestamptz) TO ops;
    -- whoever manages destinations
    GRANT USAGE ON SCHEMA outbox TO platform;
    GRANT EXECUTE ON FUNCTION outbox.create_destination(text, text, jsonb),
        outbox.alter_destination(text, jsonb), outbox.drop_destination(text, boolean) TO platform;
    ANALYZE outbox.destinations, outbox.messages, outbox.dead_letters});

# The producer.
allowed('app', q{INSERT INTO outbox.messages (destination, payload) VALUES ('hook_ok', '{"by": "app"}')}, 'INSERT a message');
allowed('app', q{SELECT outbox.publish(ARRAY['hook_ok'], 't', '{"by": "app"}')}, 'publish');
allowed('app', q{SELECT outbox.uuid_generate_v7()}, 'generate an event id (the column default)');
denied('app', q{SELECT * FROM outbox.messages}, 'read the queue');
denied('app', q{INSERT INTO outbox.messages (destination, payload) VALUES ('hook_ok', '{}') RETURNING *}, 'read its message back with RETURNING');
denied('app', q{COPY outbox.messages TO STDOUT}, 'COPY the queue out');
denied('app', q{SELECT * FROM outbox.dead_letters}, 'read the dead letters');
denied('app', q{SELECT config FROM outbox.destinations}, 'read destination configs');
denied('app', q{UPDATE outbox.messages SET available_at = now()}, 'UPDATE messages');
denied('app', q{DELETE FROM outbox.messages}, 'DELETE messages');
denied('app', q{TRUNCATE outbox.messages}, 'TRUNCATE messages');
denied('app', q{SELECT nextval('outbox.messages_id_seq')}, 'use the id sequence');
for my $call ('outbox.stats()', 'outbox.workers()', 'outbox.wake()', q{outbox.pause('hook_ok')},
    q{outbox.resume('hook_ok')}, q{outbox.requeue(ARRAY[1]::bigint[])}, q{outbox.requeue('hook_ok')},
    'outbox.skip(1)', q{outbox.blocked_keys('hook_ok')},
    q{outbox.create_destination('mine', 'webhook', '{"url": "http://127.0.0.1:1/"}')},
    q{outbox.alter_destination('hook_ok', '{"url": "http://evil.example/"}')},
    q{outbox.drop_destination('hook_ok', true)}, q{outbox._key_heads('hook_ok')},
    q{outbox._order_key('a', 'b')}, 'outbox._destination_counters()') {
    denied('app', "SELECT $call", "call $call");
}
is((as_role('app', q{SELECT count(*) FROM pg_stats WHERE schemaname = 'outbox'}))[1], '0',
    'app sees no column statistics of the outbox tables (pg_stats)');
# Another producer's message, while its transaction is open.
my $bg = $node->background_psql('postgres', extra_params => ['-U', 'app2']);
$bg->query_safe(q{BEGIN; INSERT INTO outbox.messages (destination, payload) VALUES ('hook_ok', '{"secret": "APP2-PRIVATE"}')});
is((as_role('app', q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%' || 'APP2' || '-PRIVATE%'}))[1], '0',
    "app cannot see app2's message in pg_stat_activity");
$bg->query_safe('COMMIT');
$bg->quit;

# The operator.
allowed('ops', q{SELECT * FROM outbox.stats()}, 'read outbox.stats()');
allowed('ops', q{SELECT * FROM outbox.workers()}, 'read outbox.workers()');
allowed('ops', q{SELECT outbox.wake()}, 'wake the workers');
allowed('ops', q{SELECT outbox.pause('hook_ok'); SELECT outbox.resume('hook_ok')}, 'pause and resume');
allowed('ops', q{SELECT count(*) FROM outbox.messages}, 'read the queue');
my $dead_id = allowed('ops', q{SELECT min(id) FROM outbox.dead_letters WHERE destination = 'sec_hook_404'}, 'read the dead letters');
is(allowed('ops', "SELECT outbox.requeue(ARRAY[$dead_id]::bigint[])", 'requeue by id'), '1', 'the dead letter was requeued');
allowed('ops', q{SELECT outbox.requeue('sec_hook_500')}, 'requeue by destination');
denied('ops', q{SELECT config FROM outbox.destinations}, 'read destination configs');
denied('ops', q{SELECT * FROM outbox.destinations}, 'read the destinations table');
denied('ops', q{INSERT INTO outbox.messages (destination, payload) VALUES ('hook_ok', '{}')}, 'produce');
denied('ops', q{DELETE FROM outbox.dead_letters}, 'delete dead letters');
denied('ops', q{UPDATE outbox.messages SET attempts = 0}, 'UPDATE messages');
denied('ops', q{SELECT outbox.create_destination('mine', 'webhook', '{"url": "http://127.0.0.1:1/"}')}, 'create a destination');
denied('ops', q{SELECT outbox.alter_destination('hook_ok', '{"url": "http://evil.example/"}')}, 'alter a destination');
denied('ops', q{SELECT outbox.drop_destination('hook_ok')}, 'drop a destination');
denied('ops', q{SELECT outbox.skip(1)}, 'skip a dead letter (not in the operator GRANTs)');
denied('ops', q{SELECT outbox._key_heads('hook_ok')}, 'call internal functions');
sql('GRANT SELECT (name, config) ON outbox.destinations TO ops');
allowed('ops', q{SELECT config FROM outbox.destinations}, 'read configs once granted explicitly');
sql('REVOKE SELECT (name, config) ON outbox.destinations FROM ops');
denied('ops', q{SELECT config FROM outbox.destinations}, 'read configs after the REVOKE');

# The destination manager, with exactly the GRANT of README.md.
allowed('platform', q{SELECT outbox.create_destination('platform_hook2', 'webhook', '{"url": "http://127.0.0.1:1/"}')}, 'create a destination');
allowed('platform', q{SELECT outbox.alter_destination('platform_hook2', '{"timeout_ms": 1000}')}, 'alter a destination');
allowed('platform', q{SELECT outbox.drop_destination('platform_hook2')}, 'drop a destination');
denied('platform', q{SELECT config FROM outbox.destinations}, 'read destination configs');
denied('platform', q{INSERT INTO outbox.messages (destination, payload) VALUES ('hook_ok', '{}')}, 'produce');

# A plain role: nothing at all.
for my $stmt (q{INSERT INTO outbox.messages (destination, payload) VALUES ('hook_ok', '{}')},
    q{SELECT * FROM outbox.messages}, q{SELECT * FROM outbox.dead_letters},
    q{SELECT * FROM outbox.destinations}, q{SELECT outbox.stats()},
    q{SELECT outbox.publish(ARRAY['hook_ok'], 't', '{}')}, q{SELECT outbox.uuid_generate_v7()}) {
    denied('nobody', $stmt, "run: $stmt");
}

# PUBLIC, from the catalog: no privilege on the schema, its tables and sequences; EXECUTE on
# no function but the event_id default (README.md).
is(sql(q{SELECT count(*) FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
          WHERE n.nspname = 'outbox' AND a.grantee = 0}), '0', 'PUBLIC has no privilege on schema outbox');
is(sql(q{SELECT coalesce(string_agg(c.relname || ':' || a.privilege_type, ' '), '')
           FROM pg_class c, aclexplode(coalesce(c.relacl, acldefault((CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END)::"char", c.relowner))) a
          WHERE c.relnamespace = 'outbox'::regnamespace AND a.grantee = 0}), '',
    'PUBLIC has no privilege on any table or sequence in schema outbox');
my @functions = split /\n/, sql(q{
    SELECT p.oid::regprocedure || '|' || EXISTS (
               SELECT FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
           || '|' || p.prosecdef || '|' || coalesce(array_to_string(p.proconfig, ','), '')
           || '|' || l.lanname
      FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
     WHERE p.pronamespace = 'outbox'::regnamespace ORDER BY 1});
cmp_ok(scalar(@functions), '>=', 20, scalar(@functions) . ' functions in schema outbox');
for my $f (@functions) {
    my ($sig, $public, $secdef, $config, $lang) = split /\|/, $f;
    ($public, $secdef) = map { /^t/ ? 't' : 'f' } ($public, $secdef);   # text of a boolean
    if ($sig eq 'outbox.uuid_generate_v7()') {
        is($public, 't', "PUBLIC may execute $sig (the event_id default; documented)");
    } else {
        is($public, 'f', "PUBLIC cannot execute $sig");
    }
    if ($secdef eq 't' || $lang eq 'plpgsql' || $lang eq 'sql') {
        like($config, qr/search_path=pg_catalog, pg_temp/,
            "$sig " . ($secdef eq 't' ? '(SECURITY DEFINER) ' : '') . 'runs with a fixed search_path');
    }
}

#-------------------------------------------------------------------------------------------
# 3. The worker cannot be hijacked through search_path by a database owner.
#-------------------------------------------------------------------------------------------
my $hijack_url = $sink->url('/hijack');
sql(q{CREATE ROLE evil LOGIN; CREATE DATABASE app OWNER evil});
sql(qq{
    CREATE EXTENSION outbox;
    SELECT outbox.create_destination('hj_hook', 'webhook', '{"url": "$hijack_url"}');
    SELECT outbox.create_destination('hj_kafka', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "hijack"}');
    SELECT outbox.create_destination('hj_ordered', 'webhook', '{"url": "$hijack_url", "ordering": "key"}');
    GRANT USAGE ON SCHEMA outbox TO evil;
    GRANT INSERT ON outbox.messages TO evil;
    GRANT EXECUTE ON FUNCTION outbox.publish(text[], text, jsonb, text, jsonb) TO evil}, 'app');
is(sql(q{SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'public'}, 'app'),
    'pg_database_owner', 'schema public of app belongs to its owner, evil');
allowed('evil', q{
    CREATE TABLE public.hijack_log (what text, by_user text DEFAULT current_user,
                                    app text DEFAULT current_setting('application_name'),
                                    at timestamptz DEFAULT clock_timestamp());
    GRANT ALL ON public.hijack_log TO PUBLIC;
    CREATE FUNCTION public.hijacked(what text) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO public.hijack_log (what) VALUES (what);
        RAISE WARNING 'HIJACKED: % by %', what, current_user;
    END $$;
    CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.hijacked('now()'); RETURN pg_catalog.now(); END $$;
    CREATE FUNCTION public.unnest(anyarray) RETURNS SETOF anyelement LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.hijacked('unnest'); RETURN QUERY SELECT pg_catalog.unnest($1); END $$;
    CREATE FUNCTION public.jsonb_strip_nulls(jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.hijacked('jsonb_strip_nulls'); RETURN pg_catalog.jsonb_strip_nulls($1); END $$;
    CREATE FUNCTION public.count_step(bigint) RETURNS bigint LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.hijacked('count(*)'); RETURN $1 + 1; END $$;
    CREATE AGGREGATE public.count(*) (SFUNC = public.count_step, STYPE = bigint, INITCOND = '0');
    CREATE FUNCTION public.h_texteq(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.hijacked('text = text'); RETURN pg_catalog.texteq($1, $2); END $$;
    CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.h_texteq);
    CREATE FUNCTION public.h_int8eq(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.hijacked('bigint = bigint'); RETURN pg_catalog.int8eq($1, $2); END $$;
    CREATE OPERATOR public.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.h_int8eq);
    CREATE FUNCTION public.h_tsle(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.hijacked('timestamptz <= timestamptz'); RETURN pg_catalog.timestamptz_le($1, $2); END $$;
    CREATE OPERATOR public.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.h_tsle);
    CREATE FUNCTION public.h_tsgt(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.hijacked('timestamptz > timestamptz'); RETURN pg_catalog.timestamptz_gt($1, $2); END $$;
    CREATE OPERATOR public.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.h_tsgt);
    CREATE FUNCTION public.h_tspl(timestamptz, interval) RETURNS timestamptz LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.hijacked('timestamptz + interval'); RETURN pg_catalog.timestamptz_pl_interval($1, $2); END $$;
    CREATE OPERATOR public.+ (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = public.h_tspl);
    -- exact matches for what pg_catalog only offers through an implicit cast
    CREATE FUNCTION public.h_int8mul(bigint, interval) RETURNS interval LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.hijacked('bigint * interval'); RETURN pg_catalog.interval_mul($2, $1::float8); END $$;
    CREATE OPERATOR public.* (LEFTARG = bigint, RIGHTARG = interval, FUNCTION = public.h_int8mul);
    CREATE FUNCTION public.h_int4mul(integer, interval) RETURNS interval LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.hijacked('integer * interval'); RETURN pg_catalog.interval_mul($2, $1::float8); END $$;
    CREATE OPERATOR public.* (LEFTARG = integer, RIGHTARG = interval, FUNCTION = public.h_int4mul);
    CREATE FUNCTION public.h_int48eq(integer, bigint) RETURNS boolean LANGUAGE plpgsql AS $$
    BEGIN PERFORM public.hijacked('integer = bigint'); RETURN pg_catalog.int48eq($1, $2); END $$;
    CREATE OPERATOR public.= (LEFTARG = integer, RIGHTARG = bigint, FUNCTION = public.h_int48eq);
    ALTER DATABASE app SET search_path = public, pg_catalog;
    ALTER ROLE evil SET search_path = public, pg_catalog}, 'shadow built-ins in schema public and put it first on the search_path', 'app');
# The trap works: an ordinary superuser session in app is hijacked.
sql(q{SELECT now(); SELECT 1::bigint = 1::bigint}, 'app');
cmp_ok(sql(q{SELECT pg_catalog.count(*) FROM public.hijack_log}, 'app'), '>=', 2,
    'the shadowing objects catch a session that uses the database search_path');
sql(q{TRUNCATE public.hijack_log}, 'app');
my $log_offset = -s $node->logfile;

# The worker of app is restarted so that it starts under these settings.
my $pin = 'SET search_path = pg_catalog, pg_temp; ';
sub app_worker {
    my ($pid) = split /\n/, sql($pin . q{SELECT pid FROM outbox.workers() WHERE database = 'app' ORDER BY pid}, 'app');
    return $pid;
}
my $old_worker;
ok(wait_until(sub { $old_worker = app_worker(); defined $old_worker }, 60), 'app has a worker');
sql($pin . "SELECT pg_terminate_backend($old_worker)", 'app');
ok(wait_until(sub { my $pid = app_worker(); defined $pid && $pid ne $old_worker }, 60),
    'the launcher restarted the worker of app');
allowed('evil', q{
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'hj_ordered', 'k' || (g % 3), jsonb_build_object('n', g) FROM generate_series(1, 9) g;
    SELECT outbox.publish(ARRAY['hj_hook', 'hj_kafka'], 'hijack', jsonb_build_object('n', g)) FROM generate_series(1, 10) g},
    'produce with public first on its search_path', 'app');
ok(wait_until(sub { sql($pin . 'SELECT pg_catalog.count(*) FROM outbox.messages', 'app') eq '0' }, 60),
    'the restarted worker delivered everything');
my %hooked = map { $_->{headers}{'webhook-id'} => 1 }
  grep { $_->{path} eq '/hijack' && $_->{status} == 204 } @{ $sink->requests };
is(scalar(keys %hooked), 19, 'the sink received the 19 webhook messages');
my %kafka_ids = map { $_->{headers}{ce_id} => 1 } @{ $broker->consume('hijack') };
is(scalar(keys %kafka_ids), 10, 'Kafka received the 10 messages');
# Admin functions called from a session with public first are not hijacked either.
sql(q{SELECT outbox.alter_destination('hj_hook', '{"timeout_ms": 2000}'); SELECT * FROM outbox.stats();
      SELECT outbox.pause('hj_hook'); SELECT outbox.resume('hj_hook'); SELECT outbox.requeue('hj_hook')}, 'app');
is(sql($pin . q{SELECT coalesce(pg_catalog.string_agg(what || ' by ' || by_user || ' (' || app || ')', ', '), '')
                  FROM public.hijack_log}, 'app'), '',
    'none of the shadowing functions or operators was ever called');
my $later_log = substr(slurp_file($node->logfile), $log_offset);
unlike($later_log, qr/HIJACKED/, 'and none logged its warning');

# The database owner's settings do not stop the superuser worker either.
allowed('evil', q{ALTER DATABASE app SET default_transaction_read_only = on}, 'make its database read-only by default', 'app');
my $w2 = app_worker();
sql($pin . "SELECT pg_terminate_backend($w2)", 'app');
ok(wait_until(sub { my $pid = app_worker(); defined $pid && $pid ne $w2 }, 60),
    'the worker of app restarted again');
sql($pin . q{SET default_transaction_read_only = off; BEGIN READ WRITE;
    INSERT INTO outbox.messages (destination, payload) SELECT 'hj_hook', jsonb_build_object('ro', g) FROM generate_series(1, 5) g;
    COMMIT}, 'app');
ok(wait_until(sub { sql($pin . 'SELECT pg_catalog.count(*) FROM outbox.messages', 'app') eq '0' }, 30),
    'with default_transaction_read_only = on for the database, the worker still delivers');
allowed('evil', q{SET default_transaction_read_only = off; ALTER DATABASE app RESET default_transaction_read_only}, 'reset it', 'app');

#-------------------------------------------------------------------------------------------
# 4. A destination manager cannot make the server run a program (librdkafka runs
#    sasl.kerberos.kinit.cmd with /bin/sh when a GSSAPI producer starts).
#-------------------------------------------------------------------------------------------
my $pwned = PostgreSQL::Test::Utils::tempdir() . '/kinit_ran';
my $kinit = json({ 'bootstrap.servers' => $bootstrap, topic => 'rce',
    'security.protocol' => 'SASL_PLAINTEXT', 'sasl.mechanisms' => 'GSSAPI',
    'sasl.kerberos.kinit.cmd' => "touch $pwned" });
my ($rc, $out, $err) = as_role('platform', "SELECT outbox.create_destination('rce', 'kafka', " . lit($kinit) . ')');
isnt($rc, 0, 'a destination manager cannot set sasl.kerberos.kinit.cmd (a shell command)')
  or diag('accepted');
if ($rc == 0) {
    sql(q{INSERT INTO outbox.messages (destination, payload) VALUES ('rce', '{}')});
    wait_until(sub { -e $pwned }, 15);
    sql(q{SELECT outbox.drop_destination('rce', force => true)});
}
ok(!-e $pwned, 'the server never ran a command chosen by a destination manager')
  or diag("$pwned was created by the database server's OS user");
($rc, $out, $err) = as_role('platform', "SELECT outbox.create_destination('engine', 'kafka', "
    . lit(json({ 'bootstrap.servers' => $bootstrap, 'ssl.engine.location' => '/tmp/engine.so' })) . ')');
isnt($rc, 0, 'a destination manager cannot make the worker load a shared library (ssl.engine.location)');

#-------------------------------------------------------------------------------------------
# 5. Relay-owned columns: a producer's forged id must not break other producers or the worker.
#-------------------------------------------------------------------------------------------
sql(q{SELECT outbox.create_destination('held', 'webhook', '{"url": "http://127.0.0.1:1/"}'); SELECT outbox.pause('held')});
my $next = sql(q{SELECT last_value + 1 FROM outbox.messages_id_seq});
($rc, $out, $err) = as_role('app', "INSERT INTO outbox.messages (id, destination, payload) OVERRIDING SYSTEM VALUE VALUES ($next, 'held', '{\"forged\": true}')");
isnt($rc, 0, 'a producer cannot choose the id of its message (OVERRIDING SYSTEM VALUE)');
($rc, $out, $err) = as_role('app2', q{INSERT INTO outbox.messages (destination, payload) VALUES ('held', '{"innocent": true}')});
is($rc, 0, "another producer's next INSERT is not refused because of it") or diag($err);

# A forged id equal to a dead letter's, on a destination that dead-letters it again.
sql(sprintf(q|SELECT outbox.create_destination('gone', 'webhook', '{"url": "%s"}');
      INSERT INTO outbox.messages (destination, payload) VALUES ('gone', '{"first": true}')|, $sink->url('/gone2;status=404')));
ok(wait_until(sub { sql(q{SELECT count(*) FROM outbox.dead_letters WHERE destination = 'gone'}) eq '1' }, 30),
    'a message is dead-lettered');
my $dl = sql(q{SELECT id FROM outbox.dead_letters WHERE destination = 'gone'});
($rc, $out, $err) = as_role('app', "INSERT INTO outbox.messages (id, destination, payload) OVERRIDING SYSTEM VALUE VALUES ($dl, 'gone', '{\"forged\": true}')");
isnt($rc, 0, 'a producer cannot reuse the id of a dead letter');
sql(q{INSERT INTO outbox.messages (destination, payload) SELECT 'hook_ok', jsonb_build_object('after', g) FROM generate_series(1, 5) g});
ok(wait_until(sub { sql(q{SELECT count(*) FROM outbox.messages WHERE destination = 'hook_ok'}) eq '0' }, 30),
    'deliveries to other destinations go on');
my @stuck = grep { /dead_letters_pkey/ } split /\n/, slurp_file($node->logfile);
is(scalar(@stuck), 0, 'the worker never fails on a duplicate dead letter id')
  or diag(scalar(@stuck) . ' times: ' . substr($stuck[0], 0, 300));

@leaks = grep { markers_in($_) ne '' && !/\bSTATEMENT:/ } split /\n/, slurp_file($node->logfile);
is(scalar(@leaks), 0, 'at the end still no secret in any server log message');

$node->stop;
check_server_log($node);
$broker->stop;
$sink->stop;
done_testing();
