# MQTT 5 delivery end to end (issue 42): messages from 8 concurrent producer sessions (5,000;
# 100,000 with OUTBOX_TEST_FULL=1) arrive at a persistent-session QoS 1 subscriber (paho-mqtt,
# an independent client) exactly as produced, each once, with the properties a consumer relies
# on: the CloudEvents MQTT binding's user properties (id = event_id, specversion, source, type,
# time), the producer's headers as user properties, Content Type, Payload Format Indicator,
# Correlation Data = the event id, a Message Expiry Interval from expires_at; rolled-back
# inserts never arrive; a message's topic overrides the destination's; QoS 2 delivers too; two
# workers of a database connect with client ids of their own (a shared one would make the
# broker drop the older connection).
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $full = ($ENV{OUTBOX_TEST_FULL} // '') eq '1';
my $per_client = $full ? 12500 : 625;
my $total = 8 * $per_client;

my $mqtt = mosquitto_node();
my $node = outbox_node('mqtt_delivery', conf => join("\n", 'log_statement = none', 'outbox.workers = 2'));
my $config = $mqtt->prepare('orders', topic => 'orders/created');
my $config2 = $mqtt->prepare('exact', qos => 2);
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('orders', 'mqtt', '$config');
    SELECT outbox.create_destination('exact', 'mqtt', '$config2');
    CREATE TABLE sent (key text PRIMARY KEY, event_id uuid NOT NULL, n bigint NOT NULL);
    CREATE SEQUENCE n_seq;
});
is($node->safe_psql('postgres', q{SELECT kind FROM outbox.stats() WHERE destination = 'orders'}),
    'mqtt', 'stats() shows the destination with kind mqtt');

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
        '-h', $node->host, '-p', $node->port, 'postgres'], "8 producers commit $total messages");
$node->safe_psql('postgres', q{
    BEGIN;
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', 'rolled-back', '{}');
    ROLLBACK;
});

ok(wait_until(sub {
    my $s = stats_row($node, 'orders');
    $s->{pending} == 0 && $s->{in_flight} == 0 && $s->{delivered_total} == $total }, $full ? 900 : 180),
    "outbox.stats() shows all $total delivered (PUBACK) and none pending")
  or diag(explain(stats_row($node, 'orders')));
my $took = time - $start;
diag(sprintf('produced and delivered %d messages in %.1f s (%.0f msg/s)', $total, $took, $total / $took));
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages'), '0', 'the queue is empty');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');

my %sent = map { my ($k, $e, $n) = split /\|/; ($e => { key => $k, n => $n }) }
  split /\n/, $node->safe_psql('postgres', 'SELECT key, event_id, n FROM sent');
is(scalar(keys %sent), $total, "the producers recorded $total messages");

my $got = $mqtt->received('orders', idle => 1);
my (%seen, @wrong);
for my $m (@$got) {
    my $h = $m->{headers};
    my $e = $h->{id} // '';
    $seen{$e}++;
    my $s = $sent{$e};
    push @wrong, "unexpected event $e" and next unless $s;
    next if $seen{$e} > 1;
    my $payload = JSON::PP::decode_json($m->{body});
    push @wrong, "$e: payload $m->{body}" unless $payload->{n} == $s->{n};
    push @wrong, "$e: topic $m->{topic}" unless $m->{topic} eq 'orders/created';
    push @wrong, "$e: qos $m->{qos}" unless $m->{qos} == 1;
    push @wrong, "$e: correlation data" unless ($m->{correlation} // '') eq $e;
    push @wrong, "$e: content type" unless ($m->{content_type} // '') eq 'application/json';
    push @wrong, "$e: payload format" unless ($m->{payload_format} // 0) == 1;
    push @wrong, "$e: type" unless ($h->{type} // '') eq 'orders/created';
    push @wrong, "$e: specversion" unless ($h->{specversion} // '') eq '1.0';
    push @wrong, "$e: source" unless ($h->{source} // '') eq '/outbox/postgres';
    push @wrong, "$e: time" unless ($h->{time} // '') =~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
    push @wrong, "$e: x-n" unless ($h->{'x-n'} // '') eq $s->{n};
    push @wrong, "$e: x-client" unless ($h->{'x-client'} // '') eq $payload->{client};
    push @wrong, "$e: expiry" if defined $m->{expiry};
}
is(scalar(grep { $sent{$_} } keys %seen), $total, 'every event id arrived at the subscriber');
# A copy the broker sends again to the verifier after the verifier's own reconnect carries DUP;
# the relay sent a message twice only if a copy without DUP came twice.
my %fresh;
$fresh{ $_->{headers}{id} // '' }++ for grep { !$_->{dup} } @$got;
my $redelivered = grep { $_->{dup} } @$got;
diag("copies the broker sent the verifier again (DUP): $redelivered") if $redelivered;
is(scalar(grep { $fresh{$_} > 1 } keys %fresh), 0, 'none arrived twice (but redeliveries to the verifier)');
is(scalar(@wrong), 0, 'every message has the right topic, payload and properties')
  or diag(join("\n", @wrong[0 .. ($#wrong < 9 ? $#wrong : 9)]));

# Two workers: each connection has a client id of its own (the broker log names them).
my $log = slurp_file($mqtt->dir . '/mosquitto.log');
my %ids = map { $_ => 1 } $log =~ /New client connected from \S+ as (outbox-postgres-orders\S*) /g;
diag('client ids: ' . join(', ', sort keys %ids));
ok($ids{'outbox-postgres-orders'} || $ids{'outbox-postgres-orders-w2'}, 'the workers connected as outbox-postgres-orders[-w2]');
is(scalar(grep { !/^outbox-postgres-orders(-w2)?$/ } keys %ids), 0, 'and with no other id');
unlike($log, qr/already connected, closing old connection/, 'no client took over another one\'s id');

# The message's topic; payload bytes kept; its content type; an expiry interval from expires_at.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, payload_bytes, headers, expires_at)
    VALUES ('orders', 'orders/bin', '\x00ff10'::bytea, '{"content-type": "application/x-thing"}',
            now() + interval '1 hour')});
ok(wait_until(sub { stats_row($node, 'orders')->{delivered_total} == $total + 1 }, 30),
    'a binary message with its own topic delivered');
my ($bin) = grep { $_->{topic} eq 'orders/bin' } @{ $mqtt->received('orders') };
is($bin->{body_b64}, 'AP8Q', 'the payload bytes arrive unchanged');
is($bin->{content_type}, 'application/x-thing', "Content Type is the producer's content-type");
ok(!defined $bin->{headers}{'content-type'}, 'and not repeated as a user property');
ok(($bin->{payload_format} // 0) == 0, 'no UTF-8 payload format indicator for bytes');
is($bin->{headers}{type}, 'orders/bin', 'type is the topic');
ok($bin->{expiry} && $bin->{expiry} > 3500 && $bin->{expiry} <= 3600,
    'Message Expiry Interval from expires_at: ' . ($bin->{expiry} // 'none'));

# QoS 2: PUBCOMP acknowledges.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, payload) SELECT 'exact', jsonb_build_object('n', g)
      FROM generate_series(1, 200) g});
ok(wait_until(sub { stats_row($node, 'exact')->{delivered_total} == 200 }, 60),
    'QoS 2: 200 messages delivered (PUBCOMP)');
my $exact = $mqtt->received('exact');
is(scalar(@$exact), 200, 'the subscriber received the 200 QoS 2 messages');

$node->stop;
check_server_log($node);
$mqtt->stop;
done_testing();
