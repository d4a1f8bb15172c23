# Per-key ordering while dead letters keep going back to the front of their keys: the worker
# starts each key's walk at the head it last found (its key floor), and a requeued dead letter
# goes back below that. Producers add messages, 5% of produce requests are rejected for good
# (whole batches dead-lettered, their keys held), a loop requeues every dead letter as it
# appears, and VACUUM keeps removing the index entries and pages the walk's position hints
# point at. For every key, first arrivals follow id order, and nothing is lost.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $node = outbox_node('floors', conf => join("\n",
    "outbox.retry_base = '20ms'", "outbox.retry_max = '200ms'", "outbox.max_attempts = 1000",
    "autovacuum = off"));
my $bootstrap = $broker->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('fl', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "fl", "ordering": "key"}');
    CREATE TABLE sent (event_id uuid PRIMARY KEY, id bigint NOT NULL, key text NOT NULL);
    CREATE SEQUENCE n_seq;
});
$broker->ctl('error_rate produce 5 100000 INVALID_RECORD 11');

# 4 sessions x 1,500 single-message transactions over 50 keys.
my $producers = start_pgbench($node, clients => 4, threads => 2, transactions => 1500, script => q{
WITH m AS (
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'fl', 'k' || (n % 50), jsonb_build_object('n', n) FROM (SELECT nextval('n_seq') AS n) s
    RETURNING event_id, id, key)
INSERT INTO sent SELECT * FROM m;
});
# VACUUM runs on every turn of the loop: the whole drain can take under two seconds on a quiet
# machine, and a VACUUM every half second had managed only two in one CI run.
my ($requeued, $vacuums) = (0, 0);
my $deadline = time + 300;
my $drained = 0;
while (time < $deadline) {
    $requeued += $node->safe_psql('postgres',
        q{SELECT outbox.requeue(coalesce(array_agg(id), '{}')) FROM outbox.dead_letters});
    $node->safe_psql('postgres', 'VACUUM outbox.messages');
    $vacuums++;
    $drained = $node->safe_psql('postgres', q{
        SELECT (SELECT count(*) FROM sent) = 6000 AND NOT EXISTS (SELECT FROM outbox.messages)
           AND NOT EXISTS (SELECT FROM outbox.dead_letters)}) eq 't';
    last if $drained;
    sleep 0.1;   # the loop's pace
}
$producers->finish;
is(${ $producers->{outbox_err} } =~ /error|abort/i ? ${ $producers->{outbox_err} } : '', '',
    'the producers ran without errors');
is($node->safe_psql('postgres', 'SELECT count(*) FROM sent'), '6000', '6,000 messages recorded');
ok($drained, 'everything delivered, no dead letter left');
$broker->ctl('clear produce');
cmp_ok($requeued, '>=', 20, "dead letters went back to the front of their keys: $requeued");
cmp_ok($vacuums, '>=', 3, "VACUUM ran meanwhile: $vacuums times");

my $repeats = check_key_order($node, 'SELECT event_id, id, key FROM sent',
    $broker->consume('fl', timeout => 120), '6,000 messages');
diag("$requeued dead letters requeued, VACUUM $vacuums times, $repeats repeats");

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
