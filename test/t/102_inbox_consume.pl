# The inbox end to end, outbox -> Kafka -> inbox on two databases of one cluster: messages
# produced in database postgres (with deliberate duplicate event ids) are consumed in database
# shop by its inbox worker (a process apart from the two delivery workers), through a handler
# owned by an ordinary role, while the inbox worker is killed with -9 twice and the server is
# stopped in immediate mode once.
# The handler's table then holds each event exactly once, the stored offsets equal the
# broker's end offsets (read by kcat, an independent client), and outbox.subscriptions()
# counts the duplicates.
use strict;
use warnings;
use OutboxTest;
use OutboxKafka qw(sized);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $events = sized(100_000, 20_000);
my $dups = $events / 20;
my $partitions = 4;

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
$broker->ctl("create events $partitions");
my $node = outbox_node('inbox',
    conf => "restart_after_crash = on\noutbox.databases = 'postgres, shop'\noutbox.workers = 2\n");
$node->safe_psql('postgres', 'CREATE DATABASE shop');
$node->safe_psql('shop', q{
    CREATE EXTENSION outbox;
    CREATE ROLE shop_app LOGIN;
    GRANT USAGE ON SCHEMA outbox TO shop_app;
    GRANT EXECUTE ON FUNCTION outbox.create_subscription(text, text, jsonb, regprocedure),
        outbox.subscriptions() TO shop_app;
    CREATE SCHEMA shop AUTHORIZATION shop_app;
});
$node->safe_psql('shop', q{
    SET ROLE shop_app;
    -- No unique constraint: an event applied twice would show as two rows.
    CREATE TABLE shop.applied (event_id uuid, n int, key text, topic text, "partition" int,
        "offset" bigint, applied_by name, search_path text, ce_type text);
    CREATE FUNCTION shop.apply(m outbox.inbox_message) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO shop.applied VALUES (m.event_id, (m.payload->>'n')::int, m.key, m.topic,
            m.partition, m."offset", current_user, current_setting('search_path'),
            m.headers->>'ce_type');
    END $$;
});
$node->safe_psql('shop', qq{
    SET ROLE shop_app;
    SELECT outbox.create_subscription('orders_in', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topics": ["events"], "batch_size": 500}',
        'shop.apply(outbox.inbox_message)')});
is($node->safe_psql('shop', q{SELECT owner::text FROM outbox.inbox_subscriptions}), 'shop_app',
    'the subscription belongs to the role that created it');

$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('events', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "events", "ordering": "key"}')});

# The producer: $events distinct events in transactions of 1,000, then $dups of them again
# under the same event ids (what a relay's at-least-once redelivery looks like to a consumer).
my $produce = sub {
    my ($from, $to) = @_;
    $node->safe_psql('postgres', qq{
        INSERT INTO outbox.messages (event_id, destination, key, payload)
        SELECT md5('event-' || g)::uuid, 'events', 'k' || (g % 997), jsonb_build_object('n', g)
          FROM generate_series($from, $to) g});
};
my $t0 = time;
my $sent = 0;
my $killed = 0;
my $stopped = 0;
while ($sent < $events) {
    my $to = $sent + 1000 > $events ? $events : $sent + 1000;
    $produce->($sent + 1, $to);
    $sent = $to;
    if ($sent == int($events / 4) || $sent == int($events / 2)) {
        # kill -9 of the inbox worker of shop while it consumes: a backend crash, so the
        # postmaster restarts every process (restart_after_crash), the workers included
        my $pid = '';
        wait_until(sub {
            $pid = $node->safe_psql('shop', q{SELECT pid FROM pg_stat_activity
                WHERE backend_type = 'outbox inbox worker' AND datname = 'shop'});
            $pid ne '' }, 60) or die 'no inbox worker for shop';
        kill 'KILL', $pid;
        $killed++;
        # Connections are refused while the server recovers from the crash (on PostgreSQL 18
        # poll_query_until dies of that): ask again until the restarted workers are all there.
        wait_until(sub {
            (eval { $node->safe_psql('postgres', qq{
                SELECT count(*) FILTER (WHERE backend_type = 'outbox worker') >= 4
                       AND count(*) FILTER (WHERE backend_type = 'outbox inbox worker') = 1
                       AND bool_and(pid <> $pid) FROM pg_stat_activity
                 WHERE backend_type IN ('outbox worker', 'outbox inbox worker')}) } // '') eq 't'
        }, 60) or die 'workers did not come back';
    }
    if ($sent == int(3 * $events / 4)) {
        $node->stop('immediate');
        $node->start;
        $stopped++;
    }
}
$produce->(1, $dups);
ok($killed == 2 && $stopped == 1, 'the inbox worker was killed with -9 twice and the server stopped in immediate mode once');

# Everything produced reached the broker; then the inbox catches up with it.
# (ordering "key" keeps one message of a key in flight: 997 keys, so that the full size drains
# in minutes)
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, sized(900, 300)),
    'the outbox delivered everything');
