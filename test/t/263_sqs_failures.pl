# Failures SQS reports, for the sqs kind: a queue that does not exist dead-letters at once with
# SQS's reason (QueueDoesNotExist); a message over SQS's 256 KiB dead-letters at once without a
# request; a message SQS cannot hold as text (U+FFFF) likewise; outbox.requeue brings the
# first back once the queue exists, and it is delivered. (A failed entry with SenderFault is
# left to the unit tests: ElasticMQ refuses no entry the driver's own checks let through; it
# does not apply a queue's MaximumMessageSize, for one.)
use strict;
use warnings;
use OutboxTest;
use Test::More;

my $sqs = sqs_node();
$sqs->{queue_urls}{good} = $sqs->sqs_queue('good');
$sqs->{queue_urls}{missing} = $sqs->{queue_urls}{good} =~ s/good$/missing/r;
my $node = outbox_node('sqs_failures');
my ($good, $missing) = map { $sqs->sqs_config($_, max_attempts => 2, retry_base => '100ms') }
  qw(good missing);
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('good', 'sqs', '$good');
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
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('good', 'odd', '"\uffff"')});
ok(wait_until(sub { dead_letter($node, 'odd') ne '' }, 30), 'U+FFFF: dead-lettered');
like(dead_letter($node, 'odd'), qr/^rejected\|1\|SQS refuses the message: its payload holds a character SQS does not accept/,
    'U+FFFF: at once, saying why');
is(stats_row($node, 'good')->{failed_total} + stats_row($node, 'missing')->{failed_total}, 3,
    'failed_total counts 3 (one attempt each)');
is($sqs->count('good'), 1, 'only the warm-up reached the queue');

# Create the missing queue, requeue: the message is delivered.
$sqs->sqs_queue('missing');
is($node->safe_psql('postgres', q{SELECT outbox.requeue('missing')}), '1', 'requeue moves 1 of missing');
ok(wait_until(sub { $node->safe_psql('postgres',
    q{SELECT count(*) FROM outbox.messages WHERE destination = 'missing'}) eq '0' }, 30),
    'it is delivered after requeue');
is($sqs->count('missing'), 1, 'the queue holds it');

$node->stop;
check_server_log($node);
$sqs->stop;
done_testing();
