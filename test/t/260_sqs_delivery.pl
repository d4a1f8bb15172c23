# SQS delivery end to end, against ElasticMQ (test/tools/sqs_node) checked by boto3 (an
# independent client): messages from 8 concurrent producer sessions all arrive on a standard queue, with the body and message attributes a consumer relies on (CloudEvents
# ce-* attributes, the producer's headers as one JSON attribute); rolled-back inserts never
# arrive (copies only of batches sent again: a standard queue is at-least-once, and each copy
# is reported); a binary payload arrives in base64 and says so; on a FIFO queue the key is the
# MessageGroupId and the event id the MessageDeduplicationId, so a copy sent again is dropped;
# a keyless message for a FIFO queue takes the destination's "group", or is dead-lettered
# without one. 2,000 messages by default, 100,000 with OUTBOX_TEST_FULL (test/run_tests --full).
use strict;
use warnings;
use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $n = $ENV{OUTBOX_TEST_FULL} ? 100000 : 2000;
my $per_client = $n / 8;
my $sqs = sqs_node();
$sqs->{queue_urls}{$_} = $sqs->sqs_queue($_) for qw(orders events.fifo);
my $node = outbox_node('sqs_delivery', conf => 'log_statement = none');
my $orders = $sqs->sqs_config('orders', topic => 'orders.created');
my $fifo = $sqs->sqs_config('events.fifo', ordering => 'key');
my $fifo_group = $sqs->sqs_config('events.fifo', group => 'no-key');

$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('orders', 'sqs', '$orders');
    SELECT outbox.create_destination('events', 'sqs', '$fifo');
    SELECT outbox.create_destination('grouped', 'sqs', '$fifo_group');
    CREATE TABLE sent (key text PRIMARY KEY, event_id uuid NOT NULL, n bigint NOT NULL);
    CREATE SEQUENCE n_seq;
});
is($node->safe_psql('postgres', q{SELECT kind FROM outbox.stats() WHERE destination = 'orders'}),
    'sqs', 'stats() shows the destination with kind sqs');

my $script = PostgreSQL::Test::Utils::tempdir() . '/produce.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
\set c :client_id
WITH m AS (
    INSERT INTO outbox.messages (destination, key, payload, headers)
    SELECT 'orders', 'k' || n, jsonb_build_object('n', n, 'client', :c),
           jsonb_build_object('x-client', :c::text, 'x-n', n::text)
      FROM (SELECT nextval('n_seq') AS n) s
    RETURNING key, event_id, (payload->>'n')::bigint AS n)
INSERT INTO sent SELECT * FROM m;
});
my $start = time;
$node->command_ok(['pgbench', '-n', '-c', '8', '-j', '8', '-t', $per_client, '-f', $script,
        '-h', $node->host, '-p', $node->port, 'postgres'], "8 producers commit $n messages");
$node->safe_psql('postgres', q{
    BEGIN;
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', 'rolled-back', '{}');
    ROLLBACK;
});
ok(wait_until(sub {
    my $s = stats_row($node, 'orders');
    $s->{pending} == 0 && $s->{in_flight} == 0 && $s->{delivered_total} == $n }, 600),
    "outbox.stats() shows all $n delivered and none pending")
  or diag(explain(stats_row($node, 'orders')));
diag(sprintf('produced and delivered %d messages in %.1f s', $n, time - $start));
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');
# A standard queue is at-least-once: a batch whose answer did not come in time is sent again
# (an attempt spent or deferred), and SQS may have stored the first copy. No copy without one.
my $stats = stats_row($node, 'orders');
my $resent = $stats->{failed_total} + $stats->{deferred_total};
diag("failed attempts $stats->{failed_total}, deferred $stats->{deferred_total}");

my %sent = map { my ($k, $e, $n) = split /\|/; ($e => { key => $k, n => $n }) }
  split /\n/, $node->safe_psql('postgres', 'SELECT key, event_id, n FROM sent');
