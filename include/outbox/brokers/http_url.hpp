// An HTTP endpoint's host as libcurl's URL parser reads it: the host the driver will connect to,
// for the definition-time checks of outbox.webhook_allowed_networks (webhook) and
// outbox.broker_allowed_networks (sqs) (network_policy.hpp). Shared by the two HTTP kinds, so
// it lives beside curl_multi.hpp, not in either kind's folder. outbox-driver only (libcurl).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "outbox/network_policy.hpp"

namespace outbox {

// The host part of a URL as libcurl's URL parser has it (IPv6 in brackets), or "".
std::string UrlHost(const std::string &url);

// The literal address a webhook URL's host is, or nullopt when the host is a name (or the URL
// does not parse). IPv4 in any form libcurl's URL parser normalises ("2130706433",
// "0x7f000001", "127.1") counts as the address it means; a trailing dot is ignored.
std::optional<IpAddress> LiteralAddressOfUrl(const std::string &url);

// The host of a webhook URL names the local host without DNS (IsLocalhostHost).
bool IsLocalhostName(const std::string &url);

// RefusedLiteralHost for the host of a webhook URL, as libcurl's URL parser reads it.
std::optional<HostRefusal> RefusedLiteralUrlHost(const std::string &url,
                                                 const std::vector<Network> &allowed);

}  // namespace outbox
