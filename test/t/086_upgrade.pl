# Upgrade: ALTER EXTENSION outbox UPDATE with messages queued loses nothing and does not stop the
# worker.
# - From every version of outbox in pg_available_extension_versions other than the default: a
#   database of its own (added to outbox.databases by a reload) gets CREATE EXTENSION outbox
#   VERSION 'x', an unordered and an ordered (ordering = key) Kafka destination, 2,000 messages
#   each queued while they are paused (the ordered ones produced through the older schema, as
#   producers keep running between installing this module and ALTER EXTENSION UPDATE), and
#   dead letters that hold five of the ordered keys; the worker waits for the update; then
#   ALTER EXTENSION outbox UPDATE (an update path must exist): the queue and the dead letters
#   are unchanged, every key has its row in outbox.ordered_keys, and after resume and a requeue
#   every event_id arrives and every key's messages arrive in id order. The updated schema is
#   the same as a fresh install's (every object of the extension, compared from the catalogs:
#   pg_dump --schema-only prints only CREATE EXTENSION for an extension's member objects).
# - Always: in a database at the default version, with 2,000 messages queued and then with
#   producers running, ALTER EXTENSION outbox UPDATE (and UPDATE TO the default version) is a
#   clean no-op: the version, the extension's objects, the queue and the destinations are
#   unchanged, the same worker process keeps delivering, and every event_id arrives.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('upgrade', conf => 'log_statement = none');

my $default = $node->safe_psql('postgres',
    q{SELECT default_version FROM pg_available_extensions WHERE name = 'outbox'});
my @older = split /\n/, $node->safe_psql('postgres', q{
    SELECT version FROM pg_available_extension_versions
     WHERE name = 'outbox' AND version <> (SELECT default_version FROM pg_available_extensions WHERE name = 'outbox')
     ORDER BY version});
diag("default version $default; older versions available: " . (@older ? join(', ', @older) : 'none'));
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'}),
    $default, 'CREATE EXTENSION installs the default version');

