# Failures RabbitMQ reports, for the amqp kind: a message no queue is bound for comes back
# (mandatory, basic.return) and is dead-lettered at once with the broker's reason; a missing
# exchange (channel closed 404) likewise; a basic.nack (a full queue with overflow
# reject-publish) spends one attempt per try and dead-letters after max_attempts;
# outbox.requeue brings them back once the cause is fixed and they are delivered.
# outbox-tap: rabbitmq shared
use strict;
use warnings;
use OutboxTest;
use Test::More;

my $rabbit = rabbitmq_node();
$rabbit->amqp_setup(exchange => 'outbox', queue => 'good', bind => ['good']);
$rabbit->amqp_setup(exchange => 'outbox', queue => 'tiny', bind => ['tiny'], max_length => 1);
my $node = outbox_node('amqp_failures');
my $url = $rabbit->url;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('rmq', 'amqp',
        '{"url": "$url", "exchange": "outbox", "routing_key": "good", "max_attempts": 2,
          "retry_base": "100ms"}');
    SELECT outbox.create_destination('noexchange', 'amqp',
        '{"url": "$url", "exchange": "missing", "routing_key": "good"}');
});
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('rmq', 'warm-up', '{}')});
ok(wait_until(sub { stats_row($node, 'rmq')->{delivered_total} == 1 }, 30), 'warm-up delivered');

# Unroutable: no queue is bound for routing key "nowhere".
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, key, payload) VALUES ('rmq', 'nowhere', 'lost', '{}');
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('rmq', 'fine', '{}')});
ok(wait_until(sub { dead_letter($node, 'lost') ne '' }, 30), 'unroutable: dead-lettered');
is(dead_letter($node, 'lost'), 'rejected|1|unroutable: NO_ROUTE exchange=outbox routing_key=nowhere',
    "unroutable: at once (1 attempt), reason rejected, the broker's reply in last_error");
ok(wait_until(sub { stats_row($node, 'rmq')->{delivered_total} == 2 }, 30),
    'the routable message published with it is delivered');

# The exchange does not exist: the broker closes the channel with 404.
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('noexchange', 'nox', '{}')});
ok(wait_until(sub { dead_letter($node, 'nox') ne '' }, 30), 'missing exchange: dead-lettered');
like(dead_letter($node, 'nox'), qr/^rejected\|1\|404 NOT_FOUND - no exchange 'missing' in vhost '\/'$/,
    "missing exchange: at once, with the broker's reply");
like(stats_row($node, 'noexchange')->{last_error}, qr/NOT_FOUND/, 'stats() shows the last error');

# basic.nack: the queue holds at most one message and refuses more (reject-publish).
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, key, payload) VALUES ('rmq', 'tiny', 'first', '{}')});
ok(wait_until(sub { stats_row($node, 'rmq')->{delivered_total} == 3 }, 30), 'the first message fills the queue');
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, key, payload) VALUES ('rmq', 'tiny', 'refused', '{}')});
ok(wait_until(sub { dead_letter($node, 'refused') ne '' }, 60), 'nacked: dead-lettered after its attempts');
like(dead_letter($node, 'refused'), qr/^max_attempts\|2\|basic\.nack: .*\(attempt 2 of 2\)$/,
    'nacked: reason max_attempts after 2 attempts, each a basic.nack');
is(stats_row($node, 'rmq')->{failed_total}, 3, 'failed_total counts 3 (1 unroutable + 2 nacks)');

# Fix the causes, requeue: all three are delivered.
$rabbit->amqp_setup(exchange => 'outbox', queue => 'nowhere', bind => ['nowhere']);
$rabbit->amqp_setup(exchange => 'missing', queue => 'good', bind => ['good']);
is(scalar(@{ $rabbit->received('tiny') }), 1, 'the tiny queue is emptied');
is($node->safe_psql('postgres', q{SELECT outbox.requeue('rmq')}), '2', 'requeue rmq moves 2');
is($node->safe_psql('postgres', q{SELECT outbox.requeue('noexchange')}), '1', 'requeue noexchange moves 1');
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30),
    'all three are delivered after requeue');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'no dead letters left');
is(join(',', sort map { $_->{routing_key} } @{ $rabbit->received('nowhere') }, @{ $rabbit->received('tiny') }),
    'nowhere,tiny,tiny', 'pika reads them where they were routed (tiny: the first one, then the refused one)');
is(scalar(grep { $_->{exchange} eq 'missing' } @{ $rabbit->received('good') }), 1,
    'and the one for the missing exchange through it, once it exists');

$node->stop;
check_server_log($node);
$rabbit->stop;
done_testing();
