// A definition-time check of a destination's or subscription's config, and its answer. The
// module links no client library, so create/alter_destination and create/alter_subscription
// (src/pg/) ask outbox-driver for the check (outbox-driver --check, src/ipc/check_client.cpp),
// which answers with the kinds' own checks (src/brokers/config_service.cpp). Pure types.
#pragma once

#include <string>
#include <vector>

#include "outbox/broker_kind.hpp"
#include "outbox/config.hpp"

namespace outbox {

struct ConfigQuery {
    bool subscription = false;  // a subscription's config, else a destination's
    std::string kind;           // "kafka"...
    std::string config;         // the JSON text
    bool has_old = false;       // an UPDATE: the stored config, checked too
    std::string old_config;
    // Whether file settings must name readable files (off for a role that may not have the
    // server read files: the answer would tell it which paths exist). The old config's files
    // are never checked.
    bool check_files = true;
    ServerSettings server;
};

struct ConfigVerdict {
    std::vector<std::string> problems;  // empty when the config is valid
    std::vector<std::string> hints;
    std::vector<PrivilegedSetting> privileged;
    std::vector<std::string> hosts;  // the brokers it names (DriverSide::hosts)
    bool ok() const { return problems.empty(); }
};

struct ConfigAnswer {
    ConfigVerdict config;
    ConfigVerdict old;     // when the query had one
    ServerVerdict server;  // for a valid destination config of a kind with server rules
};

}  // namespace outbox