my $end = $broker->end_offset_sum('events', $partitions);
cmp_ok($end, '>=', $events + $dups, "the broker holds at least the $events + $dups records produced");
ok(wait_until(sub {
    $node->safe_psql('shop', q{SELECT coalesce(sum("offset"), 0) FROM outbox.inbox_offsets}) == $end }, 300),
    'the stored offsets reach the end of every partition');
diag(sprintf('%d events + %d duplicates produced and consumed in %.1f s (%d records in the topic)',
    $events, $dups, time - $t0, $end));

my %ends;
for my $p (0 .. $partitions - 1) {
    my $out = `kcat -Q -b $bootstrap -t events:$p:-1 2>/dev/null`;
    $ends{$p} = $1 if $out =~ /\[\d+\]\s+offset\s+(-?\d+)/;
}
is($node->safe_psql('shop', q{SELECT string_agg("partition" || '=' || "offset", ',' ORDER BY "partition") FROM outbox.inbox_offsets}),
    join(',', map { "$_=$ends{$_}" } sort keys %ends),
    'each partition\'s stored offset equals its end offset as kcat reads it');

is($node->safe_psql('shop', q{SELECT count(*) FROM shop.applied}), $events,
    "the handler's table holds $events rows");
is($node->safe_psql('shop', q{SELECT count(DISTINCT event_id) FROM shop.applied}), $events,
    'each event exactly once');
is($node->safe_psql('shop', q{SELECT count(*) FROM shop.applied a WHERE a.event_id <> md5('event-' || a.n)::uuid}),
    '0', 'with the payload it was produced with');
my ($consumed, $duplicates, $lag) = split /\|/, $node->safe_psql('shop', q{
    SELECT sum(consumed), sum(duplicates), sum(lag) FROM outbox.subscriptions()});
is($consumed, $events, 'outbox.subscriptions() counts the events consumed');
is($duplicates, $end - $events, 'and every other record as a duplicate skipped');
cmp_ok($duplicates, '>=', $dups, "the $dups deliberate duplicates among them");
is($lag, '0', 'no lag');
diag("duplicates skipped: $duplicates ($dups deliberate, the rest the relay's redeliveries after the kills)");
is($node->safe_psql('shop', q{SELECT count(*) FROM outbox.inbox WHERE subscription = 'orders_in'}), $events,
    'one dedup row per event');
is($node->safe_psql('shop', q{SELECT DISTINCT applied_by || ' ' || search_path FROM shop.applied}),
    'shop_app pg_catalog, pg_temp', "the handler ran as the subscription's owner with a fixed search_path");
is($node->safe_psql('shop', q{SELECT count(*) FROM shop.applied WHERE ce_type IS NULL OR topic <> 'events'}),
    '0', 'the headers (ce_type) and the topic arrive with each record');

# Per key, records arrive in the order they were produced (ordering "key" on the producing
# side, one key one partition, and the consumer applies a partition in offset order).
is($node->safe_psql('shop', q{
    SELECT count(*) FROM (SELECT n, lag(n) OVER (PARTITION BY key ORDER BY "partition", "offset") AS prev
                            FROM shop.applied) s WHERE n < prev}), '0',
    'within a key, the handler saw the events in the order produced');

# One inbox worker per database with subscriptions, none where there are none; it is not a
# delivery worker (outbox.workers() lists those: two per database).
is($node->safe_psql('postgres', q{
    SELECT string_agg(datname || ':' || n, ',' ORDER BY datname) FROM (
        SELECT datname, count(*) AS n FROM pg_stat_activity
         WHERE backend_type = 'outbox inbox worker' GROUP BY datname) s}),
    'shop:1', 'shop has one inbox worker, postgres (no subscription) none');
is($node->safe_psql('shop', q{SELECT count(*) FROM outbox.workers() WHERE database = 'shop'}), '2',
    'outbox.workers() shows the two delivery workers of shop');

# pause: nothing more is applied; resume: it goes on.
# The inbox worker shows no count of its turns to wait on: a second for the pause to reach it,
# two in which nothing may be applied.
$node->safe_psql('shop', q{SELECT outbox.pause('orders_in')});
sleep 1;
$produce->($events + 1, $events + 100);
sleep 2;
is($node->safe_psql('shop', q{SELECT count(*) FROM shop.applied}), $events, 'a paused subscription applies nothing');
$node->safe_psql('shop', q{SELECT outbox.resume('orders_in')});
ok(wait_until(sub { $node->safe_psql('shop', q{SELECT count(*) FROM shop.applied}) == $events + 100 }, 60),
    'after resume, the 100 new events are applied');

check_server_log($node, killed => 2);
done_testing();
