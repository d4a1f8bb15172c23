# A setting reloaded into the worker (outbox.batch_size) or a changed destination config gives
# the destination a new driver; the worker must then wait on the new driver's fd. Before the fix
# the new driver's fd often got the number of the old one, the worker kept its wait set, never
# woke on acknowledgements, and every claim waited out a timer: after a reload to
# batch_size = 1, 300 messages took 16 s instead of 0.36 s after a restart.
#
# Timed, but with a wide margin: the same drain after a restart is the yardstick, measured in
# the same test; the defect made it 30-50 times slower.
# outbox-tap: alone -- compares drain times measured minutes apart (at most 3x + 1 s)
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('reload');
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('d', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "t"}');
});

my $n = 300;
my $batch = 0;
# Seconds to drain $n messages queued while the destination was paused.
sub drain {
    $batch++;
    $node->safe_psql('postgres', qq{
        SELECT outbox.pause('d');
        INSERT INTO outbox.messages (destination, key, payload)
        SELECT 'd', 'b$batch-' || g, '{}' FROM generate_series(1, $n) g;
    });
    my $t0 = time;
    $node->safe_psql('postgres', q{SELECT outbox.resume('d')});
    wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 120)
      or return 1e9;
    return time - $t0;
}

# Warm up: a first (leased) claim since the start, then the fast path.
sub warm_up {
    $node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('d', 'warm', '{}')});
    ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30),
        'a first message is delivered');
}

# The same batch size set at start: the yardstick.
$node->append_conf('postgresql.conf', "outbox.batch_size = 1\n");
$node->restart;
warm_up();
my $after_restart = drain();

# Set by a reload instead: the worker rebuilds the destination's driver.
$node->append_conf('postgresql.conf', "outbox.batch_size = 10\n");
$node->restart;
warm_up();
drain();
$node->safe_psql('postgres', 'ALTER SYSTEM SET outbox.batch_size = 1');
ok(reload_and_wait($node, 'outbox.batch_size', '1'), 'the worker has read batch_size 1');
warm_up();  # the new producer's first message waits for its connection and producer id
my $after_reload = drain();

# A changed destination config rebuilds the driver too.
$node->safe_psql('postgres', q{SELECT outbox.alter_destination('d', '{"linger.ms": 2}')});
# Its commit tells the worker, which loads the destinations at its next turn.
ok(wait_for_cycles($node, 2), 'the worker has turned twice since');
warm_up();
my $after_alter = drain();

diag(sprintf('%d messages at batch_size 1: %.2f s after a restart, %.2f s after a reload, '
        . '%.2f s after alter_destination', $n, $after_restart, $after_reload, $after_alter));
my $limit = 3 * $after_restart + 1;
cmp_ok($after_reload, '<', $limit,
    'after a reload of batch_size the drain is about as fast as after a restart');
cmp_ok($after_alter, '<', $limit,
    'after alter_destination gave the destination a new driver, too');

my $consumed = $broker->consume('t');
my %keys = map { $_->{key} => 1 } @$consumed;
is(scalar(grep { /^b\d+-\d+$/ } keys %keys), 4 * $n, 'every message arrived');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
