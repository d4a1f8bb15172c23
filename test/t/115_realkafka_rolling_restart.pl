# Real Apache Kafka, a rolling restart (what an upgrade does): 16 producer sessions commit as
# fast as they can for at least 60 s (the default run: at 800 transactions/s in all, for at
# least 30 s, so that four JVMs, PostgreSQL and the producers fit CI's two cores) while the
# three brokers are restarted one after the other, each with a controlled shutdown and back in
# sync before the next goes. Nothing is lost or dead-lettered; attempts, deferrals and
# duplicates are reported.
# outbox-tap: kafka-cluster exclusive -- restarts every broker
use strict;
use warnings;
use List::Util qw(max);
use OutboxKafka;
use OutboxTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $seconds = sized(60, 30);
my $kafka = kafka_cluster();
$kafka->create_topic('rolling', partitions => 8);
# fsync = on, as in 085: the producers commit durably, so they do not starve the worker and
# the brokers of CPU on a 2-core machine.
my $node = outbox_node('realkafka_rolling', conf => join("\n", 'log_statement = none',
    'fsync = on', 'max_connections = 40'));
my $bootstrap = $kafka->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('rolling', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "rolling"}');
    CREATE UNLOGGED TABLE produced (event_id uuid);
    CREATE SEQUENCE n_seq;
});

my $start = time;
my $pgbench = start_pgbench($node, clients => 16, threads => 2, seconds => 3600,
    rate => sized(undef, 800), script => recorded_insert('rolling'));
ok(wait_until(sub { stats_row($node, 'rolling')->{delivered_total} > 100 }, 30), 'messages flow');
my @queue;
for my $b (1, 2, 3) {
    my $t = time;
    $kafka->restart($b);
    push @queue, $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages');
    diag(sprintf('broker %d restarted and back in sync in %.1f s; %d queued', $b, time - $t, $queue[-1]));
}
my $rolled = time - $start;
sleep($seconds - (time - $start)) if time - $start < $seconds;   # the producers' time: the scenario
# SIGTERM, then SIGKILL: not SIGINT, which a background job inherits as ignored (CI, nohup).
# What was committed is in `produced` either way (same transaction).
$pgbench->kill_kill(grace => 5);
my $produced_for = time - $start;
# A backend whose client is gone still finishes a COMMIT it was sent: wait until the producers'
# backends have ended, or `produced` could miss a commit the relay then delivers.
ok(wait_until(sub { $node->safe_psql('postgres', q{
        SELECT count(*) FROM pg_stat_activity
        WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()}) eq '0' }, 60),
    "the producers' backends have ended");
my @produced = split /\n/, $node->safe_psql('postgres', 'SELECT event_id FROM produced');
diag(sprintf('%d messages committed by 16 producers in %.0f s (%.0f msg/s); the rolling restart took %.0f s',
    scalar(@produced), $produced_for, @produced / $produced_for, $rolled));
cmp_ok($produced_for, '>=', $seconds, "the producers ran for at least $seconds s");

my $t0 = time;
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 300),
    'everything is delivered');
diag(sprintf('queue empty %.1f s after the producers stopped', time - $t0));
my $s = stats_row($node, 'rolling');
is($s->{dead}, 0, 'nothing dead-lettered');
diag("attempts spent: $s->{failed_total}; deferred: $s->{deferred_total}; last_error: " . ($s->{last_error} // '-'));
$kafka->wait_healthy;
pass('the cluster is healthy after the rolling restart');
fault_summary('realkafka_rolling_restart', produced => \@produced, received => $kafka->event_ids('rolling'));

$node->stop;
check_server_log($node);
$kafka->stop;
done_testing();
