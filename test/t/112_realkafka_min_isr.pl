# Real Apache Kafka, too few replicas: producers run while two of the three brokers are down
# (one killed with SIGKILL, one stopped cleanly). The partitions are led by the last broker
# with an ISR of one, below min.insync.replicas = 2, so every acks=all produce is refused with
# NOT_ENOUGH_REPLICAS: a rejection, which spends an attempt and backs off. Messages wait,
# are retried, none is dead-lettered (max_attempts leaves room), outbox.stats() says why, and
# all arrive once the brokers are back.
# outbox-tap: kafka-cluster exclusive -- kills one broker and stops another
use strict;
use warnings;
use OutboxKafka;
use OutboxTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $down_for = sized(30, 15);   # seconds with two brokers down
my $kafka = kafka_cluster();
$kafka->create_topic('isr', partitions => 4);
my $node = outbox_node('realkafka_min_isr');
my $bootstrap = $kafka->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('isr', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "isr",
        "max_attempts": 1000, "retry_base": "250ms", "retry_max": "2s"}');
    CREATE TABLE produced (event_id uuid);
    CREATE SEQUENCE n_seq;
});

my $pgbench = start_pgbench($node, clients => 2, rate => 50, seconds => $down_for + 25,
    script => recorded_insert('isr'));
ok(wait_until(sub { stats_row($node, 'isr')->{delivered_total} > 50 }, 30), 'messages flow');
$kafka->kill(3);
$kafka->stop_broker(2);
my $down_at = time;
diag('broker 3 killed, broker 2 stopped');

ok(wait_until(sub {
    my $s = stats_row($node, 'isr');
    ($s->{last_error} // '') =~ /NOT_ENOUGH_REPLICAS/ && $s->{retrying} > 0 }, 60),
    'messages wait for retries; stats() says NOT_ENOUGH_REPLICAS')
  or diag(explain(stats_row($node, 'isr')));
my $s = stats_row($node, 'isr');
diag("while two brokers are down: last_error: $s->{last_error}");
sleep($down_for - (time - $down_at)) if time - $down_at < $down_for;   # the outage's length: the scenario
$s = stats_row($node, 'isr');
cmp_ok($s->{failed_total}, '>', 0, "attempts are spent on the rejections ($s->{failed_total})");
is($s->{dead}, 0, 'nothing dead-lettered');
cmp_ok($s->{retrying} + $s->{pending} + $s->{in_flight}, '>', 50,
    'the messages produced meanwhile wait: ' . ($s->{retrying} + $s->{pending} + $s->{in_flight}));
like($s->{last_error}, qr/NOT_ENOUGH_REPLICAS/, 'last_error still names NOT_ENOUGH_REPLICAS');

$kafka->start_broker(2);
$kafka->start_broker(3);
diag(sprintf('both brokers back and in sync %.1f s after they went down', time - $down_at));
ok($pgbench->finish, 'the producers ran throughout') or diag(${ $pgbench->{outbox_err} });
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 120),
    'everything is delivered once the brokers are back')
  or diag(explain(stats_row($node, 'isr')));
$s = stats_row($node, 'isr');
is($s->{dead}, 0, 'nothing dead-lettered');
diag("attempts spent: $s->{failed_total}; deferred: $s->{deferred_total}");
my @produced = split /\n/, $node->safe_psql('postgres', 'SELECT event_id FROM produced');
fault_summary('realkafka_two_brokers_down', produced => \@produced, received => $kafka->event_ids('isr'));

$node->stop;
check_server_log($node);
$kafka->stop;
done_testing();
