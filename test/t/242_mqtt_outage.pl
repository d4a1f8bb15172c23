# Outage for the mqtt kind (BrokerScenarios::outage): mosquitto is stopped for 30 s (15 s
# unless OUTBOX_TEST_FULL=1: the same proof in half the time) while
# producers commit 50 messages/s; nothing is dead-lettered, no attempt is spent, everything
# arrives once it is back (the verifying subscriber's persistent session keeps what arrives
# while it reconnects).
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

my $down = ($ENV{OUTBOX_TEST_FULL} // '') eq '1' ? 30 : 15;
BrokerScenarios::outage('mosquitto', down => $down, seconds => $down + 20);
done_testing();
