# Per-key ordering under REPEATABLE READ and SERIALIZABLE. A producer's turn on its key's row of
# outbox.ordered_keys is taken on the row as it is now, not as the producer's snapshot saw it
# (src/pg/key_order.cpp, TakeTurnOnKeyRow), and reads it without SSI predicate locks: ordering
# adds no serialization failure (40001) to producers at any isolation level. (Before, a producer
# that waited for another one's turn on a shared key failed with "could not serialize access due
# to concurrent update" when that one committed, and SERIALIZABLE producers of a key failed with
# "read/write dependencies among transactions": in a pgbench run of 8 clients over 10 keys, 5.5%
# of the transactions at REPEATABLE READ and 6.4% at SERIALIZABLE.)
# - deterministic: a producer at REPEATABLE READ / SERIALIZABLE whose snapshot predates another
#   producer's turn on the same key waits for it and then goes on, for a key whose row exists, for
#   a key the other one is creating, and for one whose creator rolls back; ids follow commit order;
# - load: pgbench, 8 clients, every other transaction on one of 10 shared keys, the others on new
#   keys that several clients create at once, with --max-tries: at SERIALIZABLE, at REPEATABLE
#   READ, at READ COMMITTED, and all three mixed: no transaction is retried, none fails; the same
#   workload into a plain (unordered) destination and into a plain table neither;
# - a requeue at SERIALIZABLE beside producers of its key (it takes the key's row FOR UPDATE):
#   none is retried, none fails;
# - everything committed is delivered once, and for every key in id order (kcat).
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $broker = kafka_broker();
my $bootstrap = $broker->bootstrap;
my $node = outbox_node('isolation', conf => join("\n", 'max_connections = 40'));
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('ord', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "ord", "ordering": "key"}');
    SELECT outbox.create_destination('plain', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "plain"}');
    CREATE TABLE sent (event_id uuid PRIMARY KEY, id bigint NOT NULL, key text NOT NULL,
                       destination text NOT NULL DEFAULT 'ord');
    CREATE TABLE plain_table (id bigserial PRIMARY KEY, key text, payload jsonb);
    CREATE SEQUENCE n_seq;
});

# What a session's INSERT of one ordered message records.
sub produce_sql {
    my ($key, $n) = @_;
    return qq{WITH m AS (INSERT INTO outbox.messages (destination, key, payload)
        VALUES ('ord', '$key', '{"n": $n}') RETURNING event_id, id, key)
        INSERT INTO sent (event_id, id, key) SELECT * FROM m;};
}

sub waits_for_lock {
    my ($app) = @_;
    return wait_until(sub { $node->safe_psql('postgres',
        qq{SELECT wait_event_type FROM pg_stat_activity WHERE application_name = '$app'}) eq 'Lock' },
        20, "$app to wait for a lock");
}

#-------------------------------------------------------------------------------------------
# Deterministic: session A (the isolation level under test) takes its snapshot, B takes the
# key's turn, A's INSERT of the same key waits for B; B ends; A goes on and commits.
#-------------------------------------------------------------------------------------------
$node->safe_psql('postgres', q{SELECT outbox.pause('ord')});   # ids are read before delivery
for my $level ('repeatable read', 'serializable') {
    (my $tag = $level) =~ s/ /_/g;
    for my $case ('existing', 'new', 'new_rolled_back') {
        my $key = "$tag-$case";
        $node->safe_psql('postgres', produce_sql($key, 0)) if $case eq 'existing';
        my $a = $node->background_psql('postgres', on_error_stop => 0);
        my $b = $node->background_psql('postgres');
        $a->query_safe("SET application_name = 'a_$tag'");
        $a->query_safe("BEGIN ISOLATION LEVEL " . uc($level));
        $a->query_safe('SELECT count(*) FROM sent');   # A's snapshot is taken here
        $b->query_safe('BEGIN');
        $b->query_safe(produce_sql($key, 1));
        $a->query_until(qr/started/, "\\echo started\n" . produce_sql($key, 2) . "\n");
        ok(waits_for_lock("a_$tag"), "$level, $case key: A waits for B's turn on the key");
        $b->query_safe($case eq 'new_rolled_back' ? 'ROLLBACK' : 'COMMIT');
        $b->quit;
        my $after = $a->query('COMMIT');   # the INSERT's outcome comes first
        my $err = $a->{stderr};
        $a->quit;
        is($err, '', "$level, $case key: A's INSERT and COMMIT raised no error");
        my $expected = $case eq 'existing' ? '0,1,2' : $case eq 'new' ? '1,2' : '2';
        is($node->safe_psql('postgres', qq{
            SELECT string_agg(m.payload->>'n', ',' ORDER BY m.id)
              FROM outbox.messages AS m JOIN sent AS s USING (event_id) WHERE m.key = '$key'}),
            $expected, "$level, $case key: A's message is queued, after B's in id order");
        is($node->safe_psql('postgres', qq{
            SELECT count(*) FROM outbox.ordered_keys
             WHERE destination = 'ord' AND order_key = outbox._order_key('ord', '$key')}),
            '1', "$level, $case key: the key has its row");
    }
}
$node->safe_psql('postgres', q{SELECT outbox.resume('ord')});

