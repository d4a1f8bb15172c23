# A webhook destination whose endpoint hangs does not delay another destination's delivery:
# 20 requests to an endpoint that answers after 4 s are in flight (a request may take at most
# half of the 10 s lease; all 20 at once, so that each gets its answer within that budget
# rather than waiting for a connection) while 20 messages to a fast endpoint are delivered
# within one cycle (under 1 s, by the sink's own clock), and then every slow one arrives.
# outbox-tap: alone -- asserts a delivery within one cycle (under 1 s)
use strict;
use warnings;
use OutboxTest;
use Test::More;
use Time::HiRes qw(time);

my $sink = webhook_sink();
my $slow = '/slow;delay_ms=4000';
my $node = outbox_node('slow_endpoint', conf => "outbox.lease_timeout = '10s'");

$sink->create_destination($node, 'slow', $slow, timeout_ms => 5000, max_in_flight => 20);
$sink->create_destination($node, 'fast', '/fast');
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, payload) SELECT 'slow', jsonb_build_object('n', g) FROM generate_series(1, 20) g});
ok(wait_until(sub { stats_row($node, 'slow')->{in_flight} == 20 }, 10), 'the 20 slow requests are in flight');
my $t0 = time;
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, payload) SELECT 'fast', jsonb_build_object('n', g) FROM generate_series(1, 20) g});
ok(wait_until(sub { scalar(@{ $sink->requests_for('/fast') }) == 20 }, 10), 'the fast destination is served while the slow one hangs');
# Measured with the sink's own clock: when the last of them arrived.
my ($last) = sort { $b <=> $a } map { $_->{t} } @{ $sink->requests_for('/fast') };
my $took = $last - $t0;
cmp_ok($took, '<', 1.0, sprintf('within one cycle: %.3f s', $took));

ok(wait_until(sub { $node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages}) eq '0' }, 30),
    'the slow destination delivers its 20 too');
my %ids = map { $_->{headers}{'webhook-id'} => 1 } grep { $_->{status} < 300 } @{ $sink->requests_for($slow) };
is(scalar(keys %ids), 20, 'the sink answered each of the 20 slow messages');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.dead_letters}), '0', 'nothing dead-lettered');

$node->stop;
check_server_log($node);
$sink->stop;
done_testing();
