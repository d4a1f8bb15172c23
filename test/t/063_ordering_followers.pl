# Per-key ordering takes a key's next message where the claim that found its head saw it (the
# same row version, while the key's floor_version is unchanged), without looking for it again.
# Here the queue keeps changing under the worker: every 0.1 s, one transaction turns ordering
# off, requeues every dead letter (they come back with their old, lower ids) and turns ordering
# on again. The destination's config reads the same before and after, every queued message gets
# a new row version, and the keys' rows are made again (floor_version starts over). 5% of
# produce requests are rejected for good, so there are dead letters to requeue. For every key,
# first arrivals follow id order, and nothing is lost. Then a dead letter requeued under
# on_dead = skip goes in front of the next messages of its key that the worker already knew,
# and a prepared requeue holds its key, and only its key, until COMMIT PREPARED. Last, the
# messages after a head are found only by an index laid out as created.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $node = outbox_node('followers', conf => join("\n",
    "outbox.retry_base = '20ms'", "outbox.retry_max = '200ms'", "outbox.max_attempts = 1000",
    "max_prepared_transactions = 2"));
my $bootstrap = $broker->bootstrap;
my $config = qq{{"bootstrap.servers": "$bootstrap", "topic": "fo", "ordering": "key"}};
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('fo', 'kafka', '$config');
    SELECT outbox.pause('fo');
    CREATE TABLE sent (event_id uuid PRIMARY KEY, id bigint NOT NULL, key text NOT NULL);
    WITH m AS (
        INSERT INTO outbox.messages (destination, key, payload)
        SELECT 'fo', 'k' || (g % 20), jsonb_build_object('n', g) FROM generate_series(1, 4000) g
        RETURNING event_id, id, key)
    INSERT INTO sent SELECT * FROM m;
});
my $before = $node->safe_psql('postgres', "SELECT config::text FROM outbox.destinations WHERE name = 'fo'");
# Each produce request takes 5 ms, so the drain takes seconds: 20 keys, one message each in flight.
$broker->ctl('rtt all 5');
$broker->ctl('error_rate produce 5 100000 INVALID_RECORD 7');
$node->safe_psql('postgres', "SELECT outbox.resume('fo')");

# The turn updates every queued message, so it can deadlock with the worker's write-back (which
# PostgreSQL resolves by aborting one of them): such a turn is counted, not an error.
my ($turns, $requeued, $deadlocks) = (0, 0, 0);
my $deadline = time + 240;
my $drained = 0;
while (time < $deadline) {
    my ($rc, $out, $err) = $node->psql('postgres', q{
        BEGIN;
        SELECT outbox.alter_destination('fo', '{"ordering": "none"}') \g /dev/null
        SELECT outbox.requeue(coalesce(array_agg(id), '{}')) FROM outbox.dead_letters;
        SELECT outbox.alter_destination('fo', '{"ordering": "key"}') \g /dev/null
        COMMIT;});
    if ($err =~ /deadlock detected/) {
        $deadlocks++;
    } else {
        is($err, '', 'a turn fails with nothing but a deadlock') if $err ne '';
        $requeued += $out;
        $turns++;
    }
    $drained = $node->safe_psql('postgres', q{
        SELECT NOT EXISTS (SELECT FROM outbox.messages)
           AND NOT EXISTS (SELECT FROM outbox.dead_letters)}) eq 't';
    last if $drained;
    sleep 0.1;   # the loop's pace
}
$broker->ctl('clear produce');
$broker->ctl('rtt all 0');
ok($drained, 'everything delivered, no dead letter left');
is($node->safe_psql('postgres', "SELECT config::text FROM outbox.destinations WHERE name = 'fo'"),
    $before, 'the config reads the same as before the turns');
cmp_ok($turns, '>=', 10, "ordering went off and on again meanwhile: $turns times");
cmp_ok($requeued, '>=', 10, "dead letters went back below their keys' next messages: $requeued");

my $repeats = check_key_order($node, 'SELECT event_id, id, key FROM sent',
    $broker->consume('fo', timeout => 120), '4,000 messages');
diag("$turns turns ($deadlocks more ended in a deadlock), $requeued dead letters requeued, "
    . "$repeats repeats");

#-------------------------------------------------------------------------------------------
# A dead letter requeued while the worker knows the next messages of its key goes in front of
# them: with on_dead = skip the key went on without it; one key, each produce taking 5 ms, and
# the requeue comes a quarter of the way through. None of the messages waiting then (all but the
# one in flight) may arrive before it.
#-------------------------------------------------------------------------------------------
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('sk', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "sk", "ordering": "key", "on_dead": "skip"}');
    SELECT outbox.pause('sk');
    CREATE TABLE sk_sent (event_id uuid PRIMARY KEY, id bigint NOT NULL);
    WITH m AS (INSERT INTO outbox.messages (destination, key, payload) VALUES ('sk', 'a', '{"n": 0}')
               RETURNING event_id, id)
    INSERT INTO sk_sent SELECT * FROM m;
});
$broker->ctl('error_rate produce 100 1000 INVALID_RECORD 3');
$node->safe_psql('postgres', "SELECT outbox.resume('sk')");
ok(wait_until(sub { $node->safe_psql('postgres',
        q{SELECT count(*) FROM outbox.dead_letters WHERE destination = 'sk'}) eq '1' }, 30),
    'sk: the first message of key a is a dead letter');