#-------------------------------------------------------------------------------------------
# Load: 8 clients, 10 shared keys and keys made by several clients at once.
#-------------------------------------------------------------------------------------------
my $tmp = PostgreSQL::Test::Utils::tempdir();
my %level_sql = (rc => 'READ COMMITTED', rr => 'REPEATABLE READ', ser => 'SERIALIZABLE');
# One transaction of `target` (ord, plain: outbox.messages; table: plain_table) at `level`.
sub script {
    my ($target, $level, $run) = @_;
    my $key = qq{CASE WHEN n % 2 = 0 THEN 'hot-' || (n % 20) / 2 ELSE '$run-' || n / 16 END};
    my $insert = $target eq 'table'
      ? qq{INSERT INTO plain_table (key, payload) SELECT $key, jsonb_build_object('n', n)
               FROM (SELECT nextval('n_seq') AS n) s RETURNING gen_random_uuid(), id, key, 'table'}
      : qq{INSERT INTO outbox.messages (destination, key, payload)
           SELECT '$target', $key, jsonb_build_object('n', n) FROM (SELECT nextval('n_seq') AS n) s
           RETURNING event_id, id, key, destination};
    my $file = "$tmp/$target-$level-$run.sql";
    PostgreSQL::Test::Utils::append_to_file($file,
        "BEGIN ISOLATION LEVEL $level_sql{$level};\n"
          . "WITH m AS ($insert) INSERT INTO sent SELECT * FROM m;\nCOMMIT;\n");
    return $file;
}

# Runs pgbench (8 clients, 250 transactions each, failed transactions retried up to 10 times)
# with the scripts, in equal shares; returns its counts.
sub load {
    my (@files) = @_;
    my ($out, $err) = ('', '');
    IPC::Run::run(['pgbench', '-n', '-c', '8', '-j', '4', '-t', '250', '--max-tries', '10',
            (map { ('-f', $_) } @files), '-h', $node->host, '-p', $node->port, 'postgres'],
        '>', \$out, '2>', \$err);
    my %r;
    ($r{processed}) = $out =~ /number of transactions actually processed: (\d+)/;
    ($r{failed}) = $out =~ /number of failed transactions: (\d+)/;
    ($r{retried}) = $out =~ /number of transactions retried: (\d+)/;
    ($r{retries}) = $out =~ /total number of retries: (\d+)/;
    $r{out} = $out;
    $r{err} = $err;
    return \%r;
}

my $runs = 0;
my @cases = (
    [ 'ord', 'ser' ], [ 'ord', 'rr' ], [ 'ord', 'rc' ], [ 'ord', 'mixed' ],
    [ 'plain', 'ser' ], [ 'plain', 'rr' ], [ 'table', 'ser' ], [ 'table', 'rr' ]);
