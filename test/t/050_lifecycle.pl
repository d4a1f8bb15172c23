# Worker lifecycle: loading rules, several databases (with and without the extension, and one
# that does not exist), reloads (batch_size, poll_interval), DROP DATABASE and DROP EXTENSION
# while the worker runs, and a clean shutdown that hands every lease back in under 5 s.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

# Without shared_preload_libraries the extension refuses to load, and says what to do.
my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->start;
my ($ret, $stdout, $stderr) = $plain->psql('postgres', 'CREATE EXTENSION outbox');
isnt($ret, 0, 'CREATE EXTENSION fails when outbox is not preloaded');
like($stderr, qr/outbox must be loaded via shared_preload_libraries/, 'with a clear message');
like($stderr, qr/HINT:  Add outbox to shared_preload_libraries/, 'and a hint');
$plain->stop;

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('life', test_switches => 1, conf => "outbox.databases = 'postgres, app, noext, missing'");
$node->safe_psql('postgres', 'CREATE DATABASE app; CREATE DATABASE noext;');
$node->safe_psql('app', 'CREATE EXTENSION outbox');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');  # the launcher looks again at once

for my $db ('postgres', 'app') {
    $node->safe_psql($db, qq{
        SELECT outbox.create_destination('d_$db', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "t_$db"}');
        INSERT INTO outbox.messages (destination, key, payload) VALUES ('d_$db', '$db-1', '{}');
    });
}
for my $db ('postgres', 'app') {
    ok(wait_until(sub { grep { $_->{key} eq "$db-1" } @{ $broker->consume("t_$db") } }, 30),
        "database $db: its worker delivers to its own destination");
}
# Both idle between their polls (each a short 'claiming', which one sample can catch).
my $workers = '';
wait_until(sub {
    $workers = $node->safe_psql('postgres', "SELECT string_agg(database || ':' || state, ',' ORDER BY database) FROM outbox.workers() WHERE database <> 'noext'");
    $workers eq 'app:idle,postgres:idle' }, 10);
is($workers, 'app:idle,postgres:idle', 'outbox.workers() lists one worker per served database');

# A database without the extension, or that does not exist, is reported once, not in a loop.
$node->safe_psql('postgres', 'SELECT pg_reload_conf()') for 1 .. 3;
# A reload starts a pass of the launcher at once; it shows no count of its passes to wait on,
# so this waits long enough for several.
sleep 2;
my $log = slurp_file($node->logfile);
my $noext = () = $log =~ /extension "outbox" is not installed in database "noext"/g;
my $missing = () = $log =~ /database "missing" in outbox.databases does not exist/g;
is($noext, 1, 'a database without the extension is logged once');
is($missing, 1, 'a database that does not exist is logged once');

# Reload: batch_size governs how much one claim takes.
sub drain_cycles {
    my ($n) = @_;
    my $before = $node->safe_psql('postgres', "SELECT cycles FROM outbox.workers() WHERE database = 'postgres'");
    $node->safe_psql('postgres', qq{
        SELECT outbox.pause('d_postgres');
        INSERT INTO outbox.messages (destination, key, payload)
        SELECT 'd_postgres', 'batch-' || g || '-' || random(), '{}' FROM generate_series(1, $n) g;
        SELECT outbox.resume('d_postgres');
    });
    wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 60)
      or return -1;
    return $node->safe_psql('postgres', "SELECT cycles FROM outbox.workers() WHERE database = 'postgres'") - $before;
}
# On the leased path (outbox.debug_pause set to a phase that does not exist: no pause), where a
# cycle makes one claim of at most batch_size rows. The fast path claims batch after batch for
# up to 50 ms in one cycle, so its cycles count time, not claims: with a reloaded driver now
# woken by its acknowledgements (issue 16, item 11: it used to wait out a timer per claim),
# 2,000 messages took 8 cycles at batch_size 20 there, against 6 at 2000.
$node->append_conf('postgresql.conf', "outbox.batch_size = 2000\noutbox.debug_pause = 'no-such-phase'\n");
$node->reload;
my $big = drain_cycles(2000);
$node->append_conf('postgresql.conf', "outbox.batch_size = 20\n");
$node->reload;
my $small = drain_cycles(2000);
diag("2,000 messages took $big cycles with batch_size 2000 and $small with batch_size 20");
cmp_ok($big, '>', 0, 'with batch_size 2000 the messages are drained');
cmp_ok($small, '>=', 5 * $big, 'after a reload to batch_size 20 it takes many times more cycles');
$node->append_conf('postgresql.conf', "outbox.debug_pause = ''\n");
$node->reload;

