# Redis Streams delivery end to end: messages from 8 concurrent producer sessions are added
# exactly once each to the stream (read back with XRANGE by redis-py, an independent client)
# with the fields a consumer relies on (payload, key, headers as one JSON field, ce_id = the
# event id, the CloudEvents attributes); the destination logs in as an ACL user (AUTH);
# rolled-back inserts never arrive; the message's topic overrides the destination's stream;
# binary payloads keep their bytes; "maxlen" trims the stream (MAXLEN ~); "wait" with more
# replicas than the server has counts nothing delivered (retry, then the dead letters).
# 4,000 messages by default, 100,000 with OUTBOX_TEST_FULL=1.
# outbox-tap: redis shared
use strict;
use warnings;
use JSON::PP;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $full = ($ENV{OUTBOX_TEST_FULL} // '') eq '1';
my $total = $full ? 100000 : 4000;
my $clients = 8;
my $redis = redis_node();
my $node = outbox_node('redis_delivery', conf => "log_statement = none\n");
my $server = $redis->url;
$redis->redis_client('exec', 'DEL', 'orders', 'orders.bin', 'orders.trim', 'orders.wait');

$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('orders', 'redis',
        '{"server": "$server", "stream": "orders", "user": "outbox", "password": "outbox-secret"}');
    CREATE TABLE sent (key text PRIMARY KEY, event_id uuid NOT NULL, n bigint NOT NULL);
    CREATE SEQUENCE n_seq;
});
is($node->safe_psql('postgres', q{SELECT kind FROM outbox.stats() WHERE destination = 'orders'}),
    'redis', 'stats() shows the destination with kind redis');

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
$node->command_ok(['pgbench', '-n', '-c', $clients, '-j', $clients, '-t', $total / $clients,
        '-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'],
    "$clients producers commit $total messages");
$node->safe_psql('postgres', q{
    BEGIN;
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('orders', 'rolled-back', '{}');
    ROLLBACK;
});

ok(wait_until(sub {
    my $s = stats_row($node, 'orders');
    $s->{pending} == 0 && $s->{in_flight} == 0 && $s->{delivered_total} == $total }, $full ? 900 : 180),
    "outbox.stats() shows all $total delivered (XADD's reply) and none pending")
  or diag(explain(stats_row($node, 'orders')));
my $took = time - $start;
diag(sprintf('produced and delivered %d messages in %.1f s (%.0f/s)', $total, $took, $total / $took));
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages'), '0', 'the queue is empty');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing dead-lettered');
is($redis->count('orders'), $total, "XLEN: the stream holds exactly $total entries");

my %sent = map { my ($k, $e, $n) = split /\|/; ($e => { key => $k, n => $n }) }
  split /\n/, $node->safe_psql('postgres', 'SELECT key, event_id, n FROM sent');
is(scalar(keys %sent), $total, "the producers recorded $total messages");

my $got = $redis->received('orders');
my (%seen, @wrong);
for my $m (@$got) {
    my $f = $m->{fields};
    my $e = $f->{ce_id} // '';
    $seen{$e}++;
    my $s = $sent{$e};
    push @wrong, "unexpected event $e" and next unless $s;
    my $payload = decode_json($f->{payload});
    push @wrong, "$e: payload $f->{payload}" unless $payload->{n} == $s->{n};
    push @wrong, "$e: key" unless ($f->{key} // '') eq $s->{key};
    my $h = decode_json($f->{headers} // '{}');
    push @wrong, "$e: headers $f->{headers}"
      unless ($h->{'x-n'} // '') eq $s->{n} && ($h->{'x-client'} // '') eq $payload->{client};
    push @wrong, "$e: ce_type" unless ($f->{ce_type} // '') eq 'orders';
    push @wrong, "$e: ce_specversion" unless ($f->{ce_specversion} // '') eq '1.0';
    push @wrong, "$e: ce_source" unless ($f->{ce_source} // '') eq '/outbox/postgres';
    push @wrong, "$e: ce_datacontenttype" unless ($f->{ce_datacontenttype} // '') eq 'application/json';
    push @wrong, "$e: ce_time" unless ($f->{ce_time} // '') =~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
}
is(scalar(@$got), $total, "redis-py reads exactly $total entries from stream orders");
is(scalar(grep { $sent{$_} } keys %seen), $total, 'every event id arrived');
is(scalar(grep { $seen{$_} > 1 } keys %seen), 0, 'none arrived twice');
is(scalar(@wrong), 0, 'every entry has the right payload, key, headers and CloudEvents fields')
  or diag(join("\n", @wrong[0 .. ($#wrong < 9 ? $#wrong : 9)]));
my $fields = join(',', sort keys %{ $got->[0]{fields} });
is($fields, 'ce_datacontenttype,ce_id,ce_source,ce_specversion,ce_time,ce_type,headers,key,payload',
    'an entry has exactly the documented fields');

# The message's topic is the stream; a binary payload keeps its bytes.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, payload_bytes, headers)
    VALUES ('orders', 'orders.bin', '\x00ff10'::bytea, '{"content-type": "application/x-thing"}')});
ok(wait_until(sub { stats_row($node, 'orders')->{delivered_total} == $total + 1 }, 30),
    'a binary message with its own stream delivered');
my ($bin) = @{ $redis->received('orders.bin') };
is($bin->{payload_b64}, 'AP8Q', 'the payload bytes arrive unchanged');
is($bin->{fields}{ce_datacontenttype}, 'application/x-thing', "ce_datacontenttype is the producer's content-type");
is($bin->{fields}{ce_type}, 'orders.bin', 'ce_type is the stream');
ok(!exists $bin->{fields}{key}, 'no key field for a message without a key');

# "maxlen": XADD MAXLEN ~ N keeps the stream near N entries.
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('trim', 'redis',
        '{"server": "$server", "stream": "orders.trim", "maxlen": 10}');
    INSERT INTO outbox.messages (destination, payload) SELECT 'trim', jsonb_build_object('n', g)
      FROM generate_series(1, 500) g});
ok(wait_until(sub { stats_row($node, 'trim')->{delivered_total} == 500 }, 60), 'maxlen: 500 delivered');
cmp_ok($redis->count('orders.trim'), '<', 500, 'maxlen: the stream was trimmed (MAXLEN ~ 10): '
    . $redis->count('orders.trim') . ' left');

# "wait": the server has no replica, so WAIT 1 answers 0 and nothing counts as delivered.
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('waiting', 'redis',
        '{"server": "$server", "stream": "orders.wait", "wait": {"replicas": 1, "timeout": 100},
          "max_attempts": 2, "retry_base": "100ms"}');
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('waiting', 'w', '{}')});
ok(wait_until(sub { dead_letter($node, 'w') ne '' }, 60), 'wait: dead-lettered after its attempts');
like(dead_letter($node, 'w'),
    qr/^max_attempts\|2\|only 0 of 1 replicas acknowledged within 100 ms \(WAIT\)/,
    'wait: each attempt retried with the WAIT count, then max_attempts');

$node->stop;
check_server_log($node);
$redis->stop;
done_testing();
