// The sqs kind's outcome classification (include/outbox/brokers/sqs/classify.hpp).
#include "outbox/brokers/sqs/classify.hpp"

#include <curl/curl.h>

#include <string_view>

namespace outbox {

namespace {

bool OneOf(std::string_view code, std::initializer_list<std::string_view> codes) {
    for (std::string_view c : codes)
        if (code == c)
            return true;
    return false;
}

}  // namespace

OutcomeKind ClassifySqsEntryFailure(bool sender_fault, std::string_view) {
    return sender_fault ? OutcomeKind::Dead : OutcomeKind::Retry;
}

OutcomeKind ClassifySqsRequestError(long http_status, std::string_view code) {
    if (OneOf(code, {"ThrottlingException", "Throttling", "RequestThrottled", "ServiceUnavailable",
                     "InternalFailure", "InternalError", "KmsThrottled", "RequestTimeout",
                     "RequestTimeoutException"}))
        return OutcomeKind::Retry;
    if (OneOf(code, {"QueueDoesNotExist",
                     "AWS.SimpleQueueService.NonExistentQueue",
                     "NonExistentQueue",
                     "QueueDeletedRecently",
                     "AccessDenied",
                     "AccessDeniedException",
                     "KmsAccessDenied",
                     "KmsDisabled",
                     "KmsNotFound",
                     "KmsInvalidKeyUsage",
                     "KmsInvalidState",
                     "KmsOptInRequired",
                     "InvalidAddress",
                     "InvalidSecurity",
                     "UnsupportedOperation",
                     "InvalidParameterValue",
                     "InvalidParameterCombination",
                     "MissingParameter",
                     "InvalidMessageContents",
                     "BatchRequestTooLong",
                     "BatchEntryIdsNotDistinct",
                     "TooManyEntriesInBatchRequest",
                     "EmptyBatchRequest",
                     "InvalidBatchEntryId",
                     "InvalidAction",
                     "ValidationError",
                     "ValidationException",
                     "OptInRequired"}))
        return OutcomeKind::Dead;
    if (OneOf(code, {"InvalidClientTokenId", "UnrecognizedClientException", "SignatureDoesNotMatch",
                     "IncompleteSignature", "ExpiredToken", "ExpiredTokenException",
                     "MissingAuthenticationToken", "RequestExpired"}))
        return OutcomeKind::Retry;
    (void)http_status;  // 4xx without a known code and 5xx alike: an attempt, then dead letters
    return OutcomeKind::Retry;
}

bool SqsStatusDecides(long http_status, int curl_code) {
    if (http_status < 200)
        return false;
    return curl_code == CURLE_OK || http_status >= 300;
}

OutcomeKind ClassifySqsTransport(int curl_code, bool request_sent) {
    switch (curl_code) {
        case CURLE_COULDNT_RESOLVE_PROXY:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_CONNECT:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_INVALIDCERTSTATUS:
            return OutcomeKind::Defer;
        // The connection went away before an answer: the server is going or gone.
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_AGAIN:
            return OutcomeKind::Defer;
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_FAILED_INIT:
        case CURLE_URL_MALFORMAT:
        case CURLE_NOT_BUILT_IN:
        case CURLE_FUNCTION_NOT_FOUND:
        case CURLE_BAD_FUNCTION_ARGUMENT:
        case CURLE_UNKNOWN_OPTION:
        case CURLE_SSL_ENGINE_NOTFOUND:
        case CURLE_SSL_ENGINE_SETFAILED:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_CRL_BADFILE:
        case CURLE_SSL_ISSUER_ERROR:
            return OutcomeKind::Dead;
        case CURLE_OPERATION_TIMEDOUT:
            return request_sent ? OutcomeKind::Retry : OutcomeKind::Defer;
        default:
            return OutcomeKind::Retry;
    }
}

}  // namespace outbox