# Reload: poll_interval is the safety net that finds due messages nobody announced.
$node->append_conf('postgresql.conf', "outbox.poll_interval = '1h'\n");
# (With polls an hour apart, the reload's own turn may be the only one: one turn to wait for,
# counted from before the reload.)
ok(reload_and_wait($node, 'outbox.poll_interval', '1h', turns => 1), 'the worker has read poll_interval 1h');
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload, available_at)
    VALUES ('d_postgres', 'scheduled', '{}', now() + interval '1 second')});
# Without polls the worker has no turns to count: 2 s after the message became due is the
# check that nothing picked it up.
sleep 3;
is($node->safe_psql('postgres', "SELECT count(*) FROM outbox.messages WHERE key = 'scheduled'"), '1',
    'with poll_interval 1h a message that became due is not picked up without a wake-up');
$node->append_conf('postgresql.conf', "outbox.poll_interval = '200ms'\n");
$node->reload;
ok(wait_until(sub { $node->safe_psql('postgres', "SELECT count(*) FROM outbox.messages WHERE key = 'scheduled'") eq '0' }, 10),
    'after a reload to 200ms it is delivered at once');

# DROP DATABASE of a served database succeeds while its worker runs.
my ($app_pid) = split /\n/, $node->safe_psql('postgres', "SELECT pid FROM outbox.workers() WHERE database = 'app'");
ok($app_pid, "the app worker runs (pid $app_pid)");
my $t0 = time;
$node->safe_psql('postgres', 'DROP DATABASE app');
pass(sprintf('DROP DATABASE app succeeded in %.1f s', time - $t0));
ok(wait_until(sub { $node->safe_psql('postgres', "SELECT count(*) FROM outbox.workers() WHERE database = 'app'") eq '0' }, 10),
    'and its worker is gone');

# DROP EXTENSION while the worker has messages in flight (slow broker) does not crash it.
$broker->ctl('rtt all 1500');
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) SELECT 'd_postgres', 'inflight-' || g, '{}' FROM generate_series(1, 50) g});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT in_flight FROM outbox.workers() WHERE database = $$postgres$$') > 0 }, 10),
    'messages are in flight');
my ($pg_pid) = split /\n/, $node->safe_psql('postgres', "SELECT pid FROM outbox.workers() WHERE database = 'postgres'");
$node->safe_psql('postgres', 'SET outbox.drop_nonempty = on; DROP EXTENSION outbox');
# The messages in flight are answered 1.5 s after they were sent (rtt), which a worker that
# mishandled the dropped extension would crash on; outbox.workers() went with the extension,
# so there is no count of its turns to wait on: 3 s covers the answers.
sleep 3;
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $pg_pid"), '1',
    'after DROP EXTENSION the same worker is still running');
$broker->ctl('rtt all 0');
$node->safe_psql('postgres', qq{
    CREATE EXTENSION outbox;
    SELECT outbox.create_destination('again', 'kafka', '{"bootstrap.servers": "$bootstrap", "topic": "again"}');
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('again', 'after-recreate', '{}');
});
ok(wait_until(sub { grep { $_->{key} eq 'after-recreate' } @{ $broker->consume('again') } }, 30),
    'after CREATE EXTENSION again it delivers');

# A clean shutdown: in-flight messages are handed back at once, within 5 s.
$broker->ctl('rtt all 4000');
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) SELECT 'again', 'slow-' || g, '{}' FROM generate_series(1, 200) g});
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT in_flight FROM outbox.workers()') > 0 }, 10),
    'messages are in flight to a slow broker');
$t0 = time;
$node->stop('fast');
my $took = time - $t0;
cmp_ok($took, '<', 5, sprintf('the server stopped in %.1f s', $took));
$node->append_conf('postgresql.conf', "outbox.databases = ''\n");
$node->start;
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages WHERE lease_token IS NOT NULL'), '0',
    'no message is left leased after the shutdown');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages WHERE attempts > 0'), '0',
    'and no attempt was charged for the hand-back');
$broker->ctl('rtt all 0');
$node->append_conf('postgresql.conf', "outbox.databases = 'postgres'\n");
$node->restart;
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 30),
    'after a restart they are delivered');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
