# Upgrade: ALTER EXTENSION outbox UPDATE with messages queued loses nothing and does not stop the
# worker.
# - From every version of outbox in pg_available_extension_versions other than the default: a
#   database of its own (added to outbox.databases by a reload) gets CREATE EXTENSION outbox
#   VERSION 'x', a Kafka destination, 2,000 messages queued while it is paused, then ALTER
#   EXTENSION outbox UPDATE (an update path must exist), resume, and every event_id must arrive.
#   (Written against the 0.1.0 SQL API: create_destination, pause, resume. Today 0.1.0 is the
#   only version, so this loop has nothing to do until an older version ships.)
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
sub queued {
    my ($db) = @_;
    return $node->safe_psql($db, 'SELECT count(*) FROM outbox.messages');
}
# Queues $n messages for $dest in $db, recording their event_ids; returns them.
sub produce {
    my ($db, $dest, $n) = @_;
    return split /\n/, $node->safe_psql($db, qq{
        WITH m AS (
            INSERT INTO outbox.messages (destination, key, payload)
            SELECT '$dest', 'k' || g, jsonb_build_object('n', g) FROM generate_series(1, $n) g
            RETURNING event_id)
        INSERT INTO produced SELECT event_id FROM m RETURNING event_id});
}

#-------------------------------------------------------------------------------------------
# From each older version.
#-------------------------------------------------------------------------------------------
my @databases = ('postgres');
for my $i (0 .. $#older) {
    my $from = $older[$i];
    my $db = "upgrade_from_$i";
    my $topic = "up_$i";
    $node->safe_psql('postgres', "CREATE DATABASE $db");
    push @databases, $db;
    $node->append_conf('postgresql.conf', "outbox.databases = '" . join(', ', @databases) . "'\n");
    $node->reload;
    $node->safe_psql($db, qq{
        CREATE EXTENSION outbox VERSION '$from';
        CREATE TABLE produced (event_id uuid PRIMARY KEY);
        SELECT outbox.create_destination('$topic', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "$topic"}');
        SELECT outbox.pause('$topic');
    });
    my @produced = produce($db, $topic, 2000);
    my $path = $node->safe_psql($db, qq{
        SELECT path FROM pg_extension_update_paths('outbox') WHERE source = '$from' AND target = '$default'});
    ok($path ne '', "$from: an update path to $default exists ($path)");
    $node->safe_psql($db, 'ALTER EXTENSION outbox UPDATE');
    is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'outbox'}), $default,
        "$from: updated to $default");
    is(queued($db), 2000, "$from: the 2,000 queued messages are still queued after the update");
    $node->safe_psql($db, "SELECT outbox.resume('$topic')");
    ok(wait_until(sub { queued($db) eq '0' }, 60), "$from: all delivered after the update");
    is($node->safe_psql($db, 'SELECT count(*) FROM outbox.dead_letters'), '0', "$from: nothing dead-lettered");
    fault_summary("upgrade_from_$from", produced => \@produced, received => kafka_event_ids($broker, $topic));
}

#-------------------------------------------------------------------------------------------
# At the default version: a no-op with messages queued and with producers running.
#-------------------------------------------------------------------------------------------
$node->safe_psql('postgres', qq{
    CREATE TABLE produced (event_id uuid PRIMARY KEY);
    SELECT outbox.create_destination('noop', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "noop"}');
});
my @produced = produce('postgres', 'noop', 1);   # warm-up
ok(wait_until(sub { queued('postgres') eq '0' }, 30), 'warm-up delivered');
sub postgres_worker {
    return $node->safe_psql('postgres', q{SELECT string_agg(pid::text, ',') FROM outbox.workers() WHERE database = 'postgres'});
}
my $pid = postgres_worker();
my $delivered = $node->safe_psql('postgres', "SELECT delivered FROM outbox.workers() WHERE pid = $pid");
my $members = members('postgres');
my $config = $node->safe_psql('postgres', q{SELECT name || ' ' || kind || ' ' || config::text || ' ' || paused FROM outbox.destinations});

$node->safe_psql('postgres', q{SELECT outbox.pause('noop')});
push @produced, produce('postgres', 'noop', 2000);
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
is(queued('postgres'), 2000, 'the 2,000 messages are still queued');
$node->safe_psql('postgres', q{SELECT outbox.resume('noop')});
ok(wait_until(sub { queued('postgres') eq '0' }, 60), 'after resume they are delivered');

# With producers running: ~200 messages/s for 6 s, an update in the middle.
my $pgbench = start_pgbench($node, clients => 1, rate => 200, seconds => 6, script => q{
WITH m AS (
    INSERT INTO outbox.messages (destination, payload) VALUES ('noop', '{"live": true}')
    RETURNING event_id)
INSERT INTO produced SELECT event_id FROM m;
});
sleep 3;
$node->safe_psql('postgres', 'ALTER EXTENSION outbox UPDATE');
ok($pgbench->finish, 'the producers ran through the update') or diag(${ $pgbench->{outbox_err} });
ok(wait_until(sub { queued('postgres') eq '0' }, 60), 'everything produced meanwhile is delivered');
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
