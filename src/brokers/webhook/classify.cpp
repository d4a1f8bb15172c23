// The webhook kind's outcome classification. Design §1 "Guarantees": a Defer must only be returned
// when the destination certainly did not act on the message, because a Defer never spends the retry
// budget; anything doubtful is a Retry, which does.
#include "outbox/brokers/webhook/classify.hpp"

#include <curl/curl.h>

namespace outbox {

// What to do after an HTTP response.
OutcomeKind ClassifyHttpStatus(long status) {
    if (status >= 200 && status <= 299) {
        return OutcomeKind::Delivered;
    }
    if (status == 410) {
        return OutcomeKind::Gone;
    }
    if (status == 408 || status == 425 || status == 429 || (status >= 500 && status <= 599)) {
        return OutcomeKind::Retry;
    }
    return OutcomeKind::Dead;
}

// What to do after a libcurl transfer that ended without an HTTP response.
OutcomeKind ClassifyCurlResult(int curl_code, bool request_sent) {
    switch (curl_code) {
        // The endpoint cannot have seen the request: no connection or no TLS session.
        case CURLE_COULDNT_RESOLVE_PROXY:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_CONNECT:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_INVALIDCERTSTATUS:
        case CURLE_QUIC_CONNECT_ERROR:
            return OutcomeKind::Defer;

        // Local configuration that no retry can fix.
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_FAILED_INIT:
        case CURLE_URL_MALFORMAT:
        case CURLE_NOT_BUILT_IN:
        case CURLE_FUNCTION_NOT_FOUND:
        case CURLE_BAD_FUNCTION_ARGUMENT:
        case CURLE_UNKNOWN_OPTION:
        case CURLE_SETOPT_OPTION_SYNTAX:
        case CURLE_SSL_ENGINE_NOTFOUND:
        case CURLE_SSL_ENGINE_SETFAILED:
        case CURLE_SSL_ENGINE_INITFAILED:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_CRL_BADFILE:
        case CURLE_SSL_ISSUER_ERROR:
            return OutcomeKind::Dead;

        // Transport failures: harmless before the request went out, ambiguous after.
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_WEIRD_SERVER_REPLY:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
        case CURLE_HTTP3:
        case CURLE_PROXY:
        case CURLE_SSL_SHUTDOWN_FAILED:
        case CURLE_AGAIN:
            return request_sent ? OutcomeKind::Retry : OutcomeKind::Defer;

        default:
            // Unknown or unexpected codes spend an attempt, so a failure that never heals ends
            // in the dead letters instead of deferring forever.
            return OutcomeKind::Retry;
    }
}

}  // namespace outbox
