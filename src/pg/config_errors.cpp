// See include/outbox/pg/config_errors.hpp.
#include "outbox/pg/config_errors.hpp"

extern "C" {
#include "postgres.h"
#include "utils/elog.h"
}

#include "outbox/pg/guard.hpp"

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
