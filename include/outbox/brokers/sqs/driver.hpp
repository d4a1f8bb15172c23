// SQS driver: SendMessageBatch requests (up to 10 messages each) over one libcurl multi handle
// per destination, signed with libcurl's AWS Signature Version 4, many in flight on kept-alive
// connections. A message counts as delivered only when SQS lists it as Successful.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "outbox/brokers/sqs/config.hpp"
#include "outbox/driver.hpp"
#include "outbox/network_policy.hpp"

namespace outbox {

struct SqsDriverOptions {
    SqsConfig config;
    std::string destination;  // for log lines and the ce-type fallback
    std::string source;       // CloudEvents source
    // One request, with its wait for a connection, ends within this (the config's timeout
    // when set, lowered below the answer timeout).
    int64_t timeout_ms = 10000;
    size_t max_in_flight = 1000;     // messages awaiting their answer
    BrokerAddressRule address_rule;  // outbox.broker_allowed_networks, when guarded
};

// A ready driver, or nullptr with *error set (libcurl could not be set up). Calls
// EnsureCurlGlobalInit, so it must run on the process's main thread.
std::unique_ptr<Driver> MakeSqsDriver(const SqsDriverOptions &options, std::string *error);

}  // namespace outbox
