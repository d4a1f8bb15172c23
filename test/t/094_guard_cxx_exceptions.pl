# The C++ <-> PostgreSQL boundary survives a C++ exception thrown inside a PG_TRY body.
#
# An exception that unwinds out of a PG_TRY body leaves PG_exception_stack pointing into a
# finished frame: the next ERROR jumps there and the backend crashes, and the postmaster
# restarts every session (issue 16; pg_duckdb documents the same trap). The guard (PgTry,
# include/outbox/pg/guard.hpp) catches the exception inside the body and rethrows it after
# PG_END_TRY; every entry point — the launcher's loop included, which had no try at all and
# would have died in std::terminate — catches what reaches it and checks the error stack.
#
# The test-only setting outbox.debug_fault = 'bad_alloc_in_pg_try' makes the next PgTry of
# each process that takes it throw std::bad_alloc inside its PG_TRY body.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

# PG_TRY, PG_CATCH, PG_FINALLY and PG_END_TRY are used by the guard only.
my $root = $ENV{OUTBOX_ROOT};
my @raw;
for my $file (split /\n/, `cd $root && git ls-files src include test/unit`) {
    next if $file eq 'include/outbox/pg/guard.hpp';
    my $text = slurp_file("$root/$file");
    push @raw, "$file: $1" while $text =~ /\b(PG_(?:TRY|CATCH|FINALLY|END_TRY))\s*\(/g;
}
is(scalar(@raw), 0, 'no PG_TRY/PG_CATCH/PG_FINALLY outside include/outbox/pg/guard.hpp')
  or diag(join("\n", @raw));

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('guard', test_switches => 1);
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('d', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "t"}');
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('d', 'before', '{}');
});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30),
    'a first message is delivered');

# A backend: the destination check trigger throws inside its PgTry, the entry guard raises an
# ERROR, then a PostgreSQL error of the session's own; the session goes on.
my ($ret, $out, $err) = $node->psql('postgres', q{
\set VERBOSITY verbose
SELECT 'pid ' || pg_backend_pid();
SET outbox.debug_fault = 'bad_alloc_in_pg_try';
SELECT outbox.create_destination('x', 'kafka', '{"bootstrap.servers": "127.0.0.1:9", "topic": "t"}');
SELECT 1/0;
SELECT 'pid ' || pg_backend_pid();
SELECT 'x exists: ' || count(*) FROM outbox.destinations WHERE name = 'x';
}, on_error_stop => 0);
like($err, qr/ERROR:  53200: out of memory in outbox/,
    'the C++ exception is an ERROR with SQLSTATE 53200');
like($err, qr/ERROR:  22012: division by zero/, 'the next PostgreSQL error is an ordinary ERROR');
my @pids = $out =~ /^pid (\d+)$/mg;
is(scalar(@pids), 2, 'the session answers after both errors');
is($pids[0], $pids[1], 'in the same backend process');
like($out, qr/^x exists: 0$/m, 'and the failed create_destination left nothing');

# The launcher and the worker take the setting at a reload; each one's next PgTry throws.
my $launcher_sql = q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox launcher'};
my $launcher = $node->safe_psql('postgres', $launcher_sql);
my ($worker) = worker_pids($node);
my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.debug_fault = 'bad_alloc_in_pg_try'});
$node->reload;
ok(wait_until(sub { slurp_file($node->logfile, $offset) =~ /outbox launcher: out of memory in outbox; trying again/ }, 20),
    'the launcher logs the exception of its pass');
ok(wait_until(sub { slurp_file($node->logfile, $offset) =~ /outbox worker: out of memory in outbox/ }, 20),
    'the worker logs the exception of its turn');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET outbox.debug_fault');
ok(reload_and_wait($node, 'outbox.debug_fault', ''), 'the worker has read the reset');
is($node->safe_psql('postgres', $launcher_sql), $launcher, 'the launcher is the same process');
is((worker_pids($node))[0], $worker, 'the worker is the same process');
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('d', 'after', '{}')});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30),
    'and it goes on delivering');
is(scalar(grep { $_->{key} eq 'after' } @{ $broker->consume('t') }), 1, 'the message arrived');

# The launcher still does its job: a worker that was stopped is started again.
$node->safe_psql('postgres', "SELECT pg_terminate_backend($worker)");
ok(wait_until(sub { my ($p) = worker_pids($node); $p && $p != $worker }, 30),
    'the launcher starts a new worker after one was stopped');

$node->stop;
my $log = slurp_file($node->logfile);
unlike($log, qr/error stack pointing into a finished frame/,
    'no exception ever left a PG_TRY body (the entry guards found the error stack intact)');
check_server_log($node);
$broker->stop;
done_testing();
