// The errors a definition-time config check raises, the same for destinations
// (destinations.cpp) and subscriptions (subscriptions.cpp): the settings the caller may not
// choose (42501), then every problem of the config in one error (22023). Both throw PgError.
#pragma once

#include <string>
#include <vector>

#include "outbox/config.hpp"
#include "outbox/config_query.hpp"

namespace outbox::pg {

// The definition-time check of a destination's or subscription's config, by the kind's own
// check (config_check.cpp). Throws a PgError when it cannot be had.
ConfigAnswer CheckConfig(const ConfigQuery &query);

// Lines joined with newlines, for an errdetail.
std::string JoinLines(const std::vector<std::string> &lines);

// Throws 42501 ("permission denied to configure <what>") when any of `chosen` needs a right the
// caller lacks: running code (a superuser) or reading files (pg_read_server_files).
// `extra_hint`, when given, is appended to the hint.
void ThrowIfSettingsDenied(const std::string &what, const std::vector<PrivilegedSetting> &chosen,
                           bool runs_code, bool reads_files, const char *extra_hint = nullptr);

// Throws 42501 when a broker host of `hosts` that `old_hosts` did not have is a literal
// address (or localhost) that outbox.broker_allowed_networks does not allow
// (broker_address.hpp); the caller decides whether the config is guarded at all.
void ThrowIfBrokerHostRefused(const std::string &what, const std::vector<std::string> &hosts,
                              const std::vector<std::string> &old_hosts);

// Throws 22023 ("invalid configuration for <what>") with every problem in the detail and the
// hints after the usual one, which names `docs`, the page (and anchor) of the manual that lists
// the settings, e.g. "docs/destinations.md#kafka"; returns when there are none.
void ThrowIfConfigProblems(const std::string &what, const std::vector<std::string> &problems,
                           const std::vector<std::string> &hints, const char *docs);

}  // namespace outbox::pg
