# Real Apache Kafka, delivery: 100,000 messages (the default run: 30,000) committed by 8
# concurrent producers to a destination with "ordering": "key" on a three-broker KRaft cluster
# (replication factor 3, min.insync.replicas 2, acks=all). Read back by Kafka's own Java
# consumer, not librdkafka: every message arrives exactly once (no fault, so no duplicate)
# with its key, payload and CloudEvents headers, each key on one partition, and for every key
# the messages in id order (commit order within a key).
# outbox-tap: kafka-cluster shared
use strict;
use warnings;
use OutboxKafka;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $n = sized(100_000, 30_000);
my $producers = 8;
my $keys = 500;

my $kafka = kafka_cluster();
$kafka->create_topic('orders', partitions => 8);
my $bootstrap = $kafka->bootstrap;
my $node = outbox_node('realkafka_delivery', conf => 'max_connections = 40');
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('orders', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "orders", "ordering": "key"}');
    CREATE TABLE sent (event_id uuid PRIMARY KEY, id bigint NOT NULL, key text NOT NULL, n bigint NOT NULL,
                       client int NOT NULL);
    CREATE SEQUENCE n_seq;
});

# Each producer records what it committed in the same transaction.
my $script = qq{
\\set c :client_id
WITH m AS (
    INSERT INTO outbox.messages (destination, key, payload, headers)
    SELECT 'orders', 'k' || (n % $keys), jsonb_build_object('n', n, 'client', :c),
           jsonb_build_object('x-client', :c::text, 'x-n', n::text)
      FROM (SELECT nextval('n_seq') AS n) s
    RETURNING event_id, id, key, (payload->>'n')::bigint, :c)
INSERT INTO sent SELECT * FROM m;
};
my $t0 = time;
my $pgbench = start_pgbench($node, clients => $producers, threads => 2,
    transactions => $n / $producers, script => $script);
ok($pgbench->finish, "$producers producers commit $n messages") or diag(${ $pgbench->{outbox_err} });
my $committed = time - $t0;

ok(wait_until(sub {
    my $s = stats_row($node, 'orders');
    $s->{pending} == 0 && $s->{in_flight} == 0 && $s->{delivered_total} == $n }, sized(600, 300)),
    "outbox.stats() shows all $n delivered, none pending")
  or diag(explain(stats_row($node, 'orders')));
my $elapsed = time - $t0;
diag(sprintf('%d messages committed in %.1f s, all delivered %.1f s after the first commit (%.0f msg/s)',
    $n, $committed, $elapsed, $n / $elapsed));
my $s = stats_row($node, 'orders');
is($s->{dead}, 0, 'nothing dead-lettered');
is($s->{failed_total}, 0, 'no attempt failed');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages'), '0', 'the queue is empty');

my %sent;
for (split /\n/, $node->safe_psql('postgres', 'SELECT event_id, key, n, client FROM sent')) {
    my ($e, $k, $v, $c) = split /\|/;
    $sent{$e} = { key => $k, n => $v, client => $c };
}
is(scalar(keys %sent), $n, "the producers recorded $n messages");

my $t1 = time;
my $got = $kafka->consume('orders', values => 1);
my $summary = $kafka->summary;
diag(sprintf('the Java consumer read %d messages in %.1f s: %s', scalar(@$got), time - $t1,
    join(' ', map { "$_=$summary->{$_}" } sort keys %$summary)));
my @wrong;
for my $m (@$got) {
    my $h = $m->{headers};
    my $e = $h->{ce_id} // '';
    my $x = $sent{$e};
    push @wrong, "offset $m->{partition}/$m->{offset}: unknown ce_id '$e'" and next unless $x;
    my $payload = JSON::PP::decode_json($m->{payload});
    push @wrong, "$e: key $m->{key} != $x->{key}" unless ($m->{key} // '') eq $x->{key};
    push @wrong, "$e: payload $m->{payload}" unless $payload->{n} == $x->{n} && $payload->{client} == $x->{client};
    push @wrong, "$e: ce_type" unless ($h->{ce_type} // '') eq 'orders';
    push @wrong, "$e: ce_specversion" unless ($h->{ce_specversion} // '') eq '1.0';
    push @wrong, "$e: ce_source" unless ($h->{ce_source} // '') eq '/outbox/postgres';
    push @wrong, "$e: ce_time" unless ($h->{ce_time} // '') =~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
    push @wrong, "$e: x-n" unless ($h->{'x-n'} // '') eq $x->{n};
    push @wrong, "$e: x-client" unless ($h->{'x-client'} // '') eq $x->{client};
    push @wrong, "$e: timestamp" unless $m->{ts} > 1.6e12;
}
is(scalar(@$got), $n, "the topic holds exactly $n messages");
is($summary->{distinct}, $n, 'with as many distinct ce_ids');
is($summary->{duplicates}, 0, 'none arrived twice');
is(scalar(@wrong), 0, 'every message has its key, payload, CloudEvents and producer headers')
  or diag(join("\n", @wrong[0 .. ($#wrong < 9 ? $#wrong : 9)]));
is($summary->{partitions}, 8, 'read from all 8 partitions');
is($summary->{keys}, $keys, "$keys keys");
is($summary->{keys_on_several_partitions}, 0, 'each key on one partition (the Java consumer\'s count)');
my $repeats = check_key_order($node, 'SELECT event_id, id, key FROM sent', $got, 'ordering = key');
is($repeats, 0, 'no repeats');
fault_summary('realkafka_ordered_8_producers', produced => [ keys %sent ],
    received => [ map { $_->{headers}{ce_id} } @$got ]);

$node->stop;
check_server_log($node);
$kafka->stop;
done_testing();
