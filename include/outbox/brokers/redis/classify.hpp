// The redis kind: turning a Redis reply into what the worker should do with the row.
// Design §1 "Guarantees": an outage defers without spending the retry budget, a rejection spends
// one attempt and backs off, a permanent failure goes to the dead letters at once.
#pragma once

#include <string_view>

#include "outbox/message.hpp"

namespace outbox {

// What to do with an error reply to XADD (`error` as the server sent it, e.g. "WRONGTYPE
// Operation against a key holding the wrong kind of value"), by its first word:
// - Dead: WRONGTYPE (the key is not a stream), NOPERM (the ACL user may not write this stream:
//   the same answer every time until an operator changes the ACL; requeue after), "Protocol
//   error" (a record over the server's proto-max-bulk-len), MOVED/ASK/CROSSSLOT (a cluster,
//   which the kind does not follow), and the syntax errors of a command the server refuses
//   ("ERR wrong number of arguments", "ERR syntax error", "ERR unknown command");
// - Defer: the server refuses to run anything now and certainly did not run this command:
//   LOADING, BUSY, MASTERDOWN, READONLY (a replica: the primary moved), TRYAGAIN,
//   CLUSTERDOWN, NOAUTH/WRONGPASS (the connection lost its login: a restarted server
//   with new credentials; the connection is remade);
// - Retry: OOM (maxmemory reached: memory may be freed) and everything else.
OutcomeKind ClassifyRedisError(std::string_view error);

// Whether an error reply means the connection should be remade before anything else is sent
// (the server forgot the login, or became a replica).
bool RedisErrorDropsConnection(std::string_view error);

}  // namespace outbox
