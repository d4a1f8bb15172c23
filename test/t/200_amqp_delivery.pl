# RabbitMQ delivery end to end: 10,000 messages from 4 concurrent producer sessions arrive
# exactly once each (counted by event id by pika, an independent AMQP client) with the routing
# key, payload, properties and headers a consumer relies on (persistent delivery, message_id =
# event_id, content type, CloudEvents AMQP binding attributes); rolled-back inserts never
# arrive; the message's topic overrides the destination's routing_key; binary payloads keep
# their bytes and content type.
# outbox-tap: rabbitmq shared
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $rabbit = rabbitmq_node();
$rabbit->amqp_setup(exchange => 'shop', queue => 'orders', bind => ['orders.#']);
$rabbit->amqp_setup(exchange => 'shop', queue => 'other', bind => ['other.*']);
my $node = outbox_node('amqp_delivery');
my $url = $rabbit->url;

$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('orders', 'amqp',
        '{"url": "$url", "exchange": "shop", "routing_key": "orders.created"}');
    CREATE TABLE sent (key text PRIMARY KEY, event_id uuid NOT NULL, n bigint NOT NULL);
    CREATE SEQUENCE n_seq;
});
is($node->safe_psql('postgres', q{SELECT kind FROM outbox.stats() WHERE destination = 'orders'}),
    'amqp', 'stats() shows the destination with kind amqp');

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
    'outbox.stats() shows all 10,000 delivered (confirmed by the broker) and none pending')
  or diag(explain(stats_row($node, 'orders')));
diag(sprintf('produced and delivered 10,000 messages in %.1f s', time - $start));
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages'), '0', 'the queue is empty');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');

my %sent = map { my ($k, $e, $n) = split /\|/; ($e => { key => $k, n => $n }) }
  split /\n/, $node->safe_psql('postgres', 'SELECT key, event_id, n FROM sent');
is(scalar(keys %sent), 10000, 'the producers recorded 10,000 messages');

my $got = $rabbit->received('orders');
my (%seen, @wrong);
for my $m (@$got) {
    my $h = $m->{headers};
    my $p = $m->{properties};
    my $e = $h->{'cloudEvents:id'} // '';
    $seen{$e}++;
    my $s = $sent{$e};
    push @wrong, "unexpected event $e" and next unless $s;
    my $payload = JSON::PP::decode_json($m->{body});
    push @wrong, "$e: payload $m->{body}" unless $payload->{n} == $s->{n};
    push @wrong, "$e: message_id" unless ($p->{message_id} // '') eq $e;
    push @wrong, "$e: delivery_mode" unless ($p->{delivery_mode} // 0) == 2;
    push @wrong, "$e: content_type" unless ($p->{content_type} // '') eq 'application/json';
    push @wrong, "$e: routing key $m->{routing_key}" unless $m->{routing_key} eq 'orders.created';
    push @wrong, "$e: exchange" unless $m->{exchange} eq 'shop';
    push @wrong, "$e: cloudEvents:type" unless ($h->{'cloudEvents:type'} // '') eq 'orders.created';
    push @wrong, "$e: cloudEvents:specversion" unless ($h->{'cloudEvents:specversion'} // '') eq '1.0';
    push @wrong, "$e: cloudEvents:source" unless ($h->{'cloudEvents:source'} // '') eq '/outbox/postgres';
    push @wrong, "$e: cloudEvents:time"
      unless ($h->{'cloudEvents:time'} // '') =~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
    push @wrong, "$e: x-n" unless ($h->{'x-n'} // '') eq $s->{n};
    push @wrong, "$e: x-client" unless ($h->{'x-client'} // '') eq $payload->{client};
}
is(scalar(@$got), 10000, 'pika reads exactly 10,000 messages from queue orders');
is(scalar(grep { $sent{$_} } keys %seen), 10000, 'every event id arrived');
is(scalar(grep { $seen{$_} > 1 } keys %seen), 0, 'none arrived twice');
is(scalar(@wrong), 0, 'every message has the right routing key, payload, properties and headers')
  or diag(join("\n", @wrong[0 .. ($#wrong < 9 ? $#wrong : 9)]));
is($rabbit->count('orders'), 0, 'the queue holds nothing more');

# The message's topic is the routing key; a binary payload keeps its bytes and a producer's
# content-type wins.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, payload_bytes, headers)
    VALUES ('orders', 'other.bin', '\x00ff10'::bytea, '{"content-type": "application/x-thing"}'),
           ('orders', 'other.raw', '\x0102'::bytea, NULL)});
ok(wait_until(sub { stats_row($node, 'orders')->{delivered_total} == 10002 }, 30),
    'two binary messages with their own topics delivered');
my @other = sort { $a->{routing_key} cmp $b->{routing_key} } @{ $rabbit->received('other') };
is(join(',', map { $_->{routing_key} } @other), 'other.bin,other.raw',
    'the message topic is the routing key (bound to another queue)');
is(join(',', map { $_->{body_b64} } @other), 'AP8Q,AQI=', 'the payload bytes arrive unchanged');
is(join(',', map { $_->{properties}{content_type} } @other),
    'application/x-thing,application/octet-stream',
    "content type: the producer's header, else application/octet-stream for payload_bytes");
is(join(',', map { $_->{headers}{'cloudEvents:type'} } @other), 'other.bin,other.raw',
    'cloudEvents:type is the routing key');
ok(!grep({ exists $_->{headers}{'content-type'} } @other),
    'content-type travels as the property, not as a header too');

# Between its polls (each a short 'claiming', which one sample can catch) the worker is idle.
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT state FROM outbox.workers()') eq 'idle' }, 10),
    'outbox.workers() shows the worker idle');

$node->stop;
check_server_log($node);
# The test's own statements are logged (log_statement = all); what the worker logs must not
# show the URL's credentials.
my @worker_lines = grep { /outbox/ && !/statement:|^\s/ } split /\n/,
  PostgreSQL::Test::Utils::slurp_file($node->logfile);
is(scalar(grep { /guest:guest/ } @worker_lines), 0,
    'the URL credentials never reach a worker log line');
$rabbit->stop;
done_testing();
