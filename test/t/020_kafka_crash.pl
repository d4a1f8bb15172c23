# Crash safety: every message still arrives after the worker is killed with SIGKILL (twice,
# mid-drain), and after the server is stopped in immediate mode mid-drain. Duplicates are
# allowed (at-least-once) and counted.
use strict;
use warnings;
use OutboxTest;
use Test::More;

my $broker = kafka_broker();
# The test kills a backend: the postmaster must restart (the test framework turns it off).
my $node = outbox_node('crash',
    conf => "restart_after_crash = on\noutbox.lease_timeout = '5s'\noutbox.batch_size = 200");
my $bootstrap = $broker->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('crash1', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "crash1"}');
    SELECT outbox.create_destination('crash2', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "crash2"}');
});

# Queue 50,000 messages while the destination is paused, then let the worker drain them.
sub queue_batch {
    my ($dest) = @_;
    $node->safe_psql('postgres', qq{
        SELECT outbox.pause('$dest');
        INSERT INTO outbox.messages (destination, key, payload)
        SELECT '$dest', '$dest-' || g, jsonb_build_object('n', g) FROM generate_series(1, 50000) g;
        SELECT outbox.resume('$dest');
    });
}

sub check_all_arrived {
    my ($dest) = @_;
    my $got = $broker->consume($dest);
    my %seen;
    $seen{ $_->{key} }++ for @$got;
    my $missing = grep { !$seen{"$dest-$_"} } 1 .. 50000;
    is($missing, 0, "$dest: all 50,000 messages arrived");
    my $dupes = scalar(@$got) - scalar(keys %seen);
    diag("$dest: " . scalar(@$got) . " received, " . scalar(keys %seen) . " distinct, $dupes duplicates");
    is($node->safe_psql('postgres', "SELECT count(*) FROM outbox.dead_letters WHERE destination = '$dest'"),
        '0', "$dest: nothing dead-lettered");
}

# 1. kill -9 the worker twice mid-drain.
queue_batch('crash1');
my $killed = 0;
for my $below (40000, 20000) {
    ok(wait_until(sub { queued($node, 'crash1', restarting => 1) < $below }, 120), "drain passed $below remaining");
    my ($pid) = worker_pids($node);
    my $remaining = queued($node, 'crash1', restarting => 1);
    ok(kill('KILL', $pid), "worker $pid killed with SIGKILL at $remaining remaining");
    $killed++;
    # The postmaster restarts everything after a backend crash; wait for a new worker.
    ok(wait_until(sub {
        my @p = eval { worker_pids($node) };
        @p && $p[0] != $pid }, 60), 'a new worker took over');
}
ok(wait_until(sub { queued($node, 'crash1', restarting => 1) == 0 }, 180), 'crash1: drained after two kills');
check_all_arrived('crash1');

# 2. Immediate stop (a server crash) mid-drain, then start again.
queue_batch('crash2');
ok(wait_until(sub { queued($node, 'crash2', restarting => 1) < 35000 }, 120), 'crash2: drain under way');
$node->stop('immediate');
$node->start;
ok(wait_until(sub { queued($node, 'crash2', restarting => 1) == 0 }, 180), 'crash2: drained after an immediate stop');
check_all_arrived('crash2');

$node->stop;
check_server_log($node, killed => $killed);
$broker->stop;
done_testing();
