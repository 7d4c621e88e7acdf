// Who a request comes from when the server sits behind a load balancer (--trusted-proxy).
//
// A connection from a trusted proxy carries many clients' requests, so the proxy's own address
// says nothing about who sent one: the client is read from the headers the proxy adds
// (X-Forwarded-For, else RFC 7239 Forwarded). Only a trusted proxy's word is taken: the hops are
// read from the right (the connection's peer, then what each proxy appended), skipping trusted
// addresses, and the first address that is not a trusted proxy is the client. Anything a client
// wrote into those headers itself lies left of that and is never believed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace qwen35::server {

// An IPv4 or IPv6 network ("10.0.0.0/8", "::1/128", "127.0.0.1": a single address).
class Cidr {
 public:
  static core::Result<Cidr> parse(std::string_view text);
  // `address` (text, IPv4, IPv6 or IPv4-mapped IPv6) lies in the network; false for text that is
  // not an address.
  bool contains(std::string_view address) const;

 private:
  bool v6_ = false;
  uint8_t bytes_[16] = {};
  int prefix_ = 0;
};

// Whether `address` lies in any of `trusted`.
bool is_trusted(const std::vector<Cidr>& trusted, std::string_view address);

// The client of a request that arrived from `peer` (a trusted proxy) with these header values
// (every X-Forwarded-For line, every Forwarded line, in order). Addresses come back canonical
// (IPv4-mapped IPv6 as IPv4, brackets and ports dropped). With no usable forwarding header the
// peer is the client. An entry that is not an address (garbage, "unknown", an obfuscated
// identifier) ends the walk: it is the client's key as written.
std::string forwarded_client(std::string_view peer, const std::vector<std::string>& x_forwarded_for,
                             const std::vector<std::string>& forwarded,
                             const std::vector<Cidr>& trusted);

// The canonical text of an address (IPv4-mapped IPv6 as IPv4); "" when `text` is not one.
std::string canonical_address(std::string_view text);

}  // namespace qwen35::server
