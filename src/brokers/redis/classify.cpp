// The redis kind's outcome classification. Design §1 "Guarantees": a Defer must only be returned
// when the destination certainly did not act on the message, because a Defer never spends the
// retry budget; anything doubtful is a Retry, which does.
#include "outbox/brokers/redis/classify.hpp"

#include <string_view>

namespace outbox {

namespace {

// The error's code: its first word ("WRONGTYPE", "ERR").
std::string_view Code(std::string_view error) {
    size_t space = error.find(' ');
    return error.substr(0, space);
}

bool Starts(std::string_view text, std::string_view prefix) {
    return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

// What to do with an error reply to XADD (see classify.hpp).
OutcomeKind ClassifyRedisError(std::string_view error) {
    std::string_view code = Code(error);
    // Refused before the command ran: the server is not ready to write anything.
    if (code == "LOADING" || code == "BUSY" || code == "MASTERDOWN" || code == "READONLY" ||
        code == "TRYAGAIN" || code == "CLUSTERDOWN" || code == "NOAUTH" || code == "WRONGPASS" ||
        code == "NOREPLICAS")
        return OutcomeKind::Defer;
    if (code == "WRONGTYPE" || code == "NOPERM" || code == "MOVED" || code == "ASK" ||
        code == "CROSSSLOT")
        return OutcomeKind::Dead;
    if (code == "OOM")
        return OutcomeKind::Retry;
    if (code == "ERR") {
        std::string_view rest = error.substr(4 > error.size() ? error.size() : 4);
        if (Starts(rest, "Protocol error") || Starts(rest, "wrong number of arguments") ||
            Starts(rest, "syntax error") || Starts(rest, "unknown command") ||
            Starts(rest, "The ID specified in XADD") || Starts(rest, "Invalid stream ID"))
            return OutcomeKind::Dead;
    }
    return OutcomeKind::Retry;
}

// Whether the connection is remade after such an error (see classify.hpp).
bool RedisErrorDropsConnection(std::string_view error) {
    std::string_view code = Code(error);
    return code == "NOAUTH" || code == "WRONGPASS" || code == "READONLY" || code == "MASTERDOWN" ||
           (code == "ERR" && error.find("Protocol error") != error.npos);
}

}  // namespace outbox