$broker->ctl('clear produce');
$broker->ctl('rtt all 5');
$node->safe_psql('postgres', q{
    WITH m AS (INSERT INTO outbox.messages (destination, key, payload)
               SELECT 'sk', 'a', jsonb_build_object('n', g) FROM generate_series(1, 400) g
               RETURNING event_id, id)
    INSERT INTO sk_sent SELECT * FROM m});
ok(wait_until(sub { $node->safe_psql('postgres',
        q{SELECT count(*) FROM outbox.messages WHERE destination = 'sk'}) < 300 }, 30),
    'sk: the worker is a quarter of the way through key a');
# The messages waiting at the requeue, read right after outbox.requeue in its transaction: the
# requeue took the key's row FOR UPDATE, which waited for the worker's transactions that held
# the key, so what is queued and not leased then waits. (Read without locking them: a row lock
# of this transaction would keep the worker off them by itself.) The requeue holds the key half
# a second more: the worker must take nothing of it meanwhile, and none of them goes first.
my $dead_id = $node->safe_psql('postgres',
    q{SELECT id FROM outbox.dead_letters WHERE destination = 'sk'});
my $queued = $node->safe_psql('postgres', qq{
    BEGIN;
    SELECT outbox.requeue('sk') \\g /dev/null
    SELECT string_agg(m.id::text, ',') FROM outbox.messages AS m
     WHERE m.destination = 'sk' AND m.lease_token IS NULL AND m.id <> $dead_id;
    SELECT pg_sleep(0.5) \\g /dev/null
    COMMIT;});
my %queued = map { $_ => 1 } split /,/, $queued;
cmp_ok(scalar(keys %queued), '>', 50, 'sk: messages waiting at the requeue');
ok(wait_until(sub { $node->safe_psql('postgres',
        q{SELECT count(*) FROM outbox.messages WHERE destination = 'sk'}) eq '0' }, 60),
    'sk: everything delivered');
$broker->ctl('rtt all 0');
my %id_of = map { split /\|/ } split /\n/, $node->safe_psql('postgres', 'SELECT event_id, id FROM sk_sent');
my ($early, $seen_dead) = (0, 0);
for my $m (sort { $a->{offset} <=> $b->{offset} } @{ $broker->consume('sk', timeout => 60) }) {
    my $id = $id_of{ $m->{headers}{ce_id} } // next;
    if ($id == $dead_id) { $seen_dead = 1; last }
    $early++ if $queued{$id};
}
ok($seen_dead, "sk: the requeued dead letter arrived");
is($early, 0, 'sk: none of the messages waiting at the requeue arrived before it');
diag(sprintf('sk: %d messages waiting at the requeue, %d of them arrived before the requeued one',
    scalar(keys %queued), $early));

#-------------------------------------------------------------------------------------------
# A prepared requeue keeps its key until COMMIT PREPARED: the worker leaves that key alone (it
# never waits for the prepared transaction: the other key goes on meanwhile), and then the
# requeued message goes first.
#-------------------------------------------------------------------------------------------
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('pr', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "pr", "ordering": "key", "on_dead": "skip"}');
    SELECT outbox.pause('pr');
    CREATE TABLE pr_sent (event_id uuid PRIMARY KEY, id bigint NOT NULL, key text NOT NULL);
    INSERT INTO outbox.dead_letters (id, event_id, destination, topic, key, payload, created_at,
                                     attempts, reason, last_error)
    VALUES (-100, gen_random_uuid(), 'pr', 'pr', 'p', '{"n": -100}', now(), 1, 'rejected', 'test');
    INSERT INTO pr_sent SELECT event_id, id, key FROM outbox.dead_letters WHERE id = -100;
    WITH m AS (INSERT INTO outbox.messages (destination, key, payload)
               SELECT 'pr', k, jsonb_build_object('n', g)
                 FROM generate_series(1, 300) g, (VALUES ('p'), ('q')) AS v(k)
               RETURNING event_id, id, key)
    INSERT INTO pr_sent SELECT * FROM m;
});
$broker->ctl('rtt all 5');
$node->safe_psql('postgres', "SELECT outbox.resume('pr')");
my $left = sub { $node->safe_psql('postgres',
    "SELECT count(*) FROM outbox.messages WHERE destination = 'pr' AND key = '$_[0]'") };
