# A crash at each step of the inbox's consume transaction (issue 23): the worker is held in one
# phase with the test-only outbox.debug_pause — after the dedup row and before the handler,
# after the handler, before the commit — and the server is stopped in immediate mode there.
# After the restart every record is applied exactly once: no effect repeated, none lost.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
$broker->ctl('create phases 1');
my $node = outbox_node('inbox_phases', test_switches => 1);
$node->safe_psql('postgres', qq{
    CREATE TABLE applied (n int, "offset" bigint);
    CREATE FUNCTION public.apply(m outbox.inbox_message) RETURNS void LANGUAGE sql AS
        \$\$ INSERT INTO public.applied VALUES ((m.payload->>'n')::int, m."offset") \$\$;
    SELECT outbox.create_destination('phases', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "phases"}');
    SELECT outbox.create_subscription('phases_in', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topics": ["phases"], "batch_size": 10}', 'public.apply(outbox.inbox_message)');
});

my $n = 0;
for my $phase (qw(inbox_before_handler inbox_after_handler inbox_before_commit)) {
    $node->append_conf('postgresql.conf', "outbox.debug_pause = '$phase'\noutbox.debug_pause_ms = 60000\n");
    # A restart, not a reload: the inbox worker shows no count of its turns that would tell when
    # it has read a reload (one CI run saw it consume the records before it had, and never
    # pause); started again, it has the setting from its start.
    $node->restart;
    my $offset = -s $node->logfile;
    my $from = $n + 1;
    $n += 10;
    $node->safe_psql('postgres', qq{
        INSERT INTO outbox.messages (destination, payload)
        SELECT 'phases', jsonb_build_object('n', g) FROM generate_series($from, $n) g});
    ok($node->wait_for_log(qr/outbox: pausing 60000 ms in phase "\Q$phase\E"/, $offset),
        "$phase: the worker is held there");
    $node->stop('immediate');
    $node->append_conf('postgresql.conf', "outbox.debug_pause = ''\n");
    $node->start;
    ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM applied') == $n }, 60),
        "$phase: after the restart all $n records are applied");
    sleep 1;  # anything applied twice would show by now (the inbox worker shows no count of its turns)
    is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT n) FROM applied'), "$n|$n",
        "$phase: each exactly once");
    is($node->safe_psql('postgres', q{SELECT "offset" FROM outbox.inbox_offsets}),
        $node->safe_psql('postgres', 'SELECT max("offset") + 1 FROM applied'),
        "$phase: the stored offset is just past the last record");
}
is($node->safe_psql('postgres', q{SELECT duplicates FROM outbox.subscriptions()}),
    $node->safe_psql('postgres', q{SELECT (SELECT "offset" FROM outbox.inbox_offsets) - count(*) FROM applied}),
    'every other record in the topic (the relay\'s own redeliveries) counted as a duplicate');

check_server_log($node);
done_testing();
