# Compaction by key ("compaction": "key"), checked against the webhook sink's own record:
# 1. a paused destination, 20 keys x 5 versions queued, resumed: only the newest of each key
#    arrives, superseded_total = 80, the conservation check balances (with ordering too);
# 2. a message in flight (a slow endpoint holds it) is never superseded: it is delivered, and
#    the newest version queued meanwhile is delivered after it (with "ordering": "key", after
#    its answer);
# 3. 8 concurrent producers on the same 10 keys: with "ordering": "key" at most one queued
#    message per key after every commit (producers of a key take turns); without it, the
#    key's next message supersedes every older one (eventually one);
# 4. ordering = key while messages flow: each key's arrivals are in increasing version order.
use strict;
use warnings;
use JSON::PP;
use MIME::Base64;
use OutboxTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $sink = webhook_sink();
my $node = outbox_node('compaction');
sub sql { return $node->safe_psql('postgres', $_[0]); }

# The sink's 2xx requests on a path, as [key, version, t, t_end] in arrival order.
sub arrivals {
    my ($path) = @_;
    return [ map {
            my $p = JSON::PP::decode_json(MIME::Base64::decode_base64($_->{body_b64}));
            [ $p->{k}, $p->{v}, $_->{t}, $_->{t_end} ]
        } grep { $_->{path} eq $path && $_->{status} >= 200 && $_->{status} < 300 }
        @{ $sink->requests } ];
}

#-------------------------------------------------------------------------------------------
# 1. Paused, N keys x M versions, resumed.
#-------------------------------------------------------------------------------------------
my ($n, $m) = (20, 5);
for my $d ('state', 'state_ordered') {
    my $url = $sink->url("/$d");
    my $ordering = $d eq 'state' ? '' : ', "ordering": "key"';
    sql(qq{SELECT outbox.create_destination('$d', 'webhook', '{"url": "$url", "compaction": "key"$ordering}');
           SELECT outbox.pause('$d')});
}
sql('SELECT count(*) FROM outbox.stats()');  # the counts start here, before any message
for my $v (1 .. $m) {
    sql(qq{SELECT outbox.publish(ARRAY['state', 'state_ordered'], 'state',
               jsonb_build_object('k', 'k' || g, 'v', $v), 'k' || g)
             FROM generate_series(1, $n) g});
}
is(sql(q{SELECT string_agg(destination || '=' || n, ',' ORDER BY destination) FROM (
           SELECT destination, count(*) AS n FROM outbox.messages GROUP BY destination) s}),
    "state=$n,state_ordered=$n", "while paused, one queued message per key ($n keys)");
for my $d ('state', 'state_ordered') {
    sql(qq{SELECT outbox.resume('$d')});
}
ok(wait_until(sub { sql('SELECT count(*) FROM outbox.messages') eq '0' }, 60),
    'the queue drains once resumed');
for my $d ('state', 'state_ordered') {
    my $got = arrivals("/$d");
    is(scalar(@$got), $n, "$d: the endpoint received $n requests, one per key");
    my %keys = map { $_->[0] => 1 } @$got;
    is(scalar(keys %keys), $n, "$d: every key arrived once");
    is(scalar(grep { $_->[1] != $m } @$got), 0, "$d: each is the newest version ($m)");
    my $s = stats_row($node, $d);
    is("$s->{superseded_total} $s->{delivered_total} $s->{pending}", $n * ($m - 1) . " $n 0",
        "$d: superseded_total = N x (M-1) = " . $n * ($m - 1) . ", $n delivered");
    is(sql(qq{SELECT produced || ' ' || delivered || ' ' || superseded || ' ' || balance
                FROM outbox.conservation() WHERE destination = '$d'}),
        $n * $m . " $n " . $n * ($m - 1) . ' 0', "$d: conservation balances");
}

