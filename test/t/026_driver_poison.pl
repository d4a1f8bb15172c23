# Driver process faults with the test-only switch outbox.debug_driver_fault (off by default):
# (a) A message that crashes the driver process every time it is sent (SIGSEGV when a message
#     with key poison-1 is submitted) is dead-lettered as `poison` after outbox.poison_after (3)
#     crashes, while the other messages of its destination, of a second Kafka destination and of
#     a webhook destination keep flowing (all of them arrive), nothing else is dead-lettered, and
#     the postmaster never restarts.
# (b) A driver process that leaks (100 kB kept per message) under outbox.driver_memory_limit
#     = 256MB runs out of memory again and again: each time it exits, is restarted, and nothing
#     is lost.
# (c) The two new settings refuse bad values with their exact errors.
# (d) ALTER EXTENSION UPDATE from 0.1.0 recreates outbox.workers() with driver_pid and
#     driver_restarts, keeping the EXECUTE privileges roles had on it.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $sink = webhook_sink();
my $node = outbox_node('drvpoison', test_switches => 1, conf => join("\n", 'log_statement = none',
    "outbox.lease_timeout = '10s'", "outbox.debug_driver_fault = 'segv:poison-1'"));
my $hook_url = $sink->url('/flow');
$node->safe_psql('postgres', qq{
    CREATE TABLE produced (part text, dest text, event_id uuid PRIMARY KEY);
    SELECT outbox.create_destination('pk', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "pk"}');
    SELECT outbox.create_destination('ok', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "ok"}');
    SELECT outbox.create_destination('hook', 'webhook', '{"url": "$hook_url"}');
});
my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

my $seq = 0;
# Queues $n messages for each destination, recorded as part $part.
sub produce_parts {
    my ($part, $n, @dests) = @_;
    for my $dest (@dests) {
        my $from = $seq + 1;
        $seq += $n;
        produce($node, $dest, $from, $seq, key => "$dest-",
            record => "produced SELECT '$part', destination, event_id");
    }
}
sub delivered {
    my ($dest) = @_;
    return stats_row($node, $dest)->{delivered_total};
}
sub produced_ids {
    my ($part, $dest) = @_;
    return [ split /\n/, $node->safe_psql('postgres',
        "SELECT event_id FROM produced WHERE part = '$part' AND dest = '$dest'") ];
}

#-------------------------------------------------------------------------------------------
# (a) A message that crashes the driver process whenever it is sent.
#-------------------------------------------------------------------------------------------
produce_parts('a', 2000, 'pk', 'ok', 'hook');
ok(wait_until(sub { queued($node) == 0 }, 120), 'a: 6,000 messages delivered before the poison message');
my $offset = -s $node->logfile;
my %before = map { $_ => delivered($_) } qw(pk ok hook);
my ($restarts_before) = $node->safe_psql('postgres', 'SELECT driver_restarts FROM outbox.workers()');
# The poison message in the middle of a batch of its own destination, with the others flowing.
produce_parts('a', 300, 'pk');
my $poison = $node->safe_psql('postgres', q{
    WITH m AS (INSERT INTO outbox.messages (destination, key, payload)
               VALUES ('pk', 'poison-1', '{"poison": true}') RETURNING destination, event_id)
    INSERT INTO produced SELECT 'poison', destination, event_id FROM m RETURNING event_id});
my $t0 = time;
my $rounds = 0;
until ($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters') ne '0' || time - $t0 > 120) {
    produce_parts('a', 100, 'pk', 'ok', 'hook');
    $rounds++;
    sleep 0.3;   # paces the rounds (a fixed pace, not a wait): the driver crashes meanwhile
}
my $took = time - $t0;
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '1',
    'a: one message is dead-lettered');
is($node->safe_psql('postgres', qq{SELECT reason FROM outbox.dead_letters WHERE event_id = '$poison'}),
    'poison', "a: the poison message, with reason poison (after ${\ sprintf('%.1f', $took)} s)");
like($node->safe_psql('postgres', qq{SELECT last_error FROM outbox.dead_letters WHERE event_id = '$poison'}),
    qr/^in flight during 3 driver process crashes \(outbox\.poison_after\), the last: signal 11: Segmentation fault$/,
    'a: its last_error says why');
is($node->safe_psql('postgres', qq{SELECT attempts FROM outbox.dead_letters WHERE event_id = '$poison'}),
    '0', 'a: the crashes spent none of its attempts');
my $log = slurp_file($node->logfile, $offset);
my @crashes = $log =~ /outbox: driver process \d+ was killed by signal 11 \(Segmentation fault\)/g;
is(scalar(@crashes), 3, 'a: the driver process crashed exactly 3 times (outbox.poison_after)');
like($log, qr/outbox: pk: message \d+ was in flight during 3 driver process crashes: moved to the dead letters as poison/,
    'a: the log names the message buried');
# The third crash's restart follows a backoff, which can end after the burial is visible.
sub restarts { return $node->safe_psql('postgres', 'SELECT driver_restarts FROM outbox.workers()') - $restarts_before; }
ok(wait_until(sub { restarts() >= 3 }, 30), 'a: the driver process is restarted after the third crash');
is(restarts(), 3, 'a: outbox.workers() counts 3 driver restarts');
# Everything else goes on: a last batch, then every message must have arrived.
produce_parts('a', 500, 'pk', 'ok', 'hook');
ok(wait_until(sub { queued($node) == 0 }, 120), 'a: everything else is delivered');
is(restarts(), 3, 'a: and no more restarts once the poison message is buried');
for my $dest (qw(pk ok hook)) {
    cmp_ok(delivered($dest) - $before{$dest}, '>=', 500 + $rounds * 100,
        "a: $dest kept delivering ($rounds rounds of 100 produced while the poison was crashing)");
}
fault_summary('driver_poison_pk', produced => produced_ids('a', 'pk'),
    received => kafka_event_ids($broker, 'pk'));
