// Noticing that the client of a non-streaming request has hung up. cpp-httplib 0.11 gives a
// handler no way to see its connection (streaming handlers notice on their next write), so the
// server finds the connection's descriptor among this process's sockets by its addresses and peeks
// at it: a peer that closed or reset shows as end-of-file or an error, without reading anything.
#pragma once

#include <string>

namespace qwen35::server {

// The descriptor of this process's TCP connection from remote_addr:remote_port (to local_port,
// when known: Debian's httplib 0.11 leaves it unset), or -1 when there is none (then nothing is
// checked).
int find_connection(const std::string& remote_addr, int remote_port, int local_port);

// True when the peer of a connected socket has closed or reset it. Bytes the client sent after
// its request (a pipelined request) count as alive; nothing is consumed.
bool peer_closed(int fd);

}  // namespace qwen35::server