#-------------------------------------------------------------------------------------------
# 2. In flight: a slow endpoint holds version 1 while versions 2 and 3 are queued.
#-------------------------------------------------------------------------------------------
for my $d ('slow', 'slow_ordered') {
    my $url = $sink->url("/$d;delay_ms=3000;delay_first=1");
    my $ordering = $d eq 'slow' ? '' : ', "ordering": "key"';
    sql(qq{SELECT outbox.create_destination('$d', 'webhook', '{"url": "$url", "compaction": "key"$ordering}')});
    sql(qq{INSERT INTO outbox.messages (destination, key, payload) VALUES ('$d', 'x', '{"k": "x", "v": 1}')});
}
# In flight: leased, or locked by the worker's claim (a plain locking read skips both).
ok(wait_until(sub {
            sql(q{SELECT count(*) || ' ' || (SELECT count(*) FROM (
                      SELECT 1 FROM outbox.messages WHERE destination LIKE 'slow%' AND lease_token IS NULL
                         FOR UPDATE SKIP LOCKED) s)
                    FROM outbox.messages WHERE destination LIKE 'slow%'}) eq '2 0'
        }, 30, 'both version 1 messages in flight'),
    'version 1 of each destination is in flight');
# Versions 2 and 3 in one transaction (else, without ordering, a worker could claim 2 before 3
# is queued: 2 would then be in flight too): 3 supersedes 2, and neither touches 1.
sql(q{BEGIN;
      SELECT outbox.publish(ARRAY['slow', 'slow_ordered'], 'x', '{"k": "x", "v": 2}', 'x');
      SELECT outbox.publish(ARRAY['slow', 'slow_ordered'], 'x', '{"k": "x", "v": 3}', 'x');
      COMMIT});
is(sql(q{SELECT count(*) FROM outbox.messages WHERE destination LIKE 'slow%' AND payload->>'v' = '1'}), '2',
    'the messages in flight (1) are still there after the commit that queued 2 and 3');
ok(wait_until(sub { sql(q{SELECT count(*) FROM outbox.messages WHERE destination LIKE 'slow%'}) eq '0' }, 60),
    'everything for the slow endpoint completes');
for my $d ('slow', 'slow_ordered') {
    my $got = arrivals("/$d;delay_ms=3000;delay_first=1");
    is(join(',', map { $_->[1] } sort { $a->[2] <=> $b->[2] } @$got), '1,3',
        "$d: the message in flight (1) was delivered, then the newest (3); 2 was superseded");
    is(stats_row($node, $d)->{superseded_total}, 1, "$d: superseded_total 1");
}
my $ordered = arrivals("/slow_ordered;delay_ms=3000;delay_first=1");
if (@$ordered == 2) {
    my ($first, $second) = sort { $a->[1] <=> $b->[1] } @$ordered;
    cmp_ok($second->[2], '>=', $first->[3] - 0.05,
        'ordering = key: the newest was sent only after the head in flight was answered');
} else {
    fail('ordering = key: two arrivals');
}

#-------------------------------------------------------------------------------------------
# 3. 8 concurrent producers, each publishing 60 versions over the same 10 keys, paused.
#-------------------------------------------------------------------------------------------
for my $d ('conc', 'conc_ordered') {
    my $url = $sink->url("/$d");
    my $ordering = $d eq 'conc' ? '' : ', "ordering": "key"';
    sql(qq{SELECT outbox.create_destination('$d', 'webhook', '{"url": "$url", "compaction": "key"$ordering}');
           SELECT outbox.pause('$d')});
}
sql('CREATE SEQUENCE n_seq');
# After each commit of conc_ordered's key, that key has at most one queued message: recorded by
# a watcher in its own session while the producers run.
my $h = start_pgbench($node, clients => 8, threads => 2, transactions => 60, script => q{
\set k random(0, 9)
SELECT outbox.publish(ARRAY['conc', 'conc_ordered'], 'c',
                      jsonb_build_object('k', 'c' || :k, 'v', nextval('n_seq')), 'c' || :k);
});
my $worst = 0;
while ($h->pumpable) {
    my $most = sql(q{SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM outbox.messages
                      WHERE destination = 'conc_ordered' GROUP BY key) s});
    $worst = $most if $most > $worst;
    $h->pump_nb;
    sleep 0.05;   # the sampling's pace
}
$h->finish;
is(${ $h->{outbox_err} } =~ /(error|deadlock)/i ? $1 : '', '', 'the producers ran without an error or a deadlock')
  or diag(${ $h->{outbox_err} });
like(${ $h->{outbox_out} }, qr/number of transactions actually processed: 480/, 'all 480 publishes committed');
cmp_ok($worst, '<=', 1, 'ordering = key: never more than one queued message of a key (watched while producing)');
is(sql(q{SELECT count(*) || ' ' || count(DISTINCT key) FROM outbox.messages WHERE destination = 'conc_ordered'}),
    sql(q{SELECT count(DISTINCT key) || ' ' || count(DISTINCT key) FROM outbox.messages WHERE destination = 'conc_ordered'}),
    'ordering = key: exactly one queued message per key after the producers committed');
