# Failures the broker reports: a permanent one (message too large, invalid record)
# dead-letters the row at once with the librdkafka error name; a retriable one spends one
# attempt per try and dead-letters after max_attempts; outbox.requeue brings them back and they
# are delivered.
use strict;
use warnings;
use OutboxTest;
use Test::More;

my $broker = kafka_broker();
my $node = outbox_node('failures');
my $bootstrap = $broker->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('perm', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "perm", "max_attempts": 2, "retry_base": "100ms"}');
});
# Let the producer connect and learn the topic before errors are armed.
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('perm', 'warm-up', '{}')});
ok(wait_until(sub { stats_row($node, 'perm')->{delivered_total} == 1 }, 30), 'warm-up delivered');

for my $case (['MSG_SIZE_TOO_LARGE', 'too-big'], ['INVALID_RECORD', 'not-allowed']) {
    my ($error, $key) = @$case;
    $broker->ctl("errors produce 1 $error");
    $node->safe_psql('postgres', qq{INSERT INTO outbox.messages (destination, key, payload) VALUES ('perm', '$key', '{}')});
    ok(wait_until(sub { dead_letter($node, $key) ne '' }, 30), "$key: dead-lettered");
    like(dead_letter($node, $key), qr/^rejected\|1\|$error: /, "$key: at once (1 attempt), reason rejected, the error name in last_error");
}
my $s = stats_row($node, 'perm');
is($s->{dead}, 2, 'stats() counts 2 dead letters');
like($s->{last_error}, qr/INVALID_RECORD/, 'and shows the last error');

# Retriable: each attempt fails (librdkafka's own retries included), 2 attempts, then dead.
$broker->ctl('errors produce 50 NOT_ENOUGH_REPLICAS');
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('perm', 'flaky', '{}')});
ok(wait_until(sub { dead_letter($node, 'flaky') ne '' }, 60), 'flaky: dead-lettered after its attempts');
like(dead_letter($node, 'flaky'), qr/^max_attempts\|2\|NOT_ENOUGH_REPLICAS: .*\(attempt 2 of 2\)$/,
    'flaky: reason max_attempts after 2 attempts, with the broker error');
$broker->ctl('clear produce');
is(stats_row($node, 'perm')->{failed_total}, 4, 'failed_total counts 4 failed attempts (1 + 1 + 2)');

# Requeue all three; they are delivered.
is($node->safe_psql('postgres', q{
    SELECT outbox.requeue(array_agg(id)) FROM outbox.dead_letters WHERE key IN ('too-big', 'not-allowed')}),
    '2', 'requeue by ids moves 2');
is($node->safe_psql('postgres', q{SELECT outbox.requeue('perm')}), '1', 'requeue by destination moves 1');
ok(wait_until(sub {
    my %k = map { $_->{key} => 1 } @{ $broker->consume('perm') };
    $k{'too-big'} && $k{'not-allowed'} && $k{'flaky'} }, 30), 'all three are delivered after requeue');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'no dead letters left');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages'), '0', 'nothing queued');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