for my $case (@cases) {
    my ($target, $level) = @$case;
    my $run = 'r' . ++$runs;
    my @files = $level eq 'mixed'
      ? map { script($target, $_, $run) } qw(rc rr ser)
      : (script($target, $level, $run));
    my $what = "$target at " . ($level eq 'mixed' ? 'READ COMMITTED, REPEATABLE READ and SERIALIZABLE at once' : $level_sql{$level});
    my $r = load(@files);
    diag(sprintf('%s: %s transactions, %s retried (%s retries), %s failed', $what,
        map { $_ // '?' } @$r{qw(processed retried retries failed)}));
    is($r->{processed}, 2000, "$what: 2,000 transactions committed") or diag($r->{out}, $r->{err});
    is($r->{failed}, 0, "$what: none failed");
    is($r->{retried}, 0, "$what: none was retried (no serialization failure)");
}
#-------------------------------------------------------------------------------------------
# A requeue puts a dead letter back below its key's head: it takes the key's row FOR UPDATE
# and lowers the floor. At SERIALIZABLE, while producers queue messages of the same key, every
# requeue commits at the first try, and the key's messages still go in id order.
#-------------------------------------------------------------------------------------------
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('rq', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topic": "rq", "ordering": "key"}');
    SELECT outbox.pause('rq');
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'rq', 'x', jsonb_build_object('n', g) FROM generate_series(1, 100) g;
    WITH gone AS (DELETE FROM outbox.messages WHERE destination = 'rq' RETURNING *)
    INSERT INTO outbox.dead_letters (id, event_id, destination, topic, key, payload, payload_bytes,
                                     headers, created_at, attempts, reason, last_error)
    SELECT id, event_id, destination, topic, key, payload, payload_bytes, headers, created_at,
           1, 'rejected', 'a test' FROM gone;
});
my $rq_producers = start_pgbench($node, clients => 3, threads => 1, seconds => 600, script => q{
WITH m AS (INSERT INTO outbox.messages (destination, key, payload) VALUES ('rq', 'x', '{"n": 0}')
           RETURNING event_id, id, key, destination)
INSERT INTO sent SELECT * FROM m;
});
my $rq_file = "$tmp/requeue.sql";
PostgreSQL::Test::Utils::append_to_file($rq_file, q{BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT outbox.requeue(ARRAY(SELECT id FROM outbox.dead_letters WHERE destination = 'rq' ORDER BY id LIMIT 1));
COMMIT;
});
my ($rq_out, $rq_err) = ('', '');
IPC::Run::run(['pgbench', '-n', '-c', '1', '-t', '100', '--max-tries', '10', '-f', $rq_file,
        '-h', $node->host, '-p', $node->port, 'postgres'], '>', \$rq_out, '2>', \$rq_err);
$rq_producers->signal('INT');
$rq_producers->finish;
my ($rq_failed) = $rq_out =~ /number of failed transactions: (\d+)/;
my ($rq_retried) = $rq_out =~ /number of transactions retried: (\d+)/;
diag('requeue at SERIALIZABLE beside 3 producers of its key: 100 transactions, '
    . ($rq_retried // '?') . ' retried, ' . ($rq_failed // '?') . ' failed');
is($rq_failed, 0, 'requeue at SERIALIZABLE: none failed') or diag($rq_out, $rq_err);
is($rq_retried, 0, 'requeue at SERIALIZABLE: none was retried');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.dead_letters WHERE destination = 'rq'}),
    '0', 'every dead letter is back in the queue');
$node->safe_psql('postgres', q{
    INSERT INTO sent SELECT event_id, id, key, destination FROM outbox.messages
     WHERE destination = 'rq' AND payload->>'n' <> '0'});
$node->safe_psql('postgres', q{SELECT outbox.resume('rq')});

my $log = slurp_file($node->logfile);
my @failures = $log =~ /(could not serialize access[^\n]*)/g;
is(scalar(@failures), 0, 'the server log shows no serialization failure')
  or diag(join("\n", @failures[0 .. ($#failures < 9 ? $#failures : 9)]));

#-------------------------------------------------------------------------------------------
# Delivered once, in id order per key.
#-------------------------------------------------------------------------------------------
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 180),
    'everything is delivered');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'nothing is dead-lettered');
my $repeats = check_key_order($node, q{SELECT event_id, id, key FROM sent WHERE destination = 'ord'},
    $broker->consume('ord', timeout => 180), 'ordered destination');
is($repeats, 0, 'ordered destination: each message arrived once');
is(check_key_order($node, q{SELECT event_id, id, key FROM sent WHERE destination = 'rq'},
        $broker->consume('rq', timeout => 180), 'requeued key'), 0, 'requeued key: each message arrived once');
my %plain = map { $_->{headers}{ce_id} => 1 } @{ $broker->consume('plain', timeout => 180) };
is(scalar(grep { !$plain{$_} } split /\n/, $node->safe_psql('postgres',
        q{SELECT event_id FROM sent WHERE destination = 'plain'})), 0,
    'plain destination: every committed message arrived');
is($node->safe_psql('postgres', q{SELECT balance FROM outbox.conservation() WHERE destination = 'ord'}), '0',
    'ordered destination: every message is accounted for');

$node->stop;
check_server_log($node);
$broker->stop;
done_testing();
