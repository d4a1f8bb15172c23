# Fan-out across kinds: outbox.publish() sends each of 3,000 events to a RabbitMQ, a NATS
# JetStream and a Kafka destination (one row each, one event_id); the worker is killed with
# SIGKILL mid-way. Every destination receives every event id (each completes on its own: a
# kill replays only what a destination had not confirmed), and stats() counts each apart.
# outbox-tap: rabbitmq shared, nats shared
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $rabbit = rabbitmq_node();
my $nats = nats_node();
my $broker = kafka_broker();
my $node = outbox_node('broker_fanout', conf => join("\n", 'log_statement = none',
    'restart_after_crash = on', "outbox.lease_timeout = '5s'", 'outbox.batch_size = 100'));
my $amqp_config = $rabbit->prepare('fan');
my $nats_config = $nats->prepare('fan');
my $bootstrap = $broker->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('fan_amqp', 'amqp', '$amqp_config');
    SELECT outbox.create_destination('fan_nats', 'nats', '$nats_config');
    SELECT outbox.create_destination('fan_kafka', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "fan"}');
    CREATE TABLE produced (event_id uuid PRIMARY KEY);
});
my $n = 3000;
$node->safe_psql('postgres', qq{
    SELECT outbox.pause('fan_amqp'), outbox.pause('fan_nats'), outbox.pause('fan_kafka');
    INSERT INTO produced
    SELECT outbox.publish(ARRAY['fan_amqp', 'fan_nats', 'fan_kafka'], NULL,
                          jsonb_build_object('n', g), key => 'k' || g)
      FROM generate_series(1, $n) g;
});
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages'), 3 * $n,
    'one row per event and destination');
is($node->safe_psql('postgres',
    'SELECT count(DISTINCT event_id) FROM outbox.messages'), $n, 'sharing one event_id per event');

$node->safe_psql('postgres', q{
    SELECT outbox.resume('fan_amqp'), outbox.resume('fan_nats'), outbox.resume('fan_kafka')});
ok(wait_until(sub { queued($node, undef, restarting => 1) < 2 * $n }, 120), 'a third delivered');
my ($pid) = worker_pids($node);
ok(kill('KILL', $pid), 'worker killed mid-way at ' . queued($node, undef, restarting => 1) . ' queued');
ok(wait_until(sub { my @p = eval { worker_pids($node) }; @p && $p[0] != $pid }, 60),
    'a new worker took over');
ok(wait_until(sub { queued($node, undef, restarting => 1) == 0 }, 240), 'everything delivered');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');

my @produced = split /\n/, $node->safe_psql('postgres', 'SELECT event_id FROM produced');
my %got = (
    amqp => $rabbit->event_ids($rabbit->container('fan')),
    nats => $nats->event_ids($nats->container('fan')),
    kafka => kafka_event_ids($broker, 'fan'),
);
for my $kind (qw(amqp nats kafka)) {
    my $r = fault_summary("fanout_kill_$kind", produced => \@produced, received => $got{$kind});
    is($r->{distinct}, $n, "$kind: all $n event ids arrived");
}
# The kill restarted the server, which resets the counters (stats_reset): each destination
# counts only what it delivered since (possibly nothing); none has anything left.
my $delivered = $node->safe_psql('postgres', q{
    SELECT string_agg(destination || '=' || (pending + in_flight + retrying = 0),
                      ',' ORDER BY destination)
      FROM outbox.stats()});
is($delivered, 'fan_amqp=true,fan_kafka=true,fan_nats=true',
    'stats(): no destination has anything left');

$node->stop;
check_server_log($node, killed => 1);
$broker->stop;
$nats->stop;
$rabbit->stop;
done_testing();