ok(wait_until(sub { $left->('p') < 250 }, 30), 'pr: the worker is delivering key p');
$node->safe_psql('postgres', q{
    BEGIN;
    SELECT outbox.requeue(ARRAY[-100::bigint]) \\g /dev/null
    PREPARE TRANSACTION 'requeue_p';});
my %waiting = map { $_ => 1 } split /\n/, $node->safe_psql('postgres',
    q{SELECT id FROM outbox.messages WHERE destination = 'pr' AND key = 'p' AND lease_token IS NULL});
my ($p0, $q0) = ($left->('p'), $left->('q'));
ok(wait_until(sub { $left->('q') < $q0 }, 30) && wait_for_cycles($node, 5),
    'pr: the worker has turned five times since, delivering key q');
my ($p1, $q1) = ($left->('p'), $left->('q'));
is($p1, $p0, "pr: nothing of key p went while its requeue was prepared ($p0 queued)");
cmp_ok($q1, '<', $q0, "pr: key q went on meanwhile ($q0 -> $q1 queued)");
$node->safe_psql('postgres', "COMMIT PREPARED 'requeue_p'");
ok(wait_until(sub { $node->safe_psql('postgres',
        q{SELECT count(*) FROM outbox.messages WHERE destination = 'pr'}) eq '0' }, 60),
    'pr: everything delivered after COMMIT PREPARED') or diag($node->safe_psql('postgres', q{
    SELECT key, count(*), min(id), max(id), count(lease_token), count(order_key), min(available_at)::text
      FROM outbox.messages WHERE destination = 'pr' GROUP BY key;
    SELECT key, floor, floor_version, due_at::text, version, idle_since, now() FROM outbox.ordered_keys
     WHERE destination = 'pr';
    SELECT id, key, reason FROM outbox.dead_letters WHERE destination = 'pr'}));
$broker->ctl('rtt all 0');
my %pr_id = map { split /\|/ } split /\n/, $node->safe_psql('postgres', 'SELECT event_id, id FROM pr_sent');
my ($pr_early, $pr_seen) = (0, 0);
for my $m (sort { $a->{offset} <=> $b->{offset} } @{ $broker->consume('pr', timeout => 60) }) {
    my $id = $pr_id{ $m->{headers}{ce_id} } // next;
    if ($id == -100) { $pr_seen = 1; last }
    $pr_early++ if $waiting{$id};
}
ok($pr_seen, 'pr: the requeued dead letter arrived') or diag($node->safe_psql('postgres',
    q{SELECT id, key, reason, last_error FROM outbox.dead_letters WHERE destination = 'pr'}));
is($pr_early, 0, 'pr: none of the messages of p waiting at the requeue arrived before it');

#-------------------------------------------------------------------------------------------
# The worker finds the messages after a head with an ordered scan of messages_key_order. An
# index of that name built otherwise by hand (in descending order, whose forward scan would
# give a key's later messages first; with a predicate that leaves some messages out) is not
# used for that: every message of a key then goes by its own descent, still in id order.
#-------------------------------------------------------------------------------------------
my %index_as = (
    descending => '(order_key DESC, id DESC) WHERE order_key IS NOT NULL',
    'a predicate that leaves messages out' =>
        "(order_key, id) WHERE order_key IS NOT NULL AND (payload->>'n')::int % 3 <> 1");
for my $how (sort keys %index_as) {
    my $topic = $how =~ /^desc/ ? 'ixd' : 'ixp';
    $node->safe_psql('postgres', qq{
        DROP INDEX outbox.messages_key_order;
        CREATE INDEX messages_key_order ON outbox.messages $index_as{$how};
        SELECT outbox.create_destination('$topic', 'kafka',
            '{"bootstrap.servers": "$bootstrap", "topic": "$topic", "ordering": "key"}');
        SELECT outbox.pause('$topic');
        CREATE TABLE ${topic}_sent (event_id uuid PRIMARY KEY, id bigint NOT NULL, key text NOT NULL);
        WITH m AS (INSERT INTO outbox.messages (destination, key, payload)
                   SELECT '$topic', 'k' || (g % 4), jsonb_build_object('n', g)
                     FROM generate_series(1, 1200) g
                   RETURNING event_id, id, key)
        INSERT INTO ${topic}_sent SELECT * FROM m;
        SELECT outbox.resume('$topic');});
    ok(wait_until(sub { $node->safe_psql('postgres',
            "SELECT count(*) FROM outbox.messages WHERE destination = '$topic'") eq '0' }, 60),
        "messages_key_order with $how: everything delivered");
    check_key_order($node, "SELECT event_id, id, key FROM ${topic}_sent",
        $broker->consume($topic, timeout => 60), "messages_key_order with $how");
}
$node->safe_psql('postgres', q{
    DROP INDEX outbox.messages_key_order;
    CREATE INDEX messages_key_order ON outbox.messages (order_key, id) WHERE order_key IS NOT NULL;});

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
