# Crash safety for the sqs kind (BrokerScenarios::crash): every message still arrives after the
# worker is killed with SIGKILL twice mid-drain, and after the server is stopped in immediate
# mode mid-drain; duplicates are allowed (at-least-once, standard queue) and reported. 2,000
# messages a phase by default, 30,000 with OUTBOX_TEST_FULL.
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::crash('sqs', n => $ENV{OUTBOX_TEST_FULL} ? 30000 : 2000, kill_driver => 1);
done_testing();
