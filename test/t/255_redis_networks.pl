# outbox.broker_allowed_networks for the redis kind (BrokerScenarios::networks): a server
# address a role other than a superuser configured is checked when the driver connects (the
# driver connects the socket itself, to an address the guard allowed).
# outbox-tap: redis shared
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::networks('redis');
done_testing();
