#include "server/client_address.h"

#include <boost/asio/ip/address.hpp>
#include <charconv>
#include <cstring>

namespace qwen35::server {
namespace {

namespace ip = boost::asio::ip;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The address as IPv4 when it is one or is IPv4-mapped; false for text that is not an address.
bool to_address(std::string_view text, ip::address* out) {
  boost::system::error_code ec;
  ip::address a = ip::make_address(std::string(text), ec);
  if (ec) return false;
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    a = ip::make_address_v4(ip::v4_mapped, a.to_v6());
  *out = a;
  return true;
}

// A hop as a proxy writes it: "1.2.3.4", "1.2.3.4:80", "[::1]", "[::1]:80", or quoted.
std::string_view strip_hop(std::string_view s) {
  s = trim(s);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    return close == std::string_view::npos ? s : s.substr(1, close - 1);
  }
  // One colon: an IPv4 address with a port. More than one: a bare IPv6 address.
  if (const size_t c = s.find(':'); c != std::string_view::npos && s.find(':', c + 1) == std::string_view::npos)
    return s.substr(0, c);
  return s;
}

void split_commas(std::string_view s, std::vector<std::string_view>* out) {
  while (true) {
    const size_t c = s.find(',');
    out->push_back(trim(s.substr(0, c)));
    if (c == std::string_view::npos) return;
    s.remove_prefix(c + 1);
  }
}

// The for= parameter of one Forwarded element ("for=1.2.3.4;proto=http"), "" when it has none.
std::string_view forwarded_for(std::string_view element) {
  while (!element.empty()) {
    const size_t semi = element.find(';');
    std::string_view pair = trim(element.substr(0, semi));
    if (pair.size() > 4 && (pair[0] == 'f' || pair[0] == 'F') && (pair[1] == 'o' || pair[1] == 'O') &&
        (pair[2] == 'r' || pair[2] == 'R') && pair[3] == '=')
      return pair.substr(4);
    if (semi == std::string_view::npos) break;
    element.remove_prefix(semi + 1);
  }
  return {};
}

// 'text' (built by appending: GCC 12 warns falsely on a chain of + from a literal).
std::string quoted(std::string_view text) {
  std::string q = "'";
  q.append(text);
  q += '\'';
  return q;
}

}  // namespace

core::Result<Cidr> Cidr::parse(std::string_view text) {
  const std::string_view t = trim(text);
  const size_t slash = t.find('/');
  ip::address a;
  if (!to_address(t.substr(0, slash), &a))
    return core::error(quoted(text) + " is not an address or network (like 10.0.0.0/8)");
  Cidr c;
  c.v6_ = a.is_v6();
  const int bits = c.v6_ ? 128 : 32;
  c.prefix_ = bits;
  if (slash != std::string_view::npos) {
    const std::string_view p = t.substr(slash + 1);
    int n = -1;
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), n);
    if (ec != std::errc() || end != p.data() + p.size() || n < 0 || n > bits)
      return core::error(quoted(text) + ": the prefix length must be 0 to " +
                         std::to_string(bits));
    c.prefix_ = n;
  }
  if (c.v6_) {
    const auto b = a.to_v6().to_bytes();
    std::memcpy(c.bytes_, b.data(), 16);
  } else {
    const auto b = a.to_v4().to_bytes();
    std::memcpy(c.bytes_, b.data(), 4);
  }
  return c;
}

bool Cidr::contains(std::string_view address) const {
  ip::address a;
  if (!to_address(strip_hop(address), &a) || a.is_v6() != v6_) return false;
  uint8_t b[16] = {};
  if (v6_) {
    const auto x = a.to_v6().to_bytes();
    std::memcpy(b, x.data(), 16);
  } else {
    const auto x = a.to_v4().to_bytes();
    std::memcpy(b, x.data(), 4);
  }
  for (int i = 0; i < prefix_; ++i) {
    const uint8_t mask = uint8_t(0x80 >> (i % 8));
    if ((b[i / 8] & mask) != (bytes_[i / 8] & mask)) return false;
  }
  return true;
}

bool is_trusted(const std::vector<Cidr>& trusted, std::string_view address) {
  for (const Cidr& c : trusted)
    if (c.contains(address)) return true;
  return false;
}

std::string canonical_address(std::string_view text) {
  ip::address a;
  return to_address(strip_hop(text), &a) ? a.to_string() : std::string();
}

std::string forwarded_client(std::string_view peer, const std::vector<std::string>& x_forwarded_for,
                             const std::vector<std::string>& forwarded,
                             const std::vector<Cidr>& trusted) {
  // The hops, oldest first: X-Forwarded-For when the proxy wrote it, else Forwarded's for=.
  std::vector<std::string_view> hops;
  for (const auto& line : x_forwarded_for) split_commas(line, &hops);
  if (x_forwarded_for.empty()) {
    std::vector<std::string_view> elements;
    for (const auto& line : forwarded) split_commas(line, &elements);
    for (std::string_view e : elements) hops.push_back(forwarded_for(e));
  }
  std::string client = canonical_address(peer);
  if (client.empty()) client = std::string(peer);
  for (size_t i = hops.size(); i-- > 0;) {
    if (!is_trusted(trusted, client)) break;  // the last hop is not a proxy we believe
    const std::string_view hop = strip_hop(hops[i]);
    if (hop.empty()) break;  // an empty list entry: keep the trusted hop we have
    const std::string c = canonical_address(hop);
    client = c.empty() ? std::string(hop) : c;
    if (c.empty()) break;  // not an address: the client's key as written
  }
  return client;
}

}  // namespace qwen35::server
