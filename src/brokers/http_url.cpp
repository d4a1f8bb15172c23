// An HTTP endpoint's host as libcurl reads it (webhook and sqs) (see
// include/outbox/brokers/http_url.hpp).
#include "outbox/brokers/http_url.hpp"

#include <curl/curl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace outbox {

namespace {

struct CurlUrlDeleter {
    void operator()(CURLU *url) const { curl_url_cleanup(url); }
};
struct CurlStringDeleter {
    void operator()(char *text) const { curl_free(text); }
};

}  // namespace

std::string UrlHost(const std::string &url) {
    std::unique_ptr<CURLU, CurlUrlDeleter> u(curl_url());
    if (!u || curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK)
        return "";
    char *raw = nullptr;
    if (curl_url_get(u.get(), CURLUPART_HOST, &raw, 0) != CURLUE_OK || raw == nullptr)
        return "";
    std::unique_ptr<char, CurlStringDeleter> host(raw);
    return host.get();
}

std::optional<IpAddress> LiteralAddressOfUrl(const std::string &url) {
    return LiteralAddressOfHost(UrlHost(url));
}

bool IsLocalhostName(const std::string &url) {
    return IsLocalhostHost(UrlHost(url));
}

std::optional<HostRefusal> RefusedLiteralUrlHost(const std::string &url,
                                                 const std::vector<Network> &allowed) {
    return RefusedLiteralHost(UrlHost(url), allowed);
}

}  // namespace outbox
