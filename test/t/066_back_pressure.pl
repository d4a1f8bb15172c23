# Back-pressure (max_pending): 16 concurrent producers against a destination's cap and against
# the database's outbox.max_pending. The cap is exact: the committed queue never passes it and,
# since no producing transaction rolls back, it ends exactly at the cap with every other attempt
# refused (SQLSTATE 53400). A transaction in progress holds its room until it ends; delivery and
# rollback give room back; after a restart the first capped insert takes the counts again.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = kafka_broker();
my $node = outbox_node('back_pressure', conf => "max_connections = 40");
my $bootstrap = $broker->bootstrap;
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('capped', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "capped", "max_pending": 500}');
    SELECT outbox.create_destination('other', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "other"}');
    SELECT outbox.pause('capped');
    SELECT outbox.pause('other');
    CREATE UNLOGGED TABLE outcome (destination text, ok boolean);
    -- One attempt: queued, or refused by a cap (recorded either way, in the same transaction).
    CREATE FUNCTION produce(dest text) RETURNS void LANGUAGE plpgsql AS \$\$
    BEGIN
        BEGIN
            INSERT INTO outbox.messages (destination, payload) VALUES (dest, '{}');
            INSERT INTO outcome VALUES (dest, true);
        EXCEPTION WHEN configuration_limit_exceeded THEN
            INSERT INTO outcome VALUES (dest, false);
        END;
    END \$\$;
});

# 16 sessions x 100 transactions, each holding its row uncommitted for up to 5 ms.
sub produce_concurrently {
    my ($destination_sql) = @_;
    my $script = PostgreSQL::Test::Utils::tempdir() . '/produce.sql';
    PostgreSQL::Test::Utils::append_to_file($script, qq{BEGIN;
SELECT produce($destination_sql);
SELECT pg_sleep(random() * 0.005);
COMMIT;
});
    my ($out, $err) = ('', '');
    my $ok = IPC::Run::run(['pgbench', '-n', '-c', '16', '-j', '4', '-t', '100', '-f', $script,
            '-h', $node->host, '-p', $node->port, 'postgres'], '>', \$out, '2>', \$err);
    diag($err) unless $ok;
    return $ok;
}
sub outcome {
    return $node->safe_psql('postgres', q{
        SELECT count(*) FILTER (WHERE ok) || ' queued, ' || count(*) FILTER (WHERE NOT ok) || ' refused'
          FROM outcome});
}

# A destination's cap.
ok(produce_concurrently(q{'capped'}), '16 sessions made 1,600 attempts on capped (max_pending 500)');
is(outcome(), '500 queued, 1100 refused', 'exactly 500 were queued, the other 1,100 refused');
is(queued($node, 'capped'), '500', 'outbox.messages holds exactly the cap');
my $s = stats_row($node, 'capped');
is("$s->{pending} $s->{max_pending} $s->{refused_total}", '500 500 1100',
    'stats(): pending 500, max_pending 500, refused_total 1100');

# A transaction in progress holds its room (the bound counts it), until it rolls back.
$node->safe_psql('postgres', q{
    SELECT outbox.create_destination('held', 'kafka', '{"bootstrap.servers": "127.0.0.1:1", "topic": "h", "max_pending": 1}');
    SELECT outbox.pause('held');
});
my $bg = $node->background_psql('postgres');
$bg->query_safe(q{BEGIN; INSERT INTO outbox.messages (destination, payload) VALUES ('held', '{"n": 1}')});
my ($ret, $stdout, $stderr) = $node->psql('postgres',
    q{INSERT INTO outbox.messages (destination, payload) VALUES ('held', '{"n": 2}')});
like($stderr, qr/outbox destination "held" is full: 1 messages pending, max_pending is 1/,
    'an uncommitted row of another session counts against the cap');
$bg->query_safe('ROLLBACK');
is($node->psql('postgres', q{INSERT INTO outbox.messages (destination, payload) VALUES ('held', '{"n": 3}')}),
    0, 'its rollback gave the room back');
$bg->quit;
$node->safe_psql('postgres', q{SELECT outbox.drop_destination('held', force => true)});

# Delivery makes room.
$node->safe_psql('postgres', q{SELECT outbox.resume('capped')});
ok(wait_until(sub { queued($node, 'capped') eq '0' }, 120), 'resumed: capped drained');
is($node->psql('postgres', q{INSERT INTO outbox.messages (destination, payload)
                              SELECT 'capped', '{}' FROM generate_series(1, 500)}),
    0, 'after delivery 500 fit again in one statement');
ok(wait_until(sub { queued($node, 'capped') eq '0' }, 120), 'and are delivered');
is($broker->end_offset_sum('capped'), 1000, 'the broker holds the 1,000 queued messages, no more');

# The database's cap, over two destinations.
$node->safe_psql('postgres', q{
    SELECT outbox.pause('capped');
    SELECT outbox.alter_destination('capped', '{"max_pending": null}');
    TRUNCATE outcome;
    SELECT outbox.recount();  -- the producers start without kept counts, as after a restart
    ALTER SYSTEM SET outbox.max_pending = 300;
    SELECT pg_reload_conf();
});
ok(wait_until(sub { $node->safe_psql('postgres', 'SHOW outbox.max_pending') eq '300' }, 10),
    'outbox.max_pending = 300');
ok(produce_concurrently(q{CASE WHEN random() < 0.5 THEN 'capped' ELSE 'other' END}),
    '16 sessions made 1,600 attempts on capped and other');
is(outcome(), '300 queued, 1300 refused', 'exactly 300 were queued, 1,300 refused');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE destination IN ('capped', 'other')}),
    '300', 'the queue holds exactly the cap');
cmp_ok(queued($node, 'capped'), '>', 0, 'both destinations got some: capped ' . queued($node, 'capped'));
cmp_ok(queued($node, 'other'), '>', 0, 'other ' . queued($node, 'other'));

# After a restart the counts are gone; the first capped insert takes them again.
$node->restart;
($ret, $stdout, $stderr) = $node->psql('postgres',
    q{INSERT INTO outbox.messages (destination, payload) VALUES ('other', '{}')});
like($stderr, qr/outbox queue of database "postgres" is full: 300 messages pending, outbox\.max_pending is 300/,
    'after a restart the full queue still refuses (counted again: 300)');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages}), '300', 'nothing was added');
is($node->safe_psql('postgres', q{SELECT string_agg(destination || ' ' || balance, ', ' ORDER BY destination)
                                    FROM outbox.conservation()}),
    'capped 0, other 0', 'conservation balances');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
