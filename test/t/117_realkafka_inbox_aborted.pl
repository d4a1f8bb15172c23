# Real Apache Kafka, the inbox and aborted transactions (issue 41): Kafka's own transactional
# producer (the Java client, test/tools/KafkaVerify.java) writes to one partition five
# transactions in turn, committed, aborted, committed, aborted, committed; the aborted ones'
# records are flushed to the brokers first, so they are in the log between committed ones.
# - A subscription with the default settings (isolation_level read_committed) applies exactly
#   the committed records, in order, and never an aborted one: the last transaction commits
#   after both aborted ones, so by the time its records are applied the consumer has read past
#   them.
# - A subscription with "isolation_level": "read_uncommitted" on the same topic applies the
#   aborted records too: the records are there to be read, so the first check can fail.
# - A bad isolation_level is refused with its exact error (SQLSTATE, message, detail) and
#   creates (or changes) nothing.
# outbox-tap: kafka-cluster shared
use strict;
use warnings;
use OutboxKafka;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $topic = 'inbox_aborted';
my $kafka = kafka_cluster();
# One partition: the aborted records lie between committed ones in the one log the
# subscriptions read, not on partitions of their own.
$kafka->create_topic($topic, partitions => 1);
my $bootstrap = $kafka->bootstrap;
my $node = outbox_node('realkafka_inbox_aborted');
$node->safe_psql('postgres', q{
    CREATE TABLE applied (subscription text, id text, event_id uuid, "offset" bigint);
    CREATE FUNCTION apply(m outbox.inbox_message) RETURNS void LANGUAGE sql AS $$
        INSERT INTO public.applied VALUES (m.subscription, m.payload->>'id', m.event_id, m."offset")
    $$;
});

# committed-01 .. committed-15 in three transactions, aborted-01 .. aborted-10 in two.
my @ids = map { sprintf('committed-%02d', $_) } 1 .. 15;
my @aborted = map { sprintf('aborted-%02d', $_) } 1 .. 10;
my $out = $kafka->transact($topic, 'test117-java-producer',
    'commit:' . join(',', @ids[0 .. 4]), 'abort:' . join(',', @aborted[0 .. 4]),
    'commit:' . join(',', @ids[5 .. 9]), 'abort:' . join(',', @aborted[5 .. 9]),
    'commit:' . join(',', @ids[10 .. 14]));
is($out, 'committed=15 aborted=10', "Kafka's transactional producer committed 15 records and aborted 10");
# What the brokers hold, read by Kafka's own consumer: all 25 records with read_uncommitted,
# the 15 committed ones with read_committed.
my @all = sort map { $_->{headers}{ce_id} } @{ $kafka->consume($topic) };
is_deeply(\@all, [ sort(@aborted, @ids) ], 'the topic holds all 25 records (Java consumer, read_uncommitted)');
my @committed_only = map { $_->{headers}{ce_id} } @{ $kafka->consume($topic, read_committed => 1) };
is_deeply(\@committed_only, \@ids, 'of which 15 committed, in order (Java consumer, read_committed)');

$node->safe_psql('postgres', qq{
    SELECT outbox.create_subscription('committed_only', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topics": ["$topic"]}', 'apply(outbox.inbox_message)');
    SELECT outbox.create_subscription('everything', 'kafka',
        '{"bootstrap.servers": "$bootstrap", "topics": ["$topic"], "isolation_level": "read_uncommitted"}',
        'apply(outbox.inbox_message)');
});
my $applied = sub {
    my ($sub) = @_;
    return [ split /\n/, $node->safe_psql('postgres',
        qq{SELECT id FROM applied WHERE subscription = '$sub' ORDER BY "offset"}) ];
};
ok(wait_until(sub { grep { $_ eq 'committed-15' } @{ $applied->('committed_only') } }, 120,
    'committed_only applies committed-15'), 'default subscription: the last committed record is applied');
is_deeply($applied->('committed_only'), \@ids,
    'default subscription (read_committed): exactly the 15 committed records, in offset order, none aborted');
ok(wait_until(sub { @{ $applied->('everything') } == 25 }, 120, 'everything applies 25 records'),
    'read_uncommitted subscription: 25 records applied');
is_deeply([ sort @{ $applied->('everything') } ], [ sort(@aborted, @ids) ],
    'read_uncommitted subscription: the 10 aborted records are applied too');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.inbox_dead_letters}), '0',
    'no record dead-lettered');
# The other subscription has read the whole log meanwhile: whatever the default one could still
# apply would have come by now. It applies nothing more.
ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.subscriptions()
    WHERE subscription = 'committed_only' AND lag IS NOT NULL AND lag <= 1}) eq '1' }, 60,
    'committed_only caught up'), 'default subscription: caught up (lag 0, or the final commit marker)');
is_deeply($applied->('committed_only'), \@ids, 'default subscription: still none of the aborted records');
is($node->safe_psql('postgres', q{SELECT config->>'isolation_level' FROM outbox.inbox_subscriptions
    WHERE name = 'everything'}), 'read_uncommitted', 'the setting is stored as given');

# A bad isolation_level: SQLSTATE, message and detail, and nothing created or changed.
$node->safe_psql('postgres', q{
    CREATE FUNCTION try_subscription(how text, name text, config jsonb) RETURNS text LANGUAGE plpgsql AS $$
    DECLARE s text; m text; d text;
    BEGIN
        IF how = 'create' THEN
            PERFORM outbox.create_subscription(name, 'kafka', config, 'apply(outbox.inbox_message)');
        ELSE
            PERFORM outbox.alter_subscription(name, config);
        END IF;
        RETURN 'accepted';
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL;
        RETURN s || ' | ' || m || ' | ' || d;
    END $$;
});
my $must = '"isolation_level" must be "read_committed" (the default) or "read_uncommitted"';
my %bad = (
    '"serializable"' => $must,
    '"READ_COMMITTED"' => $must,
    'true' => $must,
    'null' => $must,
);
for my $value (sort keys %bad) {
    my $config = qq{{"bootstrap.servers": "$bootstrap", "topics": ["$topic"], "isolation_level": $value}};
    is($node->safe_psql('postgres', qq{SELECT try_subscription('create', 'bad_isolation', '$config')}),
        qq{22023 | invalid configuration for kafka subscription "bad_isolation" | $bad{$value}},
        "create_subscription with isolation_level $value: 22023 and why");
}
is($node->safe_psql('postgres', qq{SELECT try_subscription('create', 'bad_isolation',
        '{"bootstrap.servers": "$bootstrap", "topics": ["$topic"], "isolation.level": "read_uncommitted"}')}),
    qq{22023 | invalid configuration for kafka subscription "bad_isolation" | "isolation.level" cannot be configured for a subscription (use "isolation_level": "read_committed" or "read_uncommitted")},
    "create_subscription with librdkafka's isolation.level: 22023, and the setting to use");
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.inbox_subscriptions WHERE name = 'bad_isolation'}),
    '0', 'no subscription was created');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.subscriptions() WHERE subscription = 'bad_isolation'}),
    '0', 'outbox.subscriptions() shows none');
is($node->safe_psql('postgres', q{SELECT try_subscription('alter', 'committed_only', '{"isolation_level": "dirty"}')}),
    qq{22023 | invalid configuration for kafka subscription "committed_only" | $must},
    'alter_subscription with isolation_level "dirty": 22023 and why');
is($node->safe_psql('postgres', q{SELECT config ? 'isolation_level' FROM outbox.inbox_subscriptions
    WHERE name = 'committed_only'}), 'f', 'the subscription is unchanged');

$node->stop;
check_server_log($node);
done_testing();