# The extension's member objects, as text: unchanged by a no-op update.
sub members {
    my ($db) = @_;
    return $node->safe_psql($db, q{
        SELECT md5(string_agg(pg_describe_object(classid, objid, objsubid), ',' ORDER BY 1))
          FROM pg_depend
         WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
           AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')});
}
# Queues $n messages for $dest in $db, recording their event_ids; returns them.
sub produce_in {
    my ($db, $dest, $n) = @_;
    return @{ produce($node, $dest, 1, $n, key => 'k', db => $db, record => 'produced (event_id) SELECT event_id') };
}

#-------------------------------------------------------------------------------------------
# From each older version.
#-------------------------------------------------------------------------------------------
# Every object of the extension in schema outbox, with its definition, as text.
my $schema_sql = q{
    SELECT string_agg(def, E'\n' ORDER BY def) FROM (
        SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
               || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
               || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
               || coalesce(' collate ' || co.collname, '') AS def
          FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
          LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
          LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 100
         WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'v', 'S')
        UNION ALL
        SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
         WHERE c.relnamespace = 'outbox'::regnamespace
        UNION ALL
        SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
          FROM pg_constraint WHERE connamespace = 'outbox'::regnamespace
        UNION ALL
        SELECT 'trigger ' || pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
          FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         WHERE c.relnamespace = 'outbox'::regnamespace AND NOT t.tgisinternal
        UNION ALL
        SELECT 'function ' || pg_get_functiondef(p.oid) || ' acl=' || coalesce(p.proacl::text, '')
          FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace
        UNION ALL
        SELECT 'relation ' || c.oid::regclass || ' ' || c.relkind::text || ' acl=' || coalesce(c.relacl::text, '')
               || ' options=' || coalesce(c.reloptions::text, '')
          FROM pg_class c WHERE c.relnamespace = 'outbox'::regnamespace
        UNION ALL
        SELECT 'comment ' || pg_describe_object(classoid, objoid, objsubid) || ' ' || description
          FROM pg_description WHERE objoid IN (
              SELECT objid FROM pg_depend WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox'))
        UNION ALL
        SELECT 'member ' || pg_describe_object(classid, objid, objsubid)
          FROM pg_depend WHERE deptype = 'e' AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
        UNION ALL
        SELECT 'dumped ' || array_to_string(ARRAY(SELECT unnest(extconfig)::regclass::text ORDER BY 1), ',')
               || ' ' || coalesce(array_to_string(extcondition, ','), '')
          FROM pg_extension WHERE extname = 'outbox'
    ) AS objects};
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION outbox');
my $fresh_schema = $node->safe_psql('fresh', $schema_sql);

my @databases = ('postgres');
for my $i (0 .. $#older) {
    my $from = $older[$i];
    my $db = "upgrade_from_$i";
    my $topic = "up_$i";
    my $keyed = "upk_$i";
    $node->safe_psql('postgres', "CREATE DATABASE $db");
    push @databases, $db;
    $node->append_conf('postgresql.conf', "outbox.databases = '" . join(', ', @databases) . "'\n");
    $node->reload;
    $node->safe_psql($db, qq{
        CREATE EXTENSION outbox VERSION '$from';
        CREATE TABLE produced (event_id uuid PRIMARY KEY, id bigint, key text);
        SELECT outbox.create_destination('$topic', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "$topic"}');
        SELECT outbox.create_destination('$keyed', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "$keyed", "ordering": "key"}');
        SELECT outbox.pause('$topic');
        SELECT outbox.pause('$keyed');
    });
    my @produced = produce_in($db, $topic, 2000);
    # 2,000 ordered messages over 20 keys, 8 producers' worth of transactions of 25.
    for my $batch (0 .. 79) {
        $node->safe_psql($db, qq{
            WITH m AS (
                INSERT INTO outbox.messages (destination, key, payload)
                SELECT '$keyed', 'key' || (g % 20), jsonb_build_object('n', g)
                  FROM generate_series($batch * 25, $batch * 25 + 24) g
                RETURNING event_id, id, key)
            INSERT INTO produced SELECT * FROM m});
    }
    # The first message of five keys failed for good: dead letters that hold their keys.
    $node->safe_psql($db, qq{
        WITH heads AS (
            DELETE FROM outbox.messages WHERE id IN (
                SELECT DISTINCT ON (key) id FROM outbox.messages
                 WHERE destination = '$keyed' AND key IN ('key1', 'key2', 'key3', 'key4', 'key5')
                 ORDER BY key, id)
            RETURNING *)
        INSERT INTO outbox.dead_letters (id, event_id, destination, topic, key, payload, payload_bytes,
                                         headers, expires_at, created_at, attempts, reason, last_error)
        SELECT id, event_id, destination, topic, key, payload, payload_bytes, headers, expires_at,
               created_at, 1, 'rejected', 'INVALID_RECORD' FROM heads});
    my $before = $node->safe_psql($db, q{
        SELECT (SELECT count(*) FROM outbox.messages) || ' queued, ' || (SELECT count(*) FROM outbox.dead_letters) || ' dead'});
    is($before, '3995 queued, 5 dead', "$from: 3,995 messages queued and 5 dead letters before the update");
    # The worker does not serve the older schema; it says so.
    $node->safe_psql($db, "SELECT outbox.resume('$topic')");
    ok(wait_until(sub { PostgreSQL::Test::Utils::slurp_file($node->logfile) =~
        /database "$db" has extension "outbox" \Q$from\E, this module is \Q$default\E; the worker waits for ALTER EXTENSION outbox UPDATE/ }, 30),
        "$from: the worker waits for ALTER EXTENSION UPDATE, and says so");
    is(queued($node, undef, db => $db), 3995, "$from: nothing delivered from the older schema");
    $node->safe_psql($db, "SELECT outbox.pause('$topic')");

    my $path = $node->safe_psql($db, qq{
        SELECT path FROM pg_extension_update_paths('outbox') WHERE source = '$from' AND target = '$default'});
    ok($path ne '', "$from: an update path to $default exists ($path)");
    $node->safe_psql($db, 'ALTER EXTENSION outbox UPDATE');
    is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'}), $default,
        "$from: updated to $default");
    is($node->safe_psql($db, q{
        SELECT (SELECT count(*) FROM outbox.messages) || ' queued, ' || (SELECT count(*) FROM outbox.dead_letters) || ' dead'}),
        $before, "$from: the queue and the dead letters are unchanged by the update");
    is($node->safe_psql($db, qq{
        SELECT count(*) || ' keys, floors ' || bool_and(k.floor <= (SELECT min(m.id) FROM outbox.messages m WHERE m.order_key = k.order_key))
          FROM outbox.ordered_keys k WHERE k.destination = '$keyed'}),
        '20 keys, floors true', "$from: every ordered key has its row, from its first message");
    my $schema = $node->safe_psql($db, $schema_sql);
    is($schema, $fresh_schema, "$from: the updated schema is the same as a fresh $default install's")
      or diag(join("\n", grep { my $l = $_; index($fresh_schema, $l) < 0 } split /\n/, $schema));

    $node->safe_psql($db, "SELECT outbox.resume('$topic'); SELECT outbox.resume('$keyed')");
    ok(wait_until(sub { $node->safe_psql($db, "SELECT count(*) FROM outbox.messages WHERE destination = '$topic'") eq '0' }, 60),
        "$from: the unordered messages are delivered after the update");
    # The keys the dead letters hold wait; the others are delivered.
    ok(wait_until(sub { $node->safe_psql($db, "SELECT count(*) FROM outbox.blocked_keys('$keyed')") eq '5'
                          && $node->safe_psql($db, "SELECT count(DISTINCT key) FROM outbox.messages WHERE destination = '$keyed'") eq '5' }, 60),
        "$from: 15 keys delivered, 5 held by their dead letters");
    is($node->safe_psql($db, "SELECT outbox.requeue('$keyed')"), '5', "$from: the dead letters are requeued");
    ok(wait_until(sub { queued($node, undef, db => $db) eq '0' }, 60), "$from: everything delivered");
    is($node->safe_psql($db, 'SELECT count(*) FROM outbox.dead_letters'), '0', "$from: nothing dead-lettered");
    fault_summary("upgrade_from_$from", produced => \@produced, received => kafka_event_ids($broker, $topic));
    check_key_order($node, qq{SELECT event_id, id, key FROM produced WHERE key IS NOT NULL AND key LIKE 'key%'},
        $broker->consume($keyed), "$from: ordered messages queued before the update", $db);
}

#-------------------------------------------------------------------------------------------
# At the default version: a no-op with messages queued and with producers running.
#-------------------------------------------------------------------------------------------
$node->safe_psql('postgres', qq{
    CREATE TABLE produced (event_id uuid PRIMARY KEY);
    SELECT outbox.create_destination('noop', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "noop"}');
});
my @produced = produce_in('postgres', 'noop', 1);   # warm-up
ok(wait_until(sub { queued($node, undef, db => 'postgres') eq '0' }, 30), 'warm-up delivered');
sub postgres_worker {
    return $node->safe_psql('postgres', q{SELECT string_agg(pid::text, ',') FROM outbox.workers() WHERE database = 'postgres'});
}
my $pid = postgres_worker();
my $delivered = $node->safe_psql('postgres', "SELECT delivered FROM outbox.workers() WHERE pid = $pid");
my $members = members('postgres');
my $config = $node->safe_psql('postgres', q{SELECT name || ' ' || kind || ' ' || config::text || ' ' || paused FROM outbox.destinations});

$node->safe_psql('postgres', q{SELECT outbox.pause('noop')});
push @produced, produce_in('postgres', 'noop', 2000);
my ($ret, $out, $err) = $node->psql('postgres', 'ALTER EXTENSION outbox UPDATE');
is($ret, 0, 'ALTER EXTENSION outbox UPDATE succeeds with 2,000 messages queued');
like($err, qr/version "\Q$default\E" of extension "outbox" is already installed/, 'and says it has nothing to do');
($ret, $out, $err) = $node->psql('postgres', "ALTER EXTENSION outbox UPDATE TO '$default'");
is($ret, 0, "ALTER EXTENSION outbox UPDATE TO '$default' succeeds too");
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'}), $default,
    'the version is unchanged');
