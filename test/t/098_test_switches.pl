# The test switches sit behind one gate (issue 36): outbox.test_switches, a postmaster setting,
# off by default. While it is off the outbox.debug_* settings do not exist: the reserved "outbox."
# prefix refuses their names, a value postgresql.conf gives them is dropped at start, and the
# fault it would have injected does not happen. Only a restart with the gate on brings them.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
# postgresql.conf names a driver fault that would crash the driver process on key 'boom' and a
# pause in every claim (it would log "pausing 0 ms"): without the gate neither may reach the module.
my $node = outbox_node('switches', conf => join("\n",
    "outbox.debug_driver_fault = 'segv:boom'", "outbox.debug_pause = 'claim'"));
$node->safe_psql('postgres', qq{
    CREATE ROLE app LOGIN;
    SELECT outbox.create_destination('d', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "t"}');
});

# Runs one statement with psql (verbose errors) and returns its stderr.
sub psql_error {
    my ($sql, @user) = @_;
    my ($ret, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
        extra_params => [@user ? ('-U', @user) : ()]);
    return $ret == 0 ? "(no error: $out)" : $err;
}

#-------------------------------------------------------------------------------------------
# Gate off: what a user's server is.
#-------------------------------------------------------------------------------------------
is($node->safe_psql('postgres', 'SHOW outbox.test_switches'), 'off', 'gate off: test_switches is off');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_settings WHERE name LIKE 'outbox.debug%'"),
    '0', 'gate off: no outbox.debug_* setting is defined');
like(slurp_file($node->logfile),
    qr/WARNING:  invalid configuration parameter name "outbox\.debug_driver_fault", removing it/,
    "gate off: postgresql.conf's outbox.debug_driver_fault is dropped at start");
like(psql_error(q{SET outbox.debug_pause = 'claim'}),
    qr/ERROR:  42602: invalid configuration parameter name "outbox\.debug_pause"\nDETAIL:  "outbox" is a reserved prefix\./,
    'gate off: SET outbox.debug_pause fails with 42602 (reserved prefix)');
like(psql_error(q{SET outbox.debug_fault = 'bad_alloc_in_pg_try'}),
    qr/ERROR:  42602: invalid configuration parameter name "outbox\.debug_fault"/,
    'gate off: SET outbox.debug_fault fails with 42602');
# ALTER SYSTEM of an unknown name: PostgreSQL 15 and 16 know no such parameter (42704); 17 and
# later accept unknown custom names there unless, as here, their prefix is reserved (42602).
my $major = int($node->safe_psql('postgres', 'SHOW server_version_num') / 10000);
like(psql_error(q{ALTER SYSTEM SET outbox.debug_driver_fault = 'segv:boom'}),
    $major >= 17
      ? qr/ERROR:  42602: invalid configuration parameter name "outbox\.debug_driver_fault"\nDETAIL:  "outbox" is a reserved prefix\./
      : qr/ERROR:  42704: unrecognized configuration parameter "outbox\.debug_driver_fault"/,
    'gate off: ALTER SYSTEM SET outbox.debug_driver_fault fails (' . ($major >= 17 ? 42602 : 42704) . ')');
like(psql_error(q{SHOW outbox.debug_pause}),
    qr/ERROR:  42704: unrecognized configuration parameter "outbox\.debug_pause"/,
    'gate off: SHOW outbox.debug_pause fails with 42704');

# The fault named in postgresql.conf does not fire: the message with key 'boom' is delivered.
$node->safe_psql('postgres',
    q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('d', 'boom', '{}')});
ok(wait_until(sub { queued($node) == 0 }, 60), "gate off: the message keyed 'boom' is delivered");
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0',
    'gate off: nothing dead-lettered');
unlike(slurp_file($node->logfile), qr/pausing \d+ ms in phase/, 'gate off: the worker never paused');

# Nobody turns the gate on from a session: it needs a restart, and ALTER SYSTEM a superuser.
like(psql_error(q{SET outbox.test_switches = on}, 'app'),
    qr/ERROR:  55P02: parameter "outbox\.test_switches" cannot be changed without restarting the server/,
    'a non-superuser cannot SET test_switches (55P02)');
like(psql_error(q{ALTER SYSTEM SET outbox.test_switches = on}, 'app'),
    qr/ERROR:  42501: permission denied to set parameter "outbox\.test_switches"/,
    'a non-superuser cannot ALTER SYSTEM SET test_switches (42501)');
like(psql_error(q{SET outbox.test_switches = on}),
    qr/ERROR:  55P02: parameter "outbox\.test_switches" cannot be changed without restarting the server/,
    'a superuser cannot SET it in a session either (55P02)');

#-------------------------------------------------------------------------------------------
# Gate on (the extension's own tests): after a restart the switches exist.
#-------------------------------------------------------------------------------------------
$node->append_conf('postgresql.conf', join("\n", "outbox.debug_driver_fault = ''",
    "outbox.debug_pause = 'no-such-phase'", 'outbox.test_switches = on') . "\n");
$node->restart;
is($node->safe_psql('postgres', 'SHOW outbox.test_switches'), 'on', 'gate on: test_switches is on');
is($node->safe_psql('postgres', 'SHOW outbox.debug_pause'), 'no-such-phase',
    "gate on: outbox.debug_pause has postgresql.conf's value");
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_settings WHERE name LIKE 'outbox.debug%'"),
    '0', 'gate on: the switches stay hidden from pg_settings');
is($node->safe_psql('postgres', q{SET outbox.debug_fault = ''; SHOW outbox.debug_fault}), '',
    'gate on: a superuser may SET outbox.debug_fault');
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.debug_driver_fault = 'leak:1'});
$node->safe_psql('postgres', q{ALTER SYSTEM RESET outbox.debug_driver_fault});
pass('gate on: ALTER SYSTEM SET/RESET outbox.debug_driver_fault succeed');
like(psql_error(q{SET outbox.debug_driver_fault = 'segv:boom'}, 'app'),
    qr/ERROR:  42501: permission denied to set parameter "outbox\.debug_driver_fault"/,
    'gate on: a non-superuser cannot SET outbox.debug_driver_fault (42501)');

check_server_log($node);
$node->stop;
$broker->stop;
done_testing();