my $read_start = time;
my $got = $sqs->received('orders');
diag(sprintf('boto3 read %d messages in %.1f s', scalar(@$got), time - $read_start));
my (%seen, @wrong);
for my $m (@$got) {
    my $h = $m->{headers};
    my $e = $h->{'ce-id'} // '';
    $seen{$e}++;
    my $s = $sent{$e};
    push @wrong, "unexpected event $e" and next unless $s;
    my $payload = decode_json($m->{body});
    my $headers = decode_json($h->{headers} // '{}');
    push @wrong, "$e: payload $m->{body}" unless $payload->{n} == $s->{n};
    push @wrong, "$e: ce-type" unless ($h->{'ce-type'} // '') eq 'orders.created';
    push @wrong, "$e: ce-specversion" unless ($h->{'ce-specversion'} // '') eq '1.0';
    push @wrong, "$e: ce-source" unless ($h->{'ce-source'} // '') eq '/outbox/postgres';
    push @wrong, "$e: content-type" unless ($h->{'content-type'} // '') eq 'application/json';
    push @wrong, "$e: ce-time"
      unless ($h->{'ce-time'} // '') =~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
    push @wrong, "$e: headers $h->{headers}"
      unless ($headers->{'x-n'} // '') eq $s->{n} && ($headers->{'x-client'} // '') eq $payload->{client};
    push @wrong, "$e: group on a standard queue" if defined $m->{group};
}
my $r = fault_summary('sqs_delivery', produced => [ keys %sent ],
    received => [ map { $_->{headers}{'ce-id'} // () } @$got ]);
is(scalar(grep { $sent{$_} } keys %seen), $n, 'every event id arrived');
cmp_ok($r->{duplicates}, '<=', 10 * $resent,
    "copies only of batches sent again ($r->{duplicates} copies, $resent batches' attempts)");
is(scalar(@wrong), 0, 'every message has the right body and attributes')
  or diag(join("\n", @wrong[0 .. ($#wrong < 9 ? $#wrong : 9)]));

# A binary payload goes in base64 and says so; the message's topic is its ce-type; a
# traceparent header travels as ce-traceparent.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, payload_bytes, headers)
    VALUES ('orders', 'orders.bin', '\x00ff10'::bytea,
            '{"content-type": "application/x-thing",
              "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}')});
ok(wait_until(sub { stats_row($node, 'orders')->{delivered_total} == $n + 1 }, 30),
    'a binary message with its own topic delivered');
my ($bin) = grep { ($_->{headers}{'ce-type'} // '') eq 'orders.bin' } @{ $sqs->received('orders') };
is($bin->{body}, 'AP8Q', 'the payload bytes arrive in base64');
is($bin->{headers}{'body-encoding'}, 'base64', 'the body-encoding attribute says so');
is($bin->{headers}{'content-type'}, 'application/x-thing', "content-type is the producer's");
is($bin->{headers}{'ce-type'}, 'orders.bin', 'ce-type is the topic');
is($bin->{headers}{'ce-traceparent'}, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    'ce-traceparent is the traceparent');

# FIFO: group = key, deduplication id = event id; a copy with the same event id is dropped.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'events', 'g' || (g % 3), jsonb_build_object('n', g) FROM generate_series(1, 30) g});
ok(wait_until(sub { stats_row($node, 'events')->{delivered_total} == 30 }, 30),
    'FIFO: 30 messages delivered');
my $fifo_got = $sqs->received('events.fifo');
is(scalar(@$fifo_got), 30, 'FIFO: boto3 reads 30 messages');
is(scalar(grep { ($_->{dedup} // '') eq $_->{headers}{'ce-id'} } @$fifo_got), 30,
    'FIFO: MessageDeduplicationId is the event id');
my %by_group;
push @{ $by_group{$_->{group}} }, decode_json($_->{body})->{n}
  for sort { $a->{seq} <=> $b->{seq} } @$fifo_got;
is(join(',', sort keys %by_group), 'g0,g1,g2', 'FIFO: MessageGroupId is the key');
is(scalar(grep { my $l = $by_group{$_}; join(',', @$l) ne join(',', sort { $a <=> $b } @$l) } keys %by_group),
    0, 'FIFO: each group arrives in id order');
my $copy = $fifo_got->[0]{headers}{'ce-id'};
my $copy_key = $fifo_got->[0]{group};
$node->safe_psql('postgres', qq{
    INSERT INTO outbox.messages (destination, event_id, key, payload)
    VALUES ('events', '$copy', '$copy_key', '{"copy": true}')});
ok(wait_until(sub { stats_row($node, 'events')->{delivered_total} == 31 }, 30),
    'FIFO: a copy with the same event id is acknowledged');
is(scalar(@{ $sqs->received('events.fifo') }), 30, 'FIFO: and dropped by SQS (deduplication id)');

# A keyless message: the destination's group, or the dead letters without one.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, payload) VALUES ('grouped', '{"keyless": 1}');
    INSERT INTO outbox.messages (destination, payload) VALUES ('events', '{"keyless": 2}')});
ok(wait_until(sub { stats_row($node, 'grouped')->{delivered_total} == 1 }, 30),
    'FIFO: a keyless message with "group" delivered');
my ($keyless) = grep { defined $_->{body} && $_->{body} =~ /keyless/ } @{ $sqs->received('events.fifo') };
is($keyless->{group}, 'no-key', 'FIFO: its MessageGroupId is the group');
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters') eq '1' }, 30),
    'FIFO: a keyless message without "group" is dead-lettered');
is($node->safe_psql('postgres', 'SELECT reason, attempts, last_error FROM outbox.dead_letters'),
    'rejected|1|a FIFO queue needs a MessageGroupId: give the message a key, or the destination a "group"',
    'at once, saying why');

$node->stop;
check_server_log($node);
$sqs->stop;
done_testing();