is(members('postgres'), $members, "the extension's objects are unchanged");
is($node->safe_psql('postgres', q{SELECT name || ' ' || kind || ' ' || config::text || ' ' || paused FROM outbox.destinations}),
    $config =~ s/ false$/ true/r, 'the destination is unchanged (still paused, same config)');
is(queued($node, undef, db => 'postgres'), 2000, 'the 2,000 messages are still queued');
$node->safe_psql('postgres', q{SELECT outbox.resume('noop')});
ok(wait_until(sub { queued($node, undef, db => 'postgres') eq '0' }, 60), 'after resume they are delivered');

# With producers running: ~200 messages/s for 6 s, an update in the middle.
my $pgbench = start_pgbench($node, clients => 1, rate => 200, seconds => 6, script => q{
WITH m AS (
    INSERT INTO outbox.messages (destination, payload) VALUES ('noop', '{"live": true}')
    RETURNING event_id)
INSERT INTO produced SELECT event_id FROM m;
});
sleep 3;   # the producers run a while before the update, and on through it
$node->safe_psql('postgres', 'ALTER EXTENSION outbox UPDATE');
ok($pgbench->finish, 'the producers ran through the update') or diag(${ $pgbench->{outbox_err} });
ok(wait_until(sub { queued($node, undef, db => 'postgres') eq '0' }, 60), 'everything produced meanwhile is delivered');
is(postgres_worker(), $pid, "the same worker (pid $pid) ran throughout");
cmp_ok($node->safe_psql('postgres', "SELECT delivered FROM outbox.workers() WHERE pid = $pid") - $delivered,
    '>=', 2000, 'and it delivered the messages');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');

@produced = split /\n/, $node->safe_psql('postgres', 'SELECT event_id FROM produced');
fault_summary('upgrade_noop', produced => \@produced, received => kafka_event_ids($broker, 'noop'));

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
