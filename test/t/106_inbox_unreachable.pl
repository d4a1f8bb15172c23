# outbox.subscriptions() while a subscription's cluster cannot be reached: the lag is unknown
# (NULL, with the high watermark), not 0, and last_error says the cluster cannot be reached.
# - a subscription to 127.0.0.1 on a closed port: never reached;
# - a subscription to the test broker, consumed, then the broker down (connections refused):
#   unknown lag and the error while it is down, its stored offsets unchanged; up again, the lag
#   is known again, the error gone, and everything produced is applied once.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
$broker->ctl('create events 2');
my $node = outbox_node('unreachable');
# A port nothing listens on, held by the test to its end (refusing_port).
my $probe = refusing_port();
my $closed = $probe->sockport;

$node->safe_psql('postgres', qq{
    CREATE TABLE applied (event_id uuid, n int);
    CREATE FUNCTION apply(m outbox.inbox_message) RETURNS void LANGUAGE sql
        AS \$\$ INSERT INTO public.applied VALUES (m.event_id, (m.payload->>'n')::int) \$\$;
    SELECT outbox.create_subscription('nowhere', 'kafka',
        '{"bootstrap.servers": "127.0.0.1:$closed", "topics": ["events"]}', 'apply(outbox.inbox_message)');
    SELECT outbox.create_subscription('live', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topics": ["events"]}', 'apply(outbox.inbox_message)');
    SELECT outbox.create_destination('events', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "events"}');
});
my $row = sub {
    my ($name) = @_;
    return $node->safe_psql('postgres', qq{
        SELECT coalesce(string_agg(concat_ws(',', "partition", stored_offset, coalesce(high_watermark::text, 'unknown'),
                                             coalesce(lag::text, 'unknown')), ' ' ORDER BY "partition"), '')
               || '|' || coalesce(min(last_error), '')
          FROM outbox.subscriptions() WHERE subscription = '$name'});
};

# Never reached.
ok(wait_until(sub { $row->('nowhere') =~ /\|the cluster cannot be reached: metadata request failed: / }, 60),
    'nowhere: last_error says the cluster cannot be reached, with what the client said')
  or diag($row->('nowhere'));
my ($where, $error) = split /\|/, $row->('nowhere'), 2;
diag("nowhere: $error");
is($where, 'unknown,unknown', 'nowhere: one row, no partition, high watermark and lag unknown (NULL, not 0)');
my %seen;
for (1 .. 15) { $seen{ $row->('nowhere') } = 1; sleep 0.1; }
is(join(' / ', sort keys %seen), "unknown,unknown|$error", 'nowhere: and so it stays (read 15 times over 1.5 s)');

# Consumed, then down.
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'events', 'k' || g, jsonb_build_object('n', g) FROM generate_series(1, 200) g});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM applied') eq '200' }, 60),
    'live: the 200 records are applied');
ok(wait_until(sub { my ($p) = split /\|/, $row->('live'); $p =~ /^0,\d+,\d+,0 1,\d+,\d+,0$/ }, 30),
    'live: both partitions with a lag of 0') or diag($row->('live'));
my $stored = $node->safe_psql('postgres', q{SELECT string_agg("offset"::text, ',' ORDER BY "partition") FROM outbox.inbox_offsets WHERE subscription = 'live'});
$broker->down;
ok(wait_until(sub { $row->('live') =~ /^0,\d+,unknown,unknown 1,\d+,unknown,unknown\|the cluster cannot be reached: / }, 60),
    'live, broker down: lag and high watermark unknown, and the error') or diag($row->('live'));
is($node->safe_psql('postgres', q{SELECT string_agg("offset"::text, ',' ORDER BY "partition") FROM outbox.inbox_offsets WHERE subscription = 'live'}),
    $stored, 'live, broker down: the stored offsets are unchanged');
$broker->up;
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'events', 'k' || g, jsonb_build_object('n', g) FROM generate_series(201, 300) g});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM applied') eq '300' }, 90),
    'live, broker up: the 100 produced since are applied');
ok(wait_until(sub { $row->('live') =~ /^0,\d+,\d+,0 1,\d+,\d+,0\|$/ }, 30),
    'live, broker up: lag known (0) again, no error') or diag($row->('live'));
is($node->safe_psql('postgres', 'SELECT count(DISTINCT event_id) || \' \' || count(*) FROM applied'), '300 300',
    'each of the 300 records applied once');
like($row->('nowhere'), qr/\|the cluster cannot be reached: /, 'nowhere: still unreachable');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
