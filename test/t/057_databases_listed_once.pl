# outbox.databases names databases as SQL does: a name without double quotes is folded to lower
# case, so 'app,APP' names database app twice. Before, each entry got its own workers (issue 16:
# 6 workers for app with outbox.workers = 3, and parallel queries then got no workers at all).
# Now a database is served by one set of workers however often it is listed, the duplicate is
# logged, a name that exists only in another case says how to write it, and the log says when
# outbox takes more than half of max_worker_processes.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = outbox_node('dblist', conf => join("\n",
    "outbox.databases = 'app,APP'", 'outbox.workers = 3', 'max_worker_processes = 8',
    'max_parallel_workers = 8'));
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION outbox');
my $app_workers = q{SELECT count(*) FROM outbox.workers() WHERE database = 'app'};
ok(wait_until(sub { $node->safe_psql('postgres', $app_workers) eq '3' }, 30), 'app has its 3 workers');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');  # another look by the launcher
# The launcher shows no count of its passes to wait on: 3 s is many of them.
sleep 3;
is($node->safe_psql('postgres', $app_workers), '3', 'and no more: app,APP is one database');
is($node->safe_psql('postgres', 'SELECT count(DISTINCT worker) FROM outbox.workers()'), '3',
    'one worker per index');
like(slurp_file($node->logfile),
    qr/WARNING:  outbox: outbox.databases names the same database more than once \("app"\); it is served by one set of workers/,
    'the duplicate is logged');

# Parallel query still gets its workers: 8 processes, 1 launcher + 3 outbox workers.
$node->safe_psql('postgres', 'CREATE TABLE big AS SELECT g FROM generate_series(1, 200000) g; ANALYZE big');
my $plan = $node->safe_psql('postgres', q{
    SET max_parallel_workers_per_gather = 4; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
    SET min_parallel_table_scan_size = 0;
    EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT count(*) FROM big});
my ($launched) = $plan =~ /Workers Launched: (\d+)/;
cmp_ok($launched // 0, '>=', 3, "a parallel query gets its workers (launched: " . ($launched // 'none') . ")");
unlike(slurp_file($node->logfile), qr/need \d+ of the 8 background worker processes/,
    'no warning while outbox takes half of max_worker_processes or less');

# A name that exists only in another case: not found, and the log says how to write it.
$node->safe_psql('postgres', 'CREATE DATABASE "MyDb"');
my $offset = -s $node->logfile;
$node->safe_psql('postgres', "ALTER SYSTEM SET outbox.databases = 'app, MyDb'");
$node->reload;
ok(wait_until(sub { slurp_file($node->logfile, $offset) =~
    /database "mydb" in outbox.databases does not exist\n.*DETAIL:  Database "MyDb" exists.*\n.*HINT:  To serve database "MyDb", list it in double quotes: '"MyDb"'/ }, 15),
    'MyDb without quotes is mydb, which does not exist; the log names "MyDb" and how to list it');

# More than half of max_worker_processes: said in the log.
$offset = -s $node->logfile;
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.databases = 'app, "MyDb"'});
$node->reload;
ok(wait_until(sub { slurp_file($node->logfile, $offset) =~
    /WARNING:  outbox: its launcher and workers need 7 of the 8 background worker processes \(max_worker_processes\)\n.*DETAIL:  2 database\(s\) served with outbox.workers = 3. Parallel query, logical replication and other extensions take their workers from the same 8 processes: 1 are left for them/ }, 15),
    'outbox taking 7 of 8 background worker processes is a WARNING');
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.workers() WHERE database = 'MyDb'}) eq '3' }, 30),
    '"MyDb" is served once quoted');
$node->reload;
sleep 1;   # the launcher's pass after the reload (it shows no count of its passes to wait on)
is(() = slurp_file($node->logfile, $offset) =~ /need 7 of the 8/g, 1, 'the warning is logged once, not at every pass');

$node->stop;
check_server_log($node);
done_testing();
