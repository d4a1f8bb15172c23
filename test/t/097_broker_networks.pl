# The brokers a role other than a superuser configures, when the worker connects (issue 35):
# outbox.broker_allowed_networks is checked for every address librdkafka connects to. A
# non-superuser's Kafka destination and subscription on 127.0.0.1 work while the setting lists
# 127.0.0.0/8; once a reload empties it, their connections are refused before they are made
# (the server log says which address and why), their messages wait without spending an attempt,
# and what they see is only that the broker cannot be reached (not what answered there). A
# superuser's destination on the same broker goes on delivering. Listed again, everything
# arrives: nothing lost, nothing twice.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
$broker->ctl("create $_ 1") for qw(tenant own);
my $node = outbox_node('broker_networks', conf => join("\n",
    "outbox.broker_allowed_networks = '127.0.0.0/8'",
    # a refused broker's messages time out (and are deferred) within half a lease
    "outbox.lease_timeout = '6s'") . "\n");

$node->safe_psql('postgres', qq{
    CREATE ROLE platform LOGIN;
    GRANT USAGE ON SCHEMA outbox TO platform;
    GRANT EXECUTE ON FUNCTION outbox.create_destination(text, text, jsonb),
        outbox.create_subscription(text, text, jsonb, regprocedure) TO platform;
    CREATE SCHEMA tenant AUTHORIZATION platform;
    SET ROLE platform;
    CREATE TABLE tenant.applied (n int);
    CREATE FUNCTION tenant.apply(m outbox.inbox_message) RETURNS void LANGUAGE sql
        AS \$\$ INSERT INTO tenant.applied VALUES ((m.payload->>'n')::int) \$\$;
    SELECT outbox.create_destination('tenant', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "tenant"}');
    SELECT outbox.create_subscription('tenant_in', 'kafka', '{"bootstrap.servers": "$bootstrap", "topics": ["own"]}',
        'tenant.apply(outbox.inbox_message)');
    RESET ROLE;
    SELECT outbox.create_destination('own', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "own"}');
});

my $n = 0;
# Queues $count more messages for $destination, numbered on from the last.
sub produce_more {
    my ($destination, $count) = @_;
    my $from = $n + 1;
    $n += $count;
    produce($node, $destination, $from, $n);
}
sub applied { $node->safe_psql('postgres', q{SELECT count(*) FROM tenant.applied}) }

produce_more('tenant', 5);
produce_more('own', 5);
ok(wait_until(sub { queued($node, 'tenant') == 0 && queued($node, 'own') == 0 }, 60),
    'listed: the tenant\'s destination and the superuser\'s deliver');
ok(wait_until(sub { applied() == 5 }, 60), 'listed: the tenant\'s subscription consumes');

# The reload empties the list: 127.0.0.1 is a loopback address again.
my $log_offset = -s $node->logfile;
$node->adjust_conf('postgresql.conf', 'outbox.broker_allowed_networks', "''");
$node->reload;
ok(wait_until(sub { $node->safe_psql('postgres', q{SHOW outbox.broker_allowed_networks}) eq '' }, 30),
    'the reload emptied outbox.broker_allowed_networks');
produce_more('tenant', 5);
produce_more('own', 5);
ok(wait_until(sub { queued($node, 'own') == 0 }, 60), 'a superuser\'s destination on the same broker still delivers');
ok(wait_until(sub { (stats_row($node, 'tenant')->{last_error} // '') =~ /deferred/ }, 60),
    'the tenant\'s messages are deferred');
my $stats = stats_row($node, 'tenant');
is($stats->{last_error},
    'deferred, destination unreachable: why is in the server log (shown here only for brokers a '
    . 'superuser configured)',
    'the tenant sees that its broker cannot be reached, not what answered there');
is($stats->{pending}, 5, 'its 5 messages wait');
is($node->safe_psql('postgres', q{SELECT max(attempts) FROM outbox.messages WHERE destination = 'tenant'}), '0',
    'no attempt was spent on them');
ok(wait_until(sub { slurp_file($node->logfile, $log_offset) =~
        /tenant: not connecting to 127\.0\.0\.1:\d+: 127\.0\.0\.1 is a loopback address, which outbox\.broker_allowed_networks does not allow/ }, 30),
    'the server log says which address was refused and why');
ok(wait_until(sub { ($node->safe_psql('postgres', q{
        SELECT string_agg(DISTINCT last_error, '; ') FROM outbox.subscriptions() WHERE subscription = 'tenant_in'}) // '') =~ /cannot be reached/ }, 60),
    'the tenant\'s subscription shows that its cluster cannot be reached');
is($node->safe_psql('postgres', q{
        SELECT string_agg(DISTINCT last_error, '; ') FROM outbox.subscriptions() WHERE subscription = 'tenant_in'}),
    'the cluster cannot be reached: why is in the server log (shown here only for brokers a '
    . 'superuser configured)',
    'and nothing of what answered');
my $first_missed = $n + 1;
produce_more('own', 3);  # to the tenant's subscription's topic, once its consumer is refused
ok(wait_until(sub { queued($node, 'own') == 0 }, 60), 'three more records reach its topic');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM tenant.applied WHERE n >= $first_missed}), '0',
    'the subscription applies none of them meanwhile');
is(scalar(@{ $broker->consume('tenant') }), 5, 'kcat: still 5 messages on the tenant\'s topic');

# Listed again: everything arrives.
$node->adjust_conf('postgresql.conf', 'outbox.broker_allowed_networks', "'127.0.0.1/32'");
$node->reload;
ok(wait_until(sub { queued($node, 'tenant') == 0 }, 90), 'listed again: the waiting messages are delivered');
ok(wait_until(sub { applied() == 13 }, 60), 'and the subscription applies the records it missed: 13 in all');
my @tenant = map { $_->{payload} } @{ $broker->consume('tenant') };
is(scalar(@tenant), 10, 'kcat: 10 messages on the tenant\'s topic, none twice');
is($node->safe_psql('postgres', q{SELECT count(DISTINCT n) || '/' || count(*) FROM tenant.applied}), '13/13',
    'the subscription applied each record once');

check_server_log($node);
done_testing();
