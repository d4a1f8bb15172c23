# Failures JetStream reports, for the nats kind: a subject no stream listens on (no responders,
# 503) dead-letters at once with the reason; a message over the stream's max_msg_size likewise
# with JetStream's error; a full stream (max_msgs, discard new) spends one attempt per try and
# dead-letters after max_attempts; outbox.requeue brings them back once the cause is fixed and
# they are delivered.
# outbox-tap: nats shared
use strict;
use warnings;
use OutboxTest;
use Test::More;

my $nats = nats_node();
$nats->nats_stream('GOOD', 'good.>');
$nats->nats_stream('SMALL', 'small.>', { max_msg_size => 64 });
$nats->nats_stream('FULL', 'full.>', { max_msgs => 1 });
my $node = outbox_node('nats_failures');
my $url = $nats->url;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('js', 'nats',
        '{"servers": "$url", "subject": "good.x", "max_attempts": 2, "retry_base": "100ms"}');
});
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('js', 'warm-up', '{}')});
ok(wait_until(sub { stats_row($node, 'js')->{delivered_total} == 1 }, 30), 'warm-up delivered');

$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, key, payload) VALUES ('js', 'nostream.x', 'lost', '{}')});
ok(wait_until(sub { dead_letter($node, 'lost') ne '' }, 30), 'no stream: dead-lettered');
is(dead_letter($node, 'lost'),
    'rejected|1|no stream for subject nostream.x: JetStream has no stream listening on it (no responders)',
    'no stream: at once (1 attempt), reason rejected, the reason in last_error');

$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, key, payload)
    VALUES ('js', 'small.x', 'big', jsonb_build_object('pad', repeat('x', 200)))});
ok(wait_until(sub { dead_letter($node, 'big') ne '' }, 30), 'too large for the stream: dead-lettered');
like(dead_letter($node, 'big'), qr/^rejected\|1\|.*JetStream error 10054: message size exceeds maximum allowed/,
    "too large: at once, with JetStream's error");

$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, key, payload) VALUES ('js', 'full.x', 'first', '{}')});
ok(wait_until(sub { stats_row($node, 'js')->{delivered_total} == 2 }, 30), 'the first message fills the stream');
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, key, payload) VALUES ('js', 'full.x', 'refused', '{}')});
ok(wait_until(sub { dead_letter($node, 'refused') ne '' }, 60), 'stream full: dead-lettered after its attempts');
like(dead_letter($node, 'refused'), qr/^max_attempts\|2\|.*JetStream error 10077: maximum messages exceeded \(attempt 2 of 2\)$/,
    'stream full: reason max_attempts after 2 attempts, with the JetStream error');
is(stats_row($node, 'js')->{failed_total}, 4, 'failed_total counts 4 (no stream, too large, 2 x full)');

# Fix the causes, requeue: all three are delivered.
$nats->nats_stream('NOSTREAM', 'nostream.>');
$nats->nats_delete_stream('SMALL');
$nats->nats_stream('SMALL', 'small.>');
$nats->nats_delete_stream('FULL');
$nats->nats_stream('FULL', 'full.>');
is($node->safe_psql('postgres', q{SELECT outbox.requeue('js')}), '3', 'requeue moves 3');
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30),
    'all three are delivered after requeue');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'no dead letters left');
is(join(',', map { $nats->count($_) } qw(NOSTREAM SMALL FULL)), '1,1,1',
    'each stream holds its message');

$node->stop;
check_server_log($node);
$nats->stop;
done_testing();
