# Real Apache Kafka, "delivery": "exactly_once" (issue 41): 100,000 messages (the default run:
# 20,000) committed by 8 concurrent producers to a destination with "ordering": "key", then
# drained; during the drain, three kill -9 of the worker, three kill -9 of outbox-driver, one immediate stop of
# PostgreSQL and one kill -9 of the broker leading partition 0 (the partition of the
# destination's marker). Read back by Kafka's own Java consumer with
# isolation.level=read_committed: nothing lost, nothing twice, every key in commit order. The
# same run in the default mode (at-least-once) reports its duplicates, as the comparison.
# outbox-tap: kafka-cluster exclusive -- kills a broker
use strict;
use warnings;
use OutboxKafka;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $n = sized(100_000, 20_000);
my $producers = 8;
my $keys = 400;

my $kafka = kafka_cluster();
my $bootstrap = $kafka->bootstrap;
my $node = outbox_node('realkafka_eos', conf => join("\n", 'max_connections = 40',
    'restart_after_crash = on', "outbox.lease_timeout = '20s'", 'outbox.batch_size = 100'));
$node->safe_psql('postgres', q{
    CREATE TABLE sent (event_id uuid PRIMARY KEY, id bigint NOT NULL, key text NOT NULL,
                       n bigint NOT NULL, topic text NOT NULL);
    CREATE SEQUENCE n_seq;
});

sub driver_pid {
    my $p = eval { $node->safe_psql('postgres', 'SELECT coalesce(max(driver_pid), 0) FROM outbox.workers()') };
    return $p // 0;
}

# Delivered so far of the scenario's messages (what left the queue; queued is 1e9 while the
# server restarts).
sub left_queue {
    my ($dest) = @_;
    my $q = queued($node, $dest, restarting => 1);
    return $q >= 1e9 ? -1 : $n - $q;
}

# One scenario: a destination in `mode`, the producers, the faults; returns the Java consumer's
# messages and what was sent.
sub scenario {
    my ($dest, $mode) = @_;
    $kafka->create_topic($dest, partitions => 6);
    $node->safe_psql('postgres', qq{
        SELECT outbox.create_destination('$dest', 'kafka', '{"bootstrap.servers": "$bootstrap",
            "topic": "$dest", "ordering": "key", "delivery": "$mode"}')});
    my $script = qq{
WITH m AS (
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT '$dest', 'k' || (n % $keys), jsonb_build_object('n', n)
      FROM (SELECT nextval('n_seq') AS n) s
    RETURNING event_id, id, key, (payload->>'n')::bigint, '$dest')
INSERT INTO sent SELECT * FROM m;
};
    # Queued while paused, so that the whole drain, and every fault, comes after the producers:
    # a kill -9 of the worker restarts the server, which would end their sessions.
    $node->safe_psql('postgres', "SELECT outbox.pause('$dest')");
    my $t0 = time;
    my $pgbench = start_pgbench($node, clients => $producers, threads => 2,
        transactions => $n / $producers, script => $script);
    ok($pgbench->finish, "$dest: $producers producers commit $n messages")
      or diag(${ $pgbench->{outbox_err} });
    diag(sprintf('%s: %d messages committed in %.1f s', $dest, $n, time - $t0));
    $t0 = time;
    $node->safe_psql('postgres', "SELECT outbox.resume('$dest')");

    # The faults, spread over the drain by what is left of the queue.
    my $victim = $kafka->leader($dest, 0);
    # Early in the drain, the first as it starts: the at-least-once drain of the default run
    # takes about a second, and each fault (a restart) takes seconds. A fault that comes after
    # the drain has ended is shown as "@N" with N the whole run.
    my @faults = (worker => 0, driver => 0.05, leader => 0.10, worker => 0.15,
        driver => 0.20, immediate => 0.25, worker => 0.30, driver => 0.35);
    my ($killed, $t_leader) = (0, 0);
    my @at;
    while (my ($what, $frac) = splice(@faults, 0, 2)) {
        wait_until(sub { left_queue($dest) >= $frac * $n }, 300);
        push @at, sprintf('%s@%d', $what, left_queue($dest));
        if ($what eq 'worker') {
            my ($pid) = eval { worker_pids($node) };
            next unless $pid;
            $killed++ if kill('KILL', $pid);
            wait_until(sub { my @p = eval { worker_pids($node) }; @p && $p[0] != $pid }, 60);
        } elsif ($what eq 'driver') {
            my $pid = 0;
            wait_until(sub { $pid = driver_pid(); $pid > 0 }, 60);
            kill('KILL', $pid) if $pid > 0;
            wait_until(sub { my $p = driver_pid(); $p > 0 && $p != $pid }, 60);
        } elsif ($what eq 'leader') {
            $kafka->kill($victim);
            $t_leader = time;
        } else {
            $node->stop('immediate');
            $node->start;
        }
        if ($t_leader && time - $t_leader > 10) {  # the broker comes back during the drain
            $kafka->start_broker($victim);
            $t_leader = 0;
        }
    }
    $kafka->start_broker($victim) if $t_leader;
    diag("$dest: faults at " . join(' ', @at) . " delivered");
    ok(wait_until(sub { queued($node, $dest, restarting => 1) == 0 }, sized(900, 400)),
        "$dest: the queue drains completely after the faults");
    diag(sprintf('%s: %d messages drained with 8 faults in %.1f s', $dest, $n, time - $t0));
    is($node->safe_psql('postgres', "SELECT count(*) FROM outbox.dead_letters WHERE destination = '$dest'"),
        '0', "$dest: nothing dead-lettered");
    $kafka->wait_healthy;
    my $got = $kafka->consume($dest, read_committed => 1);
    return $got;
}

my $got = scenario('eos_on', 'exactly_once');
my $sent_sql = q{SELECT event_id, id, key FROM sent WHERE topic = 'eos_on'};
my @produced = split /\n/, $node->safe_psql('postgres', q{SELECT event_id FROM sent WHERE topic = 'eos_on'});
is(scalar(@produced), $n, "eos_on: the producers recorded $n messages");
my $r = fault_summary('realkafka_exactly_once', produced => \@produced,
    received => [ map { $_->{headers}{ce_id} } @$got ]);
is($r->{lost}, 0, 'exactly_once: nothing lost');
is($r->{duplicates}, 0, 'exactly_once: nothing twice (read_committed)');
is(check_key_order($node, $sent_sql, $got, 'exactly_once, ordering = key'), 0,
    'exactly_once: no repeats within a key');
my $s = stats_row($node, 'eos_on');
diag('eos_on stats: ' . join(' ', map { "$_=" . ($s->{$_} // '-') }
    qw(delivery transactions_open recovered_total delivered_total failed_total deferred_total)));

$got = scenario('eos_off', 'at_least_once');
@produced = split /\n/, $node->safe_psql('postgres', q{SELECT event_id FROM sent WHERE topic = 'eos_off'});
$r = fault_summary('realkafka_at_least_once', produced => \@produced,
    received => [ map { $_->{headers}{ce_id} } @$got ]);
diag("at_least_once, the same faults: $r->{duplicates} duplicates (the comparison)");

$node->stop;
check_server_log($node, killed => 6);
$kafka->stop;
done_testing();
