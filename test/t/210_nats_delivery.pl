# NATS JetStream delivery end to end: 10,000 messages from 4 concurrent producer sessions are
# stored exactly once each in the stream (counted by event id by nats-py, an independent
# client) with the subject, payload and headers a consumer relies on (Nats-Msg-Id = event_id,
# CloudEvents NATS binding ce-* headers); rolled-back inserts never arrive; the message's topic
# overrides the destination's subject; a copy published again is dropped by JetStream's
# duplicate window.
# outbox-tap: nats shared
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $nats = nats_node();
$nats->nats_stream('ORDERS', 'orders.>');
my $node = outbox_node('nats_delivery');
my $url = $nats->url;

$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('orders', 'nats',
        '{"servers": "$url", "subject": "orders.created"}');
    CREATE TABLE sent (key text PRIMARY KEY, event_id uuid NOT NULL, n bigint NOT NULL);
    CREATE SEQUENCE n_seq;
});
is($node->safe_psql('postgres', q{SELECT kind FROM outbox.stats() WHERE destination = 'orders'}),
    'nats', 'stats() shows the destination with kind nats');

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
$node->command_ok(['pgbench', '-n', '-c', '4', '-j', '4', '-t', '2500', '-f', $script,
        '-h', $node->host, '-p', $node->port, 'postgres'], '4 producers commit 10,000 messages');
$node->safe_psql('postgres', q{
    BEGIN;
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', 'rolled-back', '{}');
    ROLLBACK;
});

ok(wait_until(sub {
    my $s = stats_row($node, 'orders');
    $s->{pending} == 0 && $s->{in_flight} == 0 && $s->{delivered_total} == 10000 }, 180),
    'outbox.stats() shows all 10,000 delivered (PubAck) and none pending')
  or diag(explain(stats_row($node, 'orders')));
diag(sprintf('produced and delivered 10,000 messages in %.1f s', time - $start));
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages'), '0', 'the queue is empty');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');
is($nats->count('ORDERS'), 10000, 'the stream holds exactly 10,000 messages');

my %sent = map { my ($k, $e, $n) = split /\|/; ($e => { key => $k, n => $n }) }
  split /\n/, $node->safe_psql('postgres', 'SELECT key, event_id, n FROM sent');
is(scalar(keys %sent), 10000, 'the producers recorded 10,000 messages');

my $got = $nats->received('ORDERS');
my (%seen, @wrong);
for my $m (@$got) {
    my $h = $m->{headers};
    my $e = $h->{'ce-id'} // '';
    $seen{$e}++;
    my $s = $sent{$e};
    push @wrong, "unexpected event $e" and next unless $s;
    my $payload = JSON::PP::decode_json($m->{body});
    push @wrong, "$e: payload $m->{body}" unless $payload->{n} == $s->{n};
    push @wrong, "$e: Nats-Msg-Id" unless ($h->{'Nats-Msg-Id'} // '') eq $e;
    push @wrong, "$e: subject $m->{subject}" unless $m->{subject} eq 'orders.created';
    push @wrong, "$e: ce-type" unless ($h->{'ce-type'} // '') eq 'orders.created';
    push @wrong, "$e: ce-specversion" unless ($h->{'ce-specversion'} // '') eq '1.0';
    push @wrong, "$e: ce-source" unless ($h->{'ce-source'} // '') eq '/outbox/postgres';
    push @wrong, "$e: ce-datacontenttype"
      unless ($h->{'ce-datacontenttype'} // '') eq 'application/json';
    push @wrong, "$e: ce-time"
      unless ($h->{'ce-time'} // '') =~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
    push @wrong, "$e: x-n" unless ($h->{'x-n'} // '') eq $s->{n};
    push @wrong, "$e: x-client" unless ($h->{'x-client'} // '') eq $payload->{client};
}
is(scalar(@$got), 10000, 'nats-py reads exactly 10,000 messages from stream ORDERS');
is(scalar(grep { $sent{$_} } keys %seen), 10000, 'every event id arrived');
is(scalar(grep { $seen{$_} > 1 } keys %seen), 0, 'none arrived twice');
is(scalar(@wrong), 0, 'every message has the right subject, payload and headers')
  or diag(join("\n", @wrong[0 .. ($#wrong < 9 ? $#wrong : 9)]));

# The message's topic is the subject; a binary payload keeps its bytes.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, payload_bytes, headers)
    VALUES ('orders', 'orders.bin', '\x00ff10'::bytea, '{"content-type": "application/x-thing"}')});
ok(wait_until(sub { stats_row($node, 'orders')->{delivered_total} == 10001 }, 30),
    'a binary message with its own subject delivered');
my ($bin) = grep { $_->{subject} eq 'orders.bin' } @{ $nats->received('ORDERS') };
is($bin->{body_b64}, 'AP8Q', 'the payload bytes arrive unchanged');
is($bin->{headers}{'ce-datacontenttype'}, 'application/x-thing',
    "ce-datacontenttype is the producer's content-type");
is($bin->{headers}{'ce-type'}, 'orders.bin', 'ce-type is the subject');

# A message delivered again (requeued from the archive by hand, as after a crash between the
# PubAck and the write-back) keeps its event id; JetStream's duplicate window drops the copy.
my $again = $node->safe_psql('postgres', q{SELECT event_id FROM sent WHERE key = 'k1'});
$node->safe_psql('postgres', qq{
    INSERT INTO outbox.messages (destination, event_id, key, payload)
    VALUES ('orders', '$again', 'k1', '{"n": 1}')});
ok(wait_until(sub { stats_row($node, 'orders')->{delivered_total} == 10002 }, 30),
    'the copy is acknowledged (PubAck, duplicate)');
is($nats->count('ORDERS'), 10001, 'and not stored twice: the stream still holds 10,001');

$node->stop;
check_server_log($node);
$nats->stop;
done_testing();