is(sql(q{SELECT count(*) FROM (SELECT key, max(id) AS last FROM outbox.messages WHERE destination = 'conc_ordered'
                                GROUP BY key) s}),
    sql(q{SELECT count(DISTINCT key) FROM outbox.messages WHERE destination = 'conc_ordered'}),
    'and it is the key\'s last');
my $conc_left = sql(q{SELECT count(*) FROM outbox.messages WHERE destination = 'conc'});
cmp_ok($conc_left, '>=', sql(q{SELECT count(DISTINCT key) FROM outbox.messages WHERE destination = 'conc'}),
    "without ordering: $conc_left queued for the keys (concurrent producers of a key may both stay)");
# The key's next message supersedes every older one: one per key, the newest.
sql(q{SELECT outbox.publish(ARRAY['conc', 'conc_ordered'], 'c',
          jsonb_build_object('k', 'c' || g, 'v', 1000 + g), 'c' || g) FROM generate_series(0, 9) g});
is(sql(q{SELECT string_agg(destination || ':' || n || '/' || newest, ',' ORDER BY destination) FROM (
           SELECT destination, count(*) AS n, bool_and((payload->>'v')::int >= 1000) AS newest
             FROM outbox.messages WHERE destination LIKE 'conc%' GROUP BY destination) s}),
    'conc:10/true,conc_ordered:10/true', 'after one more message per key: exactly the 10 newest queued, both destinations');
for my $d ('conc', 'conc_ordered') {
    sql(qq{SELECT outbox.resume('$d')});
}
ok(wait_until(sub { sql(q{SELECT count(*) FROM outbox.messages WHERE destination LIKE 'conc%'}) eq '0' }, 60),
    'the concurrent destinations drain');
for my $d ('conc', 'conc_ordered') {
    my $got = arrivals("/$d");
    is(join(',', sort map { "$_->[0]=$_->[1]" } @$got), join(',', sort map { "c$_=" . (1000 + $_) } 0 .. 9),
        "$d: only the newest of each key arrived");
    is(sql(qq{SELECT produced || ' ' || delivered + superseded || ' ' || balance FROM outbox.conservation()
                WHERE destination = '$d'}), '490 490 0', "$d: 490 produced = delivered + superseded, balanced");
}

#-------------------------------------------------------------------------------------------
# 4. ordering = key while messages flow: 5 keys x 40 versions, delivered as they come.
#-------------------------------------------------------------------------------------------
my $flow_path = '/flow;delay_ms=20';
my $flow_url = $sink->url($flow_path);
sql(qq{SELECT outbox.create_destination('flow', 'webhook', '{"url": "$flow_url", "compaction": "key", "ordering": "key"}')});
for my $v (1 .. 40) {
    sql(qq{INSERT INTO outbox.messages (destination, key, payload)
           SELECT 'flow', 'f' || g, jsonb_build_object('k', 'f' || g, 'v', $v) FROM generate_series(1, 5) g});
    sleep 0.02;   # the producer's pace: versions spread over the worker's turns
}
ok(wait_until(sub { sql(q{SELECT count(*) FROM outbox.messages WHERE destination = 'flow'}) eq '0' }, 60),
    'the flowing destination drains');
my %last;
my $out_of_order = 0;
for my $a (sort { $a->[2] <=> $b->[2] } @{ arrivals($flow_path) }) {
    $out_of_order++ if defined $last{ $a->[0] } && $a->[1] <= $last{ $a->[0] };
    $last{ $a->[0] } = $a->[1];
}
is($out_of_order, 0, 'ordering = key: each key\'s arrivals are in increasing version order');
is(join(',', map { $last{"f$_"} // 'none' } 1 .. 5), '40,40,40,40,40', 'and each key\'s last arrival is its newest');
my $s = stats_row($node, 'flow');
is($s->{delivered_total} + $s->{superseded_total}, 200, 'delivered + superseded = the 200 produced');
is(sql(q{SELECT balance FROM outbox.conservation() WHERE destination = 'flow'}), '0', 'conservation balances');

check_server_log($node);
done_testing();
