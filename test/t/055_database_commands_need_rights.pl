# DROP DATABASE, ALTER DATABASE ... RENAME / SET TABLESPACE and CREATE DATABASE ... TEMPLATE of a
# served database make the utility hook ask its workers to leave — but only when PostgreSQL is
# going to let the role run the statement. Before, any login role could stop a database's
# workers with a DROP DATABASE that PostgreSQL then refused (issue 16: in a loop, delivery fell
# from 89,700 to 484 msg/s with 40 worker restarts). Here roles without the right run each
# statement in a loop while messages drain: they get PostgreSQL's own error, the workers are the
# same processes throughout, every message is delivered; then the owner's DROP DATABASE works.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('dbrights', conf => "outbox.databases = 'app'\noutbox.workers = 2");
$node->safe_psql('postgres', q{
    CREATE ROLE appowner LOGIN;
    CREATE ROLE mallory LOGIN;
    CREATE ROLE maker LOGIN CREATEDB;
    CREATE DATABASE app OWNER appowner;
});
$node->safe_psql('app', qq{
    CREATE EXTENSION outbox;
    SELECT outbox.create_destination('d', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "t"}');
});
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');

my $workers_sql = q{SELECT string_agg(pid || '@' || started_at, ',' ORDER BY worker)
                      FROM outbox.workers() WHERE database = 'app'};
ok(wait_until(sub {
    $node->safe_psql('postgres', "SELECT count(*) FROM outbox.workers() WHERE database = 'app' AND state = 'idle'") eq '2' }, 30),
    'two workers serve database app');
my $workers = $node->safe_psql('postgres', $workers_sql);

# Each statement, the role that runs it, and PostgreSQL's own error for it.
my @refused = (
    [mallory => 'DROP DATABASE app', qr/ERROR:  must be owner of database app/],
    [mallory => 'DROP DATABASE IF EXISTS app', qr/ERROR:  must be owner of database app/],
    [maker => 'DROP DATABASE app WITH (FORCE)', qr/ERROR:  must be owner of database app/],
    [mallory => 'ALTER DATABASE app RENAME TO app2', qr/ERROR:  must be owner of database app/],
    [appowner => 'ALTER DATABASE app RENAME TO app2', qr/ERROR:  permission denied to rename database/],
    [mallory => 'ALTER DATABASE app SET TABLESPACE pg_global', qr/ERROR:  must be owner of database app/],
    [mallory => 'CREATE DATABASE copy TEMPLATE app', qr/ERROR:  permission denied to create database/],
    [maker => 'CREATE DATABASE copy TEMPLATE app', qr/ERROR:  permission denied to copy database "app"/],
    [appowner => "BEGIN;\nDROP DATABASE app;", qr/ERROR:  DROP DATABASE cannot run inside a transaction block/],
);

my $rounds = 8;
my $total = 0;
my %failed_as_expected;
my %pids_seen;
my $t0 = time;
for my $round (1 .. $rounds) {
    $node->safe_psql('app', qq{
        INSERT INTO outbox.messages (destination, key, payload)
        SELECT 'd', 'r$round-' || g, '{}' FROM generate_series(1, 500) g});
    $total += 500;
    for my $r (@refused) {
        my ($role, $sql, $error) = @$r;
        my ($ret, $out, $err) = $node->psql('postgres', $sql, extra_params => ['-U', $role]);
        $failed_as_expected{"$role: $sql"}++ if $ret != 0 && $err =~ $error;
        diag("$role: $sql -> $err") if $round == 1 && !($ret != 0 && $err =~ $error);
        $pids_seen{$_} = 1 for split /\n/,
          $node->safe_psql('postgres', "SELECT pid FROM outbox.workers() WHERE database = 'app'");
    }
}
my $took = time - $t0;
for my $r (@refused) {
    my ($role, $sql, $error) = @$r;
    (my $one_line = $sql) =~ s/\n/ /g;
    is($failed_as_expected{"$role: $sql"} // 0, $rounds, "$role: \"$one_line\" fails with PostgreSQL's own error, every time");
}
is(scalar(keys %pids_seen) - 2, 0, 'no worker was restarted meanwhile');
is($node->safe_psql('postgres', $workers_sql), $workers,
    'the workers of app are the same processes (pid, started_at) after all that');
ok(wait_until(sub { $node->safe_psql('app', 'SELECT count(*) FROM outbox.messages') eq '0' }, 60),
    'every message was delivered');
is($broker->end_offset_sum('t'), $total, "the broker has all $total messages");
diag(sprintf('%d refused statements took %.1f s', $rounds * @refused, $took));
cmp_ok($took, '<', 30, 'the refused statements never waited for workers to leave');

# The owner may drop it: the workers leave and DROP DATABASE succeeds.
my ($ret, $out, $err) = $node->psql('postgres', 'DROP DATABASE app', extra_params => ['-U', 'appowner']);
is($ret, 0, "the owner's DROP DATABASE app succeeds") or diag($err);
ok(wait_until(sub { $node->safe_psql('postgres', "SELECT count(*) FROM outbox.workers() WHERE database = 'app'") eq '0' }, 10),
    'and its workers are gone');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
