# A database outside outbox.databases gets no worker. CREATE EXTENSION outbox succeeds there (a
# reload can add it later), but says so: a WARNING with a hint; outbox.stats() shows the reason
# as last_error of the destinations with queued messages; the server log says it once, however
# many sessions queue messages there. Listed and reloaded, the database is served and everything
# queued meanwhile is delivered. A served database gets no warning. (Without outbox in
# shared_preload_libraries, CREATE EXTENSION is refused outright: test/t/050_lifecycle.pl.)
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('unserved', conf => "outbox.databases = 'postgres, served'");
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('postgres', 'CREATE DATABASE served');
my $reason = 'database "app" is not in outbox.databases: no worker delivers its messages';

my ($ret, $out, $err) = $node->psql('app', 'CREATE EXTENSION outbox');
is($ret, 0, 'CREATE EXTENSION outbox succeeds in a database outside outbox.databases');
like($err, qr/WARNING:  \Q$reason\E\nDETAIL:  outbox.databases is "postgres, served"\. Messages queued here wait until a worker serves the database\.\nHINT:  Add it to outbox\.databases in postgresql\.conf and reload the configuration \(SELECT pg_reload_conf\(\)\)\./,
    'with a WARNING that says no worker delivers its messages, and how to add it');
($ret, $out, $err) = $node->psql('app', 'CREATE EXTENSION IF NOT EXISTS outbox');
unlike($err, qr/WARNING/, 'CREATE EXTENSION IF NOT EXISTS of the installed extension: no second warning');
($ret, $out, $err) = $node->psql('served', 'CREATE EXTENSION outbox');
is($err, '', 'a database in outbox.databases: no warning');

for my $db ('app', 'served') {
    $node->safe_psql($db, qq{
        SELECT outbox.create_destination('d', 'kafka',
            '{"bootstrap.servers": "$bootstrap", "topic": "$db"}');
        SELECT outbox.create_destination('idle', 'kafka',
            '{"bootstrap.servers": "$bootstrap", "topic": "idle_$db"}');
    });
}
# Two sessions queue messages in app, one in served.
$node->safe_psql('app', q{INSERT INTO outbox.messages (destination, payload) SELECT 'd', jsonb_build_object('n', g) FROM generate_series(1, 3) g});
$node->safe_psql('app', q{INSERT INTO outbox.messages (destination, payload) VALUES ('d', '{"n": 4}')});
$node->safe_psql('served', q{INSERT INTO outbox.messages (destination, payload) VALUES ('d', '{"n": 1}')});
ok(wait_until(sub { $node->safe_psql('served', 'SELECT count(*) FROM outbox.messages') eq '0' }, 60),
    'the served database delivers');
sleep 1;
is($node->safe_psql('app', 'SELECT count(*) FROM outbox.messages'), '4', 'app: the 4 messages wait');
is($node->safe_psql('app', q{SELECT pending || ' ' || last_error FROM outbox.stats() WHERE destination = 'd'}),
    "4 $reason", 'app: outbox.stats() shows 4 pending and the reason as last_error');
is($node->safe_psql('app', q{SELECT last_error IS NULL FROM outbox.stats() WHERE destination = 'idle'}),
    't', 'app: a destination with nothing queued has no last_error');
is($node->safe_psql('served', q{SELECT coalesce(last_error, 'none') FROM outbox.stats() WHERE destination = 'd'}),
    'none', 'served: no last_error');
my $logged = () = slurp_file($node->logfile) =~
  /LOG:  outbox: messages are queued in database "app", which is not in outbox.databases: no worker delivers them/g;
is($logged, 1, 'the server log says it once for the two sessions');
unlike(slurp_file($node->logfile), qr/messages are queued in database "served"/, 'nothing is logged for the served database');

# Listed and reloaded: served, and what waited is delivered.
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.databases = 'postgres, served, app'; SELECT pg_reload_conf()});
ok(wait_until(sub { $node->safe_psql('app', 'SELECT count(*) FROM outbox.messages') eq '0' }, 60),
    'app, once listed: everything queued meanwhile is delivered');
is($node->safe_psql('app', q{SELECT coalesce(last_error, 'none') || ' ' || delivered_total FROM outbox.stats() WHERE destination = 'd'}),
    'none 4', 'app: no last_error, 4 delivered');
is(scalar(@{ $broker->consume('app') }), 4, 'the broker holds the 4 messages of app');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
