# outbox.broker_allowed_networks for the mqtt kind (BrokerScenarios::networks): a role other
# than a superuser's destination on 127.0.0.1 delivers only while the setting lists it; refused,
# its messages wait without spending an attempt, the server log says which address and why.
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::networks('mosquitto');
done_testing();
