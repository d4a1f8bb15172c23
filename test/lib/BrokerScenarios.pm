# The Kafka crash, outage and ordering scenarios (test/t/020, 030, 060) for the amqp and nats
# destination kinds, against a real RabbitMQ or NATS JetStream server run by the test, checked
# by an independent client (pika, nats-py) by event id. Each test/t/2x*.pl file runs one of
# them for one kind; every scenario ends with fault-matrix lines (OutboxTest::fault_summary).
package BrokerScenarios;

use strict;
use warnings;

use IPC::Run;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

# Event ids recorded by the producers for one destination.
sub produced_ids {
    my ($node, $dest) = @_;
    return [ split /\n/,
        $node->safe_psql('postgres', "SELECT event_id FROM produced WHERE dest = '$dest'") ];
}

# kill -9 of the worker twice mid-drain, then an immediate stop of the server mid-drain:
# nothing lost, duplicates reported. Options: n (messages per phase, 30,000), kill_driver (also
# kill -9 the worker's outbox-driver between the two worker kills).
sub crash {
    my ($server_kind, %o) = @_;
    my $server = OutboxTest::BrokerNode->start($server_kind);
    my $kind = $server->destination_kind;
    my $node = outbox_node("${kind}_crash", conf => join("\n", 'log_statement = none',
        'restart_after_crash = on', "outbox.lease_timeout = '5s'", 'outbox.batch_size = 200'));
    my $n = $o{n} // 30000;
    $node->safe_psql('postgres', 'CREATE TABLE produced (dest text, event_id uuid PRIMARY KEY)');
    for my $dest ('crash1', 'crash2') {
        my $config = $server->prepare($dest);
        $node->safe_psql('postgres', "SELECT outbox.create_destination('$dest', '$kind', '$config')");
    }
    my $queue_batch = sub {
        my ($dest) = @_;
        $node->safe_psql('postgres', qq{
            SELECT outbox.pause('$dest');
            WITH m AS (
                INSERT INTO outbox.messages (destination, key, payload)
                SELECT '$dest', '$dest-' || g, jsonb_build_object('n', g)
                  FROM generate_series(1, $n) g
                RETURNING destination, event_id)
            INSERT INTO produced SELECT * FROM m;
            SELECT outbox.resume('$dest');
        });
    };

    # 1. kill -9 the worker twice mid-drain.
    $queue_batch->('crash1');
    my $killed = 0;
    my @kills = $o{kill_driver}
      ? ([ worker => int($n * 3 / 4) ], [ driver => int($n / 2) ], [ worker => int($n / 4) ])
      : ([ worker => int($n * 2 / 3) ], [ worker => int($n / 3) ]);
    for my $kill (@kills) {
        my ($what, $below) = @$kill;
        ok(wait_until(sub { queued($node, 'crash1', restarting => 1) < $below }, 180), "drain passed $below remaining");
        if ($what eq 'driver') {
            my ($wpid, $dpid) = split /\|/, $node->safe_psql('postgres',
                'SELECT pid || \'|\' || coalesce(driver_pid, 0) FROM outbox.workers() LIMIT 1');
            my $remaining = queued($node, 'crash1', restarting => 1);
            ok($dpid > 0 && kill('KILL', $dpid), "outbox-driver $dpid killed with SIGKILL at $remaining remaining");
            ok(wait_until(sub {
                my $d = $node->safe_psql('postgres', "SELECT coalesce(driver_pid, 0) FROM outbox.workers() WHERE pid = $wpid");
                $d ne '' && $d != 0 && $d != $dpid }, 60), 'the worker started a new outbox-driver');
            next;
        }
        my ($pid) = worker_pids($node);
        my $remaining = queued($node, 'crash1', restarting => 1);
        ok(kill('KILL', $pid), "worker $pid killed with SIGKILL at $remaining remaining");
        $killed++;
        ok(wait_until(sub { my @p = eval { worker_pids($node) }; @p && $p[0] != $pid }, 60),
            'a new worker took over');
    }
    ok(wait_until(sub { queued($node, 'crash1', restarting => 1) == 0 }, 300), 'crash1: drained after two kills');
    is($node->safe_psql('postgres', "SELECT count(*) FROM outbox.dead_letters"), '0',
        'crash1: nothing dead-lettered');
    my $r = fault_summary("${kind}_worker_kill", produced => produced_ids($node, 'crash1'),
        received => $server->event_ids($server->container('crash1')));
    is($r->{distinct}, $n, "crash1: all $n event ids arrived");

    # 2. Immediate stop (a server crash) mid-drain, then start again.
    $queue_batch->('crash2');
    ok(wait_until(sub { queued($node, 'crash2', restarting => 1) < int($n * 2 / 3) }, 180), 'crash2: drain under way');
    $node->stop('immediate');
    $node->start;
    ok(wait_until(sub { queued($node, 'crash2', restarting => 1) == 0 }, 300), 'crash2: drained after an immediate stop');
    is($node->safe_psql('postgres', "SELECT count(*) FROM outbox.dead_letters"), '0',
        'crash2: nothing dead-lettered');
    $r = fault_summary("${kind}_immediate_stop", produced => produced_ids($node, 'crash2'),
        received => $server->event_ids($server->container('crash2')));
    is($r->{distinct}, $n, "crash2: all $n event ids arrived");

    $node->stop;
    check_server_log($node, killed => $killed);
    $server->stop;
}

