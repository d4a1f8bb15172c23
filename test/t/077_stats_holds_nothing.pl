# outbox.stats() and outbox.conservation() take the queue counts the first time they are needed
# (after a start or outbox.recount()) under a short SHARE lock on outbox.messages, and release it
# once the counts are taken: a session that called them and keeps its transaction open holds up
# neither producers nor the worker.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('stats_lock');
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('sl', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "sl"}');
    INSERT INTO outbox.messages (destination, payload) SELECT 'sl', '{}' FROM generate_series(1, 100);
});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30), 'warm-up delivered');

for my $call ('SELECT * FROM outbox.stats()', 'SELECT * FROM outbox.conservation()') {
    $node->safe_psql('postgres', 'SELECT outbox.recount()');   # the next call counts again
    my $open = $node->background_psql('postgres');
    $open->query_safe("BEGIN; $call;");
    is($node->safe_psql('postgres', q{
        SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE l.relation = 'outbox.messages'::regclass AND l.mode = 'ShareLock' AND a.state = 'idle in transaction'}),
        '0', "after $call, the open transaction holds no SHARE lock on outbox.messages");
    my ($rc, $out, $err) = $node->psql('postgres', q{SET statement_timeout = '5s';
        INSERT INTO outbox.messages (destination, payload) SELECT 'sl', '{"while": "open"}' FROM generate_series(1, 10)});
    is($rc, 0, "a producer is not held up by the open transaction that called $call") or diag($err);
    ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30),
        "the worker delivers meanwhile ($call)");
    $open->query_safe('COMMIT');
    $open->quit;
}
is($node->safe_psql('postgres', q{SELECT pending FROM outbox.stats() WHERE destination = 'sl'}), '0',
    'and the counts are right: nothing pending');
is($node->safe_psql('postgres', q{SELECT balance FROM outbox.conservation() WHERE destination = 'sl'}), '0',
    'every message accounted for');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
