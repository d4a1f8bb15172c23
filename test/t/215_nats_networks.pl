# outbox.broker_allowed_networks for the nats kind (BrokerScenarios::networks): a broker
# address a role other than a superuser configured is checked when the driver connects.
# outbox-tap: nats shared
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::networks('nats');
done_testing();
