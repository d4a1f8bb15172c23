// The sqs kind's settings and their check (outbox-driver: URLs are parsed by libcurl).
#pragma once

#include <cstdint>
#include <string>

#include "outbox/broker_kind.hpp"
#include "outbox/config.hpp"

namespace outbox {

// Amazon SQS (or a server speaking its API). See docs/destinations.md#sqs.
struct SqsConfig : KindSettings {
    std::string queue_url;  // https://sqs.<region>.amazonaws.com/<account>/<name>
    std::string endpoint;   // where requests go: "endpoint", else the queue URL's scheme://host/
    std::string region;     // "region", else the one in an amazonaws.com queue URL's host
    bool fifo = false;      // the queue's name ends in ".fifo"
    std::string access_key_id;
    std::string secret_access_key;
    std::string session_token;  // temporary credentials (STS); empty: none
    std::string group;          // MessageGroupId of a keyless message (FIFO only); empty: refuse
    std::string
        default_topic;    // ce-type when a message has no topic; empty: the destination's name
    std::string ca_file;  // empty: the system CA store
    bool tls_verify = true;
    int max_in_flight = 0;   // messages awaiting their answer; 0: the worker's default
    int64_t timeout_ms = 0;  // one request; 0: 10 s, lowered below the lease
};

// The row's driver half (driver_side.cpp).
extern const DriverSide kSqsDriverSide;

// The region in the host of an AWS queue URL or endpoint ("sqs.eu-west-1.amazonaws.com",
// "eu-west-1.queue.amazonaws.com", also ".amazonaws.com.cn"), or "" when the host is not one.
std::string SqsRegionOfHost(const std::string &host);

// The sqs part of CheckDestinationConfig (config.hpp has the keys of every kind):
//
// "queue_url" (required: http or https, a host, a path ending in the queue's name; a name
// ending in ".fifo" is a FIFO queue), "endpoint" (http or https URL without a query: where the
// requests go, for VPC endpoints and test servers; default the queue URL's scheme, host and
// port), "region" (required unless an amazonaws.com host names it), "access_key_id" and
// "secret_access_key" (required), "session_token", "group" (FIFO queues only: the
// MessageGroupId of messages without a key, 1..128 printable ASCII), "topic" (IsValidSqsTopic),
// "ca_file" (ReadsFiles), "tls_verify", "max_in_flight" (1..10000), "timeout" (100ms..10min).
// Unknown keys are problems. The secret access key and the session token are never quoted.
void CheckSqsConfig(const JsonObject &object, const OutOfRange &out_of_range,
                    const CheckOptions &options, ConfigCheck *check);

}  // namespace outbox
