# Crash safety of the fast path when the broker acknowledges slowly (40 ms a request, as a
# loaded or replicated cluster may): the worker holds row locks, not leases, across the round
# trips (docs/architecture.md). That it does is seen in the WAL: a leased message writes ~730
# bytes (a new row version with its index entries, then the DELETE), one on the fast path ~120
# (its lock and its DELETE). The worker is killed with SIGKILL mid-drain (twice), and the server
# is stopped in immediate mode; every message still arrives (duplicates allowed and counted) and
# nothing is dead-lettered.
# outbox-tap: alone -- the WAL a message takes depends on acknowledgement times a loaded machine stretches
use strict;
use warnings;
use OutboxTest;
use Test::More;

my $n = 20000;
my $broker = kafka_broker();
# The test kills a backend: the postmaster must restart (the test framework turns it off).
my $node = outbox_node('crash_slow',
    conf => "restart_after_crash = on\noutbox.lease_timeout = '5s'\noutbox.batch_size = 200");
my $bootstrap = $broker->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('slow1', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "slow1"}');
    SELECT outbox.create_destination('slow2', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "slow2"}');
});
# 40 ms: the worker sees about two round trips from its claim (~80 ms), over the 50 ms the
# fast path allowed before and well under its 200 ms now, with room for a loaded machine.
$broker->ctl('rtt all 40');

# WAL bytes a delivered message took since $lsn, with $left of $n still queued.
sub wal_per_message {
    my ($lsn, $left) = @_;
    my $bytes = $node->safe_psql('postgres', "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn')");
    return int($bytes / ($n - $left));
}

# Delivered with the slow acknowledgements first, so the worker's average acknowledgement time
# is theirs when the backlog comes; then $n messages queued while paused.
sub queue_batch {
    my ($dest) = @_;
    $node->safe_psql('postgres', qq{
        INSERT INTO outbox.messages (destination, key, payload)
        SELECT '$dest', 'warm-up', '{}' FROM generate_series(1, 100);
    });
    ok(wait_until(sub { queued($node, $dest, restarting => 1) == 0 }, 60), "$dest: warm-up delivered");
    $node->safe_psql('postgres', qq{
        SELECT outbox.pause('$dest');
        INSERT INTO outbox.messages (destination, key, payload)
        SELECT '$dest', '$dest-' || g, jsonb_build_object('n', g) FROM generate_series(1, $n) g;
    });
    my $lsn = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
    $node->safe_psql('postgres', "SELECT outbox.resume('$dest')");
    return $lsn;
}

sub check_all_arrived {
    my ($dest) = @_;
    my $got = $broker->consume($dest);
    my %seen;
    $seen{ $_->{key} }++ for grep { $_->{key} ne 'warm-up' } @$got;
    my $missing = grep { !$seen{"$dest-$_"} } 1 .. $n;
    is($missing, 0, "$dest: all $n messages arrived");
    my $received = grep { $_->{key} ne 'warm-up' } @$got;
    diag("$dest: $received received, " . scalar(keys %seen) . ' distinct, '
        . ($received - scalar(keys %seen)) . ' duplicates');
    is($node->safe_psql('postgres', "SELECT count(*) FROM outbox.dead_letters WHERE destination = '$dest'"),
        '0', "$dest: nothing dead-lettered");
}

# 1. kill -9 the worker twice while a fast batch holds sent messages.
my $lsn = queue_batch('slow1');
my $killed = 0;
for my $below (int($n * 0.8), int($n * 0.4)) {
    ok(wait_until(sub { queued($node, 'slow1', restarting => 1) < $below }, 120), "slow1: drain passed $below remaining");
    if (!$killed) {
        my $wal = wal_per_message($lsn, queued($node, 'slow1', restarting => 1));
        cmp_ok($wal, '<', 400, "slow1: $wal bytes of WAL a message: the fast path, no leases");
    }
    my ($pid) = worker_pids($node);
    my $remaining = queued($node, 'slow1', restarting => 1);
    ok(kill('KILL', $pid), "slow1: worker $pid killed with SIGKILL at $remaining remaining");
    $killed++;
    # The postmaster restarts everything after a backend crash; wait for a new worker.
    ok(wait_until(sub {
        my @p = eval { worker_pids($node) };
        @p && $p[0] != $pid }, 60), 'slow1: a new worker took over');
}
ok(wait_until(sub { queued($node, 'slow1', restarting => 1) == 0 }, 180), 'slow1: drained after two kills');
check_all_arrived('slow1');

# 2. Immediate stop (a server crash) while a fast batch holds sent messages, then start again.
$lsn = queue_batch('slow2');
ok(wait_until(sub { queued($node, 'slow2', restarting => 1) < int($n * 0.7) }, 120), 'slow2: drain under way');
my $wal = wal_per_message($lsn, queued($node, 'slow2', restarting => 1));
cmp_ok($wal, '<', 400, "slow2: $wal bytes of WAL a message: the fast path, no leases");
$node->stop('immediate');
$node->start;
ok(wait_until(sub { queued($node, 'slow2', restarting => 1) == 0 }, 180), 'slow2: drained after an immediate stop');
check_all_arrived('slow2');

$broker->ctl('rtt all 0');
$node->stop;
check_server_log($node, killed => $killed);
$broker->stop;
done_testing();