fault_summary('driver_poison_ok', produced => produced_ids('a', 'ok'),
    received => kafka_event_ids($broker, 'ok'));
fault_summary('driver_poison_hook', produced => produced_ids('a', 'hook'),
    received => sink_event_ids($sink, qr{^/flow$}));
is(scalar(grep { $_ eq $poison } @{ kafka_event_ids($broker, 'pk') }), 0,
    'a: the poison message never reached the broker');

#-------------------------------------------------------------------------------------------
# (b) A leaking driver process under outbox.driver_memory_limit.
#-------------------------------------------------------------------------------------------
# A leak is no message's fault: every message in flight at each restart counts one crash, so
# poison_after is raised for this part (the point here is the restarts and that nothing is lost).
$node->append_conf('postgresql.conf', join("\n", "outbox.debug_driver_fault = 'leak:102400'",
    "outbox.driver_memory_limit = '256MB'", 'outbox.poison_after = 20', ''));
ok(reload_and_wait($node, 'outbox.poison_after', '20'), 'b: the worker has read the settings');
$offset = -s $node->logfile;
($restarts_before) = $node->safe_psql('postgres', 'SELECT driver_restarts FROM outbox.workers()');
$node->safe_psql('postgres', q{SELECT outbox.pause('ok')});
produce_parts('b', 6000, 'ok');
$node->safe_psql('postgres', q{SELECT outbox.resume('ok')});
ok(wait_until(sub { queued($node) == 0 }, 300), 'b: 6,000 messages drained through a leaking driver process');
my $leak_restarts = restarts();
cmp_ok($leak_restarts, '>=', 2, "b: the driver process was restarted ($leak_restarts times)");
$log = slurp_file($node->logfile, $offset);
like($log, qr/outbox: driver process \d+ ran out of memory \(outbox\.driver_memory_limit\) and exited/,
    'b: the log says it ran out of memory');
my $ids = produced_ids('b', 'ok');
my %b = map { $_ => 1 } @$ids;
fault_summary('driver_memory_limit', produced => $ids,
    received => [ grep { $b{$_} } @{ kafka_event_ids($broker, 'ok') } ]);
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '1',
    'b: nothing more was dead-lettered');

#-------------------------------------------------------------------------------------------
# (c) Bad values of the new settings.
#-------------------------------------------------------------------------------------------
my ($rc, $out, $err) = $node->psql('postgres', q{ALTER SYSTEM SET outbox.driver_memory_limit = '10MB'});
like($err, qr/ERROR:  invalid value for parameter "outbox.driver_memory_limit": 10\nDETAIL:  outbox.driver_memory_limit must be at least 64MB, or 0 for no limit\./,
    'c: a memory limit below 64MB is refused');
($rc, $out, $err) = $node->psql('postgres', q{ALTER SYSTEM SET outbox.poison_after = 0});
like($err, qr/ERROR:  0 is outside the valid range for parameter "outbox.poison_after" \(1 \.\. 1000\)/,
    'c: poison_after 0 is refused');
is($node->safe_psql('postgres', q{SELECT setting FROM pg_settings WHERE name = 'outbox.driver_memory_limit'}),
    '256', 'c: the setting in force is unchanged');
is($node->safe_psql('postgres', 'SHOW outbox.poison_after'), '20', 'c: poison_after unchanged');

#-------------------------------------------------------------------------------------------
# (d) ALTER EXTENSION UPDATE from 0.1.0 gives outbox.workers() its two new columns and keeps
#     the EXECUTE privileges roles had on it.
#-------------------------------------------------------------------------------------------
$node->safe_psql('postgres', 'CREATE DATABASE upg');
$node->safe_psql('upg', q{
    CREATE EXTENSION outbox VERSION '0.1.0';
    CREATE ROLE ops;
    GRANT USAGE ON SCHEMA outbox TO ops;
    GRANT EXECUTE ON FUNCTION outbox.workers() TO ops;
});
is($node->safe_psql('upg', 'SELECT count(*) FROM outbox.workers()'), '1',
    'd: the 0.1.0 outbox.workers() works with the new module');
$node->safe_psql('upg', 'ALTER EXTENSION outbox UPDATE');
my $def = q{SELECT pg_get_functiondef('outbox.workers()'::regprocedure) || obj_description('outbox.workers()'::regprocedure)};
is($node->safe_psql('upg', $def), $node->safe_psql('postgres', $def),
    'd: after the update outbox.workers() is the one of a fresh install');
is($node->safe_psql('upg', q{SELECT has_function_privilege('ops', 'outbox.workers()', 'EXECUTE')
                               || ',' || has_function_privilege('public', 'outbox.workers()', 'EXECUTE')}),
    'true,false', 'd: ops kept EXECUTE on it, PUBLIC still has none');
is($node->safe_psql('upg', q{SET ROLE ops; SELECT count(*) FROM outbox.workers() WHERE driver_pid > 0 AND driver_restarts >= 3}),
    '1', 'd: ops reads driver_pid and driver_restarts');
$node->safe_psql('postgres', 'DROP DATABASE upg');

is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'), $started,
    'the postmaster never restarted');
unlike(slurp_file($node->logfile), qr/terminating any other active server processes/,
    'the server log has no backend crash');
$node->stop;
check_server_log($node);
$sink->stop;
$broker->stop;
done_testing();
