# "delivery": "exactly_once" on librdkafka's mock cluster (issue 41): the config rules, then a
# drain of 20,000 messages with kill -9 of the worker and of outbox-driver, and one with an
# immediate stop of the server, read back by kcat: nothing lost, and nothing twice but what the
# mock shows of aborted transactions. Each batch is one Kafka transaction that commits its
# marker (an offset of the group named by the transactional.id, metadata = the batch's lease
# token); a restarted driver reads it and deletes the batch's rows instead of sending them again.
#
# The mock cluster (librdkafka 2.0.2) accepts the transactional producer but keeps no
# transaction semantics: records of aborted transactions stay visible to read_committed
# consumers, and offsets committed in a transaction are not returned by OffsetFetch (no marker
# is ever found). So here every message a recovery releases may show twice; the test checks that
# no duplicate goes beyond what recoveries released (their log lines). Zero duplicates is
# checked on a real cluster: test/t/116_realkafka_exactly_once.pl.
use strict;
use warnings;
use OutboxTest;
use Test::More;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(time);

my $n = $ENV{OUTBOX_EOS_MESSAGES} // 20000;
my $broker = kafka_broker();
my $node = outbox_node('eos',
    conf => "restart_after_crash = on\noutbox.lease_timeout = '10s'\noutbox.batch_size = 200");
my $bootstrap = $broker->bootstrap;

# 1. The config: kafka only, with a topic (the marker's); a clear error otherwise.
my ($rc, $out, $err) = $node->psql('postgres', q{
    SELECT outbox.create_destination('hook', 'webhook',
        '{"url": "http://127.0.0.1:9/", "delivery": "exactly_once"}')});
like($err, qr/"delivery": "exactly_once" is not available for a webhook destination/,
    'exactly_once refused for a webhook destination');
like($err, qr/HINT:.*only Kafka destinations/s, '... with a hint');
($rc, $out, $err) = $node->psql('postgres', qq{
    \\set VERBOSITY verbose
    SELECT outbox.create_destination('notopic', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "delivery": "exactly_once"}')});
like($err, qr/22023/, 'SQLSTATE 22023');
like($err, qr/needs "topic"/, 'exactly_once needs the destination topic');
($rc, $out, $err) = $node->psql('postgres', qq{
    SELECT outbox.create_destination('bad', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "bad", "delivery": "twice"}')});
like($err, qr/"delivery" must be "at_least_once" or "exactly_once"/, 'an unknown delivery mode');

for my $d (qw(eos1 eos2 eos3)) {
    $node->safe_psql('postgres', qq{
        SELECT outbox.create_destination('$d', 'kafka',
            '{"bootstrap.servers": "$bootstrap", "topic": "$d", "delivery": "exactly_once"}')});
}

# Every message of a topic as a read_committed consumer sees it; returns (missing, duplicates).
sub check_once {
    my ($dest, $count) = @_;
    my $got = $broker->consume($dest, isolation => 'read_committed');
    my %seen;
    $seen{ $_->{key} }++ for @$got;
    my $missing = grep { !$seen{"$dest-$_"} } 1 .. $count;
    my $dupes = scalar(@$got) - scalar(keys %seen);
    is($missing, 0, "$dest: all $count messages arrived");
    my $released = released($dest);
    cmp_ok($dupes, '<=', $released,
        "$dest: duplicates only of messages a recovery released (the mock shows aborted transactions)");
    diag("$dest: $released messages released by recoveries");
    diag("$dest: " . scalar(@$got) . " received, $missing lost, $dupes duplicates");
    is($node->safe_psql('postgres', "SELECT count(*) FROM outbox.dead_letters WHERE destination = '$dest'"),
        '0', "$dest: nothing dead-lettered");
    return ($missing, $dupes);
}

# Messages that recoveries of a destination released (in transactions that did not commit).
sub released {
    my ($dest) = @_;
    my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile);
    my $n = 0;
    $n += $1 while $log =~ /outbox: $dest: exactly-once recovery: \d+ leased messages .*?, (\d+) were in/g;
    return $n;
}

sub queue_all {
    my ($dest) = @_;
    $node->safe_psql('postgres', qq{
        SELECT outbox.pause('$dest');
        INSERT INTO outbox.messages (destination, key, payload)
        SELECT '$dest', '$dest-' || g, jsonb_build_object('n', g) FROM generate_series(1, $n) g;
        SELECT outbox.resume('$dest');
    });
}

sub driver_pid {
    my $p = eval { $node->safe_psql('postgres', 'SELECT coalesce(driver_pid, 0) FROM outbox.workers()') };
    return $p // 0;
}

# 2. A small delivery: once each, and the mode in stats().
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'eos3', 'eos3-' || g, jsonb_build_object('n', g) FROM generate_series(1, 100) g});
ok(wait_until(sub { queued($node, 'eos3') == 0 }, 60), 'eos3: 100 messages delivered');
check_once('eos3', 100);

# 3. kill -9 of the worker twice and of outbox-driver twice during one drain.
my $t0 = time;
queue_all('eos1');
my $killed = 0;
my @plan = ([0.8, 'worker'], [0.65, 'driver'], [0.5, 'worker'], [0.3, 'driver']);
for my $step (@plan) {
    my ($frac, $what) = @$step;
    my $below = int($n * $frac);
    ok(wait_until(sub { queued($node, 'eos1', restarting => 1) < $below }, 180),
        "eos1: drain passed $below remaining");
    if ($what eq 'worker') {
        my ($pid) = worker_pids($node);
        ok(kill('KILL', $pid), "worker $pid killed with SIGKILL");
        $killed++;
        ok(wait_until(sub { my @p = eval { worker_pids($node) }; @p && $p[0] != $pid }, 60),
            'a new worker took over');
    } else {
        my $pid;
        ok(wait_until(sub { $pid = driver_pid(); $pid > 0 }, 60), 'the worker has a driver process');
        ok(kill('KILL', $pid), "outbox-driver $pid killed with SIGKILL");
        ok(wait_until(sub { my $p = driver_pid(); $p > 0 && $p != $pid }, 60), 'a new driver process');
    }
}
ok(wait_until(sub { queued($node, 'eos1', restarting => 1) == 0 }, 300), 'eos1: drained after the kills');
check_once('eos1', $n);
diag(sprintf('eos1: %d messages with 2 worker and 2 driver kills in %.1f s', $n, time - $t0));

# 4. Immediate stop (a server crash) mid-drain.
$t0 = time;
queue_all('eos2');
ok(wait_until(sub { queued($node, 'eos2', restarting => 1) < $n * 0.6 }, 180), 'eos2: drain under way');
$node->stop('immediate');
$node->start;
ok(wait_until(sub { queued($node, 'eos2', restarting => 1) == 0 }, 300), 'eos2: drained after an immediate stop');
check_once('eos2', $n);
diag(sprintf('eos2: %d messages with an immediate stop in %.1f s', $n, time - $t0));

my $stats = stats_row($node, 'eos1');
is($stats->{delivery}, 'exactly_once', 'stats(): the mode') if exists $stats->{delivery};

$node->stop;
check_server_log($node, killed => $killed);
$broker->stop;
done_testing();
