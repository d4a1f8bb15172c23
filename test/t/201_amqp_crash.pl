# Crash safety for the amqp kind (BrokerScenarios::crash): every message still arrives after
# the worker is killed with SIGKILL twice mid-drain of 30,000, and after the server is stopped in
# immediate mode mid-drain; duplicates are allowed (at-least-once) and reported.
# outbox-tap: rabbitmq shared
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::crash('rabbitmq');
done_testing();
