# Retry time budget ("retry_budget"): a message an endpoint keeps refusing (HTTP 500) is
# dead-lettered once it has been failing for the budget since its first failed attempt — not
# before, and well before max_attempts — with reason max_attempts and the budget in last_error,
# checked against the sink's own record of the attempts. Outages spend none of it: a message
# that never got an answer waits out an outage three times the budget and is delivered, and a
# message that failed, then waited out a long outage, is retried after it instead of being
# dead-lettered.
# outbox-tap: alone -- asserts when a retry budget of 2 s ran out (within 2 s)
use strict;
use warnings;
use OutboxTest;
use Test::More;
use Time::HiRes qw(time sleep);

my $sink = webhook_sink();
my $node = outbox_node('retry_budget', conf => "outbox.lease_timeout = '10s'");
sub sql { return $node->safe_psql('postgres', $_[0]); }

# 1. Budget exhaustion: 2 s against an endpoint that answers 500 every time.
my $url = $sink->url('/failing;status=500');
sql(qq{SELECT count(*) FROM outbox.stats();
       SELECT outbox.create_destination('budget', 'webhook', '{"url": "$url", "retry_budget": "2s",
           "retry_base": "100ms", "retry_max": "300ms", "max_attempts": 1000}');
       INSERT INTO outbox.messages (destination, payload) VALUES ('budget', '{"n": 1}')});
ok(wait_until(sub { sql(q{SELECT count(*) FROM outbox.dead_letters WHERE destination = 'budget'}) eq '1' }, 30),
    'the failing message is dead-lettered');
my ($reason, $error, $attempts, $spent) = split /\|/, sql(q{
    SELECT reason, last_error, attempts, extract(epoch FROM failed_at - first_failed_at)
      FROM outbox.dead_letters WHERE destination = 'budget'});
is($reason, 'max_attempts', 'reason max_attempts (the retry limits are spent)');
like($error, qr/^HTTP 500.*\(attempt \d+, retry_budget of 2s spent\)$/, "last_error says the budget was spent: $error");
cmp_ok($spent, '>=', 2, "dead-lettered only after the budget: $spent s after the first failure");
cmp_ok($spent, '<', 4, 'and within a retry or two of it');
my @times = map { $_->{t} } grep { $_->{path} =~ m{^/failing} } @{ $sink->requests };
is(scalar(@times), $attempts, "the sink saw exactly the $attempts attempts");
cmp_ok($attempts, '>', 2, 'several attempts, far fewer than max_attempts (1000)');
cmp_ok($times[-1] - $times[0], '>=', 1.9, 'the endpoint was tried for the whole budget (sink clock)')
  if @times;

# A port nothing answers on, held by the test (refusing_port) until the sink starts there.
my $hold = refusing_port();
my $port = $hold->sockport;

# 2. An outage three times the budget before any answer: no budget spent, delivered after it.
my $down_url = "http://127.0.0.1:$port/later";
sql(qq{SELECT outbox.create_destination('outage', 'webhook', '{"url": "$down_url", "retry_budget": "2s",
           "retry_base": "100ms", "retry_max": "300ms"}');
       INSERT INTO outbox.messages (destination, payload) VALUES ('outage', '{"n": 2}')});
sleep(6);   # the outage, three times the budget: its length is the scenario
is(sql(q{SELECT count(*) || ' ' || count(*) FILTER (WHERE attempts = 0 AND first_failed_at IS NULL)
           FROM outbox.messages WHERE destination = 'outage'}),
    '1 1', 'after 6 s of outage (3x the budget) the message is still queued, no attempt, no failure');

# 3. Failed once, then an outage longer than the budget, then failing again: the outage is not
# counted, so the message is retried (and delivered) instead of being dead-lettered.
my $flaky_url = "http://127.0.0.1:$port/flaky;fail_first=1;fail_status=500;retry_after=2";
close $hold;
my $back = webhook_sink(port => $port);
sql(qq{SELECT outbox.create_destination('interrupted', 'webhook', '{"url": "$flaky_url",
           "retry_budget": "5s", "retry_base": "1s", "retry_max": "2s"}');
       INSERT INTO outbox.messages (destination, payload) VALUES ('interrupted', '{"n": 3}')});
ok(wait_until(sub { sql(q{SELECT count(*) FROM outbox.messages WHERE destination = 'interrupted'
                                  AND first_failed_at IS NOT NULL}) eq '1' }, 30),
    'the first attempt failed (500, Retry-After 2 s)');
$back->stop;   # the outage begins before the retry, 2 s later
$hold = refusing_port($port);
my $outage_from = time;
ok(wait_until(sub { sql(q{SELECT count(*) FROM outbox.messages WHERE destination = 'interrupted'
                                  AND last_error LIKE 'deferred%'}) eq '1' }, 30),
    'the retry found the endpoint unreachable (deferred)');
sleep(0.2) while time < $outage_from + 8;   # the outage, longer than the budget: the scenario
# The restarted sink answers the first request of each message with a 500 again.
close $hold;
$back = webhook_sink(port => $port);
ok(wait_until(sub { sql(q{SELECT count(*) FROM outbox.messages WHERE destination IN ('outage', 'interrupted')}) eq '0' }, 60),
    'both messages are delivered once the endpoint is back');
is(sql(q{SELECT count(*) FROM outbox.dead_letters WHERE destination IN ('outage', 'interrupted')}), '0',
    'neither was dead-lettered, though each waited out more than its budget');
my @flaky = map { $_->{status} } grep { $_->{path} =~ m{^/flaky} } @{ $back->requests };
is(join(',', @flaky), '500,204', 'after the outage: one more 500, retried, then delivered');
is(sql(q{SELECT string_agg(destination || '=' || balance, ',' ORDER BY destination) FROM outbox.conservation()}),
    'budget=0,interrupted=0,outage=0', 'conservation balances');

check_server_log($node);
done_testing();
