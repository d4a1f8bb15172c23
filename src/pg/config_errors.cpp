// See include/outbox/pg/config_errors.hpp.
#include "outbox/pg/config_errors.hpp"

#include "outbox/broker_address.hpp"

extern "C" {
#include "postgres.h"
#include "utils/elog.h"
}

#include "outbox/pg/guard.hpp"
#include "outbox/pg/settings.hpp"

namespace outbox::pg {

std::string JoinLines(const std::vector<std::string> &lines) {
    std::string text;
    for (const std::string &line : lines) {
        if (!text.empty())
            text += '\n';
        text += line;
    }
    return text;
}

void ThrowIfSettingsDenied(const std::string &what, const std::vector<PrivilegedSetting> &chosen,
                           bool runs_code, bool reads_files, const char *extra_hint) {
    std::vector<std::string> denied;
    bool code_denied = false;
    for (const PrivilegedSetting &setting : chosen) {
        bool allowed = setting.access == ServerAccess::RunsCode ? runs_code : reads_files;
        if (!allowed) {
            denied.push_back(setting.problem);
            code_denied = code_denied || setting.access == ServerAccess::RunsCode;
        }
    }
    if (denied.empty())
        return;
    std::string hint = denied.size() == 1 ? "Leave it out, or ask a superuser to set it"
                                          : "Leave them out, or ask a superuser to set them";
    hint += code_denied ? "." : " or to grant you pg_read_server_files.";
    if (extra_hint != nullptr)
        hint += std::string(" ") + extra_hint;
    throw PgError(ERRCODE_INSUFFICIENT_PRIVILEGE, "permission denied to configure " + what,
                  JoinLines(denied), hint);
}

void ThrowIfBrokerHostRefused(const std::string &what, const std::vector<std::string> &hosts,
                              const std::vector<std::string> &old_hosts) {
    std::vector<Network> allowed;
    std::string error;
    if (!ParseNetworkList(setting_broker_allowed_networks ? setting_broker_allowed_networks : "",
                          &allowed, &error))
        allowed.clear();  // the setting's check hook makes this impossible
    std::optional<HostRefusal> refused = RefusedNewBrokerHost(hosts, old_hosts, allowed);
    if (!refused)
        return;
    throw PgError(ERRCODE_INSUFFICIENT_PRIVILEGE,
                  "permission denied to configure " + what + ": its broker is at " + refused->what +
                      ", which is not allowed by outbox.broker_allowed_networks",
                  "That is " + WithArticle(refused->kind) +
                      " address. Brokers that a role other than a superuser configures may be "
                      "at loopback, unspecified, private, link-local, multicast, reserved and "
                      "IPv4-mapped addresses only where a superuser allows them.",
                  "Use the broker's public address or name, or ask a superuser to add its "
                  "network to outbox.broker_allowed_networks (postgresql.conf, then a reload).");
}

void ThrowIfConfigProblems(const std::string &what, const std::vector<std::string> &problems,
                           const std::vector<std::string> &hints, const char *docs) {
    if (problems.empty())
        return;
    std::string hint = problems.size() == 1
                           ? "Fix the setting above; "
                           : "Fix the " + std::to_string(problems.size()) + " settings above; ";
    hint += std::string(docs) + " lists every setting.";
    for (const std::string &extra : hints)
        hint += " " + extra;
    throw PgError(ERRCODE_INVALID_PARAMETER_VALUE, "invalid configuration for " + what,
                  JoinLines(problems), hint);
}

}  // namespace outbox::pg
