# Failures SQS reports, for the sqs kind: a queue that does not exist dead-letters at once with
# SQS's reason (QueueDoesNotExist); a message over SQS's 256 KiB dead-letters at once without a
# request; a message the queue's own MaximumMessageSize refuses dead-letters with SQS's reason
# (a failed entry with SenderFault); a message SQS cannot hold as text (U+FFFF) likewise;
# outbox.requeue brings them back once the cause is fixed and they are delivered.
use strict;
use warnings;
use OutboxTest;
use Test::More;

my $sqs = sqs_node();
$sqs->{queue_urls}{good} = $sqs->sqs_queue('good');
$sqs->{queue_urls}{small} = $sqs->sqs_queue('small', max_size => 1024);
$sqs->{queue_urls}{missing} = $sqs->{queue_urls}{good} =~ s/good$/missing/r;
my $node = outbox_node('sqs_failures');
my ($good, $small, $missing) = map { $sqs->sqs_config($_, max_attempts => 2, retry_base => '100ms') }
  qw(good small missing);
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('good', 'sqs', '$good');
    SELECT outbox.create_destination('small', 'sqs', '$small');
    SELECT outbox.create_destination('missing', 'sqs', '$missing');
});
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('good', 'warm-up', '{}')});
ok(wait_until(sub { stats_row($node, 'good')->{delivered_total} == 1 }, 30), 'warm-up delivered');

$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('missing', 'lost', '{}')});
ok(wait_until(sub { dead_letter($node, 'lost') ne '' }, 30), 'no queue: dead-lettered');
is(dead_letter($node, 'lost'),
    'rejected|1|SQS answered HTTP 400: QueueDoesNotExist: The specified queue does not exist.',
    "no queue: at once (1 attempt), reason rejected, SQS's reason in last_error");

$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload)
    VALUES ('good', 'huge', jsonb_build_object('pad', repeat('x', 262144)))});
ok(wait_until(sub { dead_letter($node, 'huge') ne '' }, 30), 'over 256 KiB: dead-lettered');
like(dead_letter($node, 'huge'),
    qr/^rejected\|1\|message too large for SQS: \d+ bytes with its attributes, SQS takes at most 262144$/,
    'over 256 KiB: at once, saying why');

$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload)
    VALUES ('small', 'big', jsonb_build_object('pad', repeat('x', 2000)))});
ok(wait_until(sub { dead_letter($node, 'big') ne '' }, 30), "over the queue's maximum: dead-lettered");
like(dead_letter($node, 'big'), qr/^rejected\|1\|SQS refused the message: \S+/,
    "over the queue's maximum: at once, with SQS's reason");
diag('SQS said: ' . dead_letter($node, 'big'));

$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('good', 'odd', '"\uffff"')});
ok(wait_until(sub { dead_letter($node, 'odd') ne '' }, 30), 'U+FFFF: dead-lettered');
like(dead_letter($node, 'odd'), qr/^rejected\|1\|SQS refuses the message: its payload holds a character SQS does not accept/,
    'U+FFFF: at once, saying why');
is(stats_row($node, 'good')->{failed_total} + stats_row($node, 'small')->{failed_total}
    + stats_row($node, 'missing')->{failed_total}, 4, 'failed_total counts 4 (one attempt each)');

# Fix the causes, requeue: the missing queue's and the small queue's message are delivered.
$sqs->sqs_queue('missing');
$sqs->client('sqs-delete', '--queue', 'small');
$sqs->sqs_queue('small');
is($node->safe_psql('postgres', q{SELECT outbox.requeue('missing')}), '1', 'requeue moves 1 of missing');
is($node->safe_psql('postgres', q{SELECT outbox.requeue('small')}), '1', 'requeue moves 1 of small');
ok(wait_until(sub { $node->safe_psql('postgres',
    q{SELECT count(*) FROM outbox.messages WHERE destination IN ('missing', 'small')}) eq '0' }, 30),
    'both are delivered after requeue');
is(join(',', map { $sqs->count($_) } qw(missing small)), '1,1', 'each queue holds its message');

$node->stop;
check_server_log($node);
$sqs->stop;
done_testing();