# The broker stopped for 20 s while producers commit 50 messages/s: nothing dead-lettered (with
# max_attempts 2), no attempt spent, everything arrives once it is back. Options: down (the
# outage's seconds, 20), seconds (the producers', 40).
sub outage {
    my ($server_kind, %o) = @_;
    my $down_for = $o{down} // 20;
    my $server = OutboxTest::BrokerNode->start($server_kind);
    my $kind = $server->destination_kind;
    my $node = outbox_node("${kind}_outage", conf => join("\n", 'log_statement = none',
        "outbox.lease_timeout = '8s'", 'outbox.max_attempts = 2'));
    my $config = $server->prepare('flow');
    $node->safe_psql('postgres', qq{
        SELECT outbox.create_destination('flow', '$kind', '$config');
        CREATE TABLE produced (dest text, event_id uuid PRIMARY KEY);
        CREATE SEQUENCE n_seq;
    });
    my $pgbench = start_pgbench($node, clients => 2, rate => 50, seconds => $o{seconds} // 40, script => q{
WITH m AS (
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'flow', 'k' || n, jsonb_build_object('n', n) FROM (SELECT nextval('n_seq') AS n) s
    RETURNING destination, event_id)
INSERT INTO produced SELECT * FROM m;
});
    ok(wait_until(sub { stats_row($node, 'flow')->{delivered_total} >= 50 }, 30), 'messages flow');
    $server->down;
    my $down_at = time;
    diag("$server_kind stopped");
    ok(wait_until(sub {
        my $s = stats_row($node, 'flow');
        $s->{pending} > 100 && ($s->{last_error} // '') =~ /unreachable/ }, 20),
        'during the outage messages wait as pending, last_error says the destination is unreachable')
      or diag(explain(stats_row($node, 'flow')));
    my $during = stats_row($node, 'flow');
    diag("last_error during the outage: $during->{last_error}");
    unlike($during->{last_error}, qr/guest:guest|outbox-secret/, 'last_error does not show the credentials');
    sleep($down_for - (time - $down_at)) if time - $down_at < $down_for;   # the outage's length: the scenario
    $server->up;
    diag(sprintf('%s started again after %.1f s', $server_kind, time - $down_at));
    ok($pgbench->finish, 'the producers ran throughout') or diag(${ $pgbench->{outbox_err} });

    ok(wait_until(sub {
        $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 120),
        'everything is delivered once the broker is back');
    my $s = stats_row($node, 'flow');
    is($s->{dead}, 0, 'nothing dead-lettered (max_attempts is 2)')
      or diag($node->safe_psql('postgres',
        'SELECT reason, last_error, count(*) FROM outbox.dead_letters GROUP BY 1, 2'));
    is($s->{failed_total}, 0, 'no attempt was spent on the outage');
    cmp_ok($s->{deferred_total}, '>', 0, 'messages were deferred: ' . $s->{deferred_total});
    my $produced = produced_ids($node, 'flow');
    my $r = fault_summary("${kind}_broker_stopped_${down_for}s", produced => $produced,
        received => $server->event_ids($server->container('flow')));
    is($r->{distinct}, scalar(@$produced), 'all ' . scalar(@$produced) . ' messages arrived');

    $node->stop;
    check_server_log($node);
    $server->stop;
}

# Per-key ordering while the broker is restarted twice under production: for every key, first
# arrivals are in id order, and nothing is lost. Options: seconds (the producers', 40; the two
# restarts are spread over them).
sub ordering {
    my ($server_kind, %o) = @_;
    my $seconds = $o{seconds} // 40;
    my $server = OutboxTest::BrokerNode->start($server_kind);
    my $kind = $server->destination_kind;
    my $node = outbox_node("${kind}_ordering", conf => join("\n", 'log_statement = none',
        "outbox.lease_timeout = '8s'", "outbox.retry_base = '50ms'", "outbox.retry_max = '500ms'",
        'outbox.max_attempts = 1000'));
    my $config = $server->prepare('ord', ordering => 'key');
    $node->safe_psql('postgres', qq{
        SELECT outbox.create_destination('ord', '$kind', '$config');
        CREATE TABLE produced (dest text, event_id uuid PRIMARY KEY, id bigint, key text);
        CREATE SEQUENCE n_seq;
    });
    my $pgbench = start_pgbench($node, clients => 4, rate => 200, seconds => $seconds, script => q{
WITH m AS (
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'ord', 'k' || (n % 50), jsonb_build_object('n', n) FROM (SELECT nextval('n_seq') AS n) s
    RETURNING destination, event_id, id, key)
INSERT INTO produced SELECT * FROM m;
});
    # The restarts spread over the producers' 40 s: 6 s of production, 3 s down, twice (the
    # scenario's schedule, not waits).
    for my $round (1, 2) {
        sleep 6 * $seconds / 40;
        $server->down;
        diag("$server_kind stopped (round $round)");
        sleep 3 * $seconds / 40;
        $server->up;
        diag("$server_kind started (round $round)");
    }
    ok($pgbench->finish, 'the producers ran throughout') or diag(${ $pgbench->{outbox_err} });
    ok(wait_until(sub {
        $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 180),
        'everything delivered');
    is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0',
        'nothing dead-lettered');

    my (%id_of, %key_of);
    for (split /\n/, $node->safe_psql('postgres', 'SELECT event_id, id, key FROM produced')) {
        my ($e, $id, $k) = split /\|/;
        ($id_of{$e}, $key_of{$e}) = ($id, $k);
    }
    my $got = $server->received($server->container('ord'));
    # nats and sqs (a FIFO queue's SequenceNumber) say in which order the server took them.
    my @in_order = $kind eq 'nats' || $kind eq 'sqs' ? sort { $a->{seq} <=> $b->{seq} } @$got : @$got;
    my $id_header = $server->id_header;
    my (%first, %last, %late);
    for my $m (@in_order) {
        my $e = $m->{headers}{$id_header} // next;
        next if $first{$e}++;
        my $k = $key_of{$e} // next;
        $late{$k}++ if defined $last{$k} && $id_of{$e} < $last{$k};
        $last{$k} = $id_of{$e} if !defined $last{$k} || $id_of{$e} > $last{$k};
    }
    is(scalar(keys %late), 0, 'for every key, first arrivals are in id order')
      or diag(explain(\%late));
    my @ids = keys %id_of;
    my $r = fault_summary("${kind}_ordering_broker_restarts", produced => \@ids,
        received => [ map { $_->{headers}{$id_header} // () } @$got ]);
    is($r->{distinct}, scalar(@ids), 'all ' . scalar(@ids) . ' messages arrived');

    $node->stop;
    check_server_log($node);
    $server->stop;
}

# outbox.broker_allowed_networks for the amqp and nats kinds (issue 35): a destination on
# 127.0.0.1 that a role other than a superuser created delivers while the setting lists
# 127.0.0.0/8; once a reload empties it, the driver refuses the address before connecting
# (the server log says which and why), the messages wait without spending an attempt and show
# only that the broker cannot be reached; a superuser's destination on the same server goes
# on; listed again, everything arrives once.
sub networks {
    my ($server_kind) = @_;
    my $server = OutboxTest::BrokerNode->start($server_kind);
    my $kind = $server->destination_kind;
    my $node = outbox_node("${kind}_networks", conf => join("\n",
        "outbox.broker_allowed_networks = '127.0.0.0/8'", "outbox.lease_timeout = '6s'") . "\n");
    my $tenant_config = $server->prepare('tenant');
    my $own_config = $server->prepare('own');
    $node->safe_psql('postgres', qq{
        CREATE ROLE platform;
        GRANT USAGE ON SCHEMA outbox TO platform;
        GRANT EXECUTE ON FUNCTION outbox.create_destination(text, text, jsonb) TO platform;
        SET ROLE platform;
        SELECT outbox.create_destination('tenant', '$kind', '$tenant_config');
        RESET ROLE;
        SELECT outbox.create_destination('own', '$kind', '$own_config');
        CREATE TABLE produced (dest text, event_id uuid PRIMARY KEY);
    });
    my $produce = sub {
        my ($dest, $count) = @_;
        $node->safe_psql('postgres', qq{
            WITH m AS (
                INSERT INTO outbox.messages (destination, payload)
                SELECT '$dest', jsonb_build_object('n', g) FROM generate_series(1, $count) g
                RETURNING destination, event_id)
            INSERT INTO produced SELECT * FROM m});
    };
    my $log_offset = -s $node->logfile;
    $produce->('tenant', 5);
    ok(wait_until(sub { queued($node, 'tenant') == 0 }, 60), "$kind: listed, the tenant's destination delivers");

    $node->adjust_conf('postgresql.conf', 'outbox.broker_allowed_networks', "''");
    $node->reload;
    ok(wait_until(sub { $node->safe_psql('postgres', 'SHOW outbox.broker_allowed_networks') eq '' }, 30),
        "$kind: the reload emptied the list");
    $produce->('tenant', 5);
    $produce->('own', 5);
    ok(wait_until(sub { queued($node, 'own') == 0 }, 60),
        "$kind: a superuser's destination on the same server still delivers");
    ok(wait_until(sub { (stats_row($node, 'tenant')->{last_error} // '') =~ /deferred/ }, 60),
        "$kind: the tenant's messages are deferred");
    is(stats_row($node, 'tenant')->{last_error},
        'deferred, destination unreachable: why is in the server log (shown here only for brokers a '
        . 'superuser configured)',
        "$kind: the tenant sees that its broker cannot be reached, not what answered there");
    is($node->safe_psql('postgres', q{SELECT count(*) || '/' || max(attempts) FROM outbox.messages WHERE destination = 'tenant'}),
        '5/0', "$kind: its 5 messages wait, no attempt spent");
    ok(wait_until(sub { slurp_file($node->logfile, $log_offset) =~
            /tenant: .*not connecting to .*127\.0\.0\.1 is a loopback address, which outbox\.broker_allowed_networks does not allow/ }, 30),
        "$kind: the server log says which address was refused and why");

    $node->adjust_conf('postgresql.conf', 'outbox.broker_allowed_networks', "'127.0.0.1/32'");
    $node->reload;
    ok(wait_until(sub { queued($node, 'tenant') == 0 }, 90), "$kind: listed again, the waiting messages are delivered");
    my $r = fault_summary("${kind}_broker_networks", produced => produced_ids($node, 'tenant'),
        received => $server->event_ids($server->container('tenant')));
    is($r->{distinct}, 10, "$kind: all 10 of the tenant's messages arrived");
    is($r->{duplicates}, 0, "$kind: none twice");

    $node->stop;
    check_server_log($node);
    $server->stop;
}

1;
