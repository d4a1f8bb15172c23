# Real Apache Kafka, a broker crash: 200,000 messages (the default run: 60,000) queued while
# the destination is paused, then drained; a quarter of the way in, the broker leading
# partition 0 is killed with SIGKILL (no controlled shutdown: the controller fences it after
# broker.session.timeout.ms and elects new leaders from the in-sync replicas), and restarted
# later. Nothing is lost, no attempt is spent (the relay waits for the new leaders), nothing is
# dead-lettered; duplicates (batches persisted by the dead leader but not acknowledged before it
# died, then sent again) are counted and reported.
# outbox-tap: kafka-cluster exclusive -- kills a broker
use strict;
use warnings;
use OutboxKafka;
use OutboxTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $n = sized(200_000, 60_000);
my $kafka = kafka_cluster();
$kafka->create_topic('drain', partitions => 6);
my $node = outbox_node('realkafka_leader_kill');
my $bootstrap = $kafka->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('drain', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "drain"}');
    SELECT outbox.pause('drain');
});
for (my $from = 1; $from <= $n; $from += 50_000) {
    my $to = $from + 49_999 > $n ? $n : $from + 49_999;
    $node->safe_psql('postgres', qq{
        INSERT INTO outbox.messages (destination, key, payload)
        SELECT 'drain', 'k' || g, jsonb_build_object('n', g) FROM generate_series($from, $to) g});
}
my @produced = split /\n/, $node->safe_psql('postgres', 'SELECT event_id FROM outbox.messages');
is(scalar(@produced), $n, "$n messages queued");

# The leader is looked up before the drain starts (a JVM start takes seconds on a loaded
# machine), and killed as soon as 5% are delivered.
my $victim = $kafka->leader('drain', 0);
my $t0 = time;
$node->safe_psql('postgres', q{SELECT outbox.resume('drain')});
ok(wait_until(sub { stats_row($node, 'drain')->{delivered_total} >= 0.05 * $n }, 300),
    'the drain is under way');
$kafka->kill($victim);
my $killed_at = time;
my $at = queued($node, undef, restarting => 1);
cmp_ok($at, '>', 0.5 * $n, 'the leader was killed in the middle of the drain (more than half still queued)');
diag(sprintf('broker %d (leader of drain-0) killed with SIGKILL at %d queued, %.1f s into the drain',
    $victim, $at, $killed_at - $t0));
ok(wait_until(sub { my $l = eval { $kafka->leader('drain', 0) } // $victim; $l != $victim }, 60),
    'partition 0 has a new leader');
diag(sprintf('new leader of drain-0: broker %s, %.1f s after the kill', $kafka->leader('drain', 0),
    time - $killed_at));
# The drain goes on without the dead broker; it comes back before or after the end.
wait_until(sub { queued($node, undef, restarting => 1) < 0.25 * $n }, 120);
$kafka->start_broker($victim);
diag(sprintf('broker %d restarted and in sync again %.1f s after the kill, %d queued', $victim,
    time - $killed_at, queued($node, undef, restarting => 1)));
ok(wait_until(sub { queued($node, undef, restarting => 1) == 0 }, 300), 'the queue drains completely');
diag(sprintf('%d messages drained in %.1f s', $n, time - $t0));

my $s = stats_row($node, 'drain');
is($s->{dead}, 0, 'nothing dead-lettered');
is($s->{failed_total}, 0, 'no attempt spent') or diag(explain($s));
diag("deferred (outage, no attempt spent): $s->{deferred_total}; last_error: " . ($s->{last_error} // '-'));
$kafka->wait_healthy;
pass('all partitions have their three in-sync replicas again');
my $received = $kafka->event_ids('drain');
my $r = fault_summary('realkafka_leader_kill', produced => \@produced, received => $received);
diag("duplicates after the leader's crash: $r->{duplicates}");

$node->stop;
check_server_log($node);
$kafka->stop;
done_testing();
