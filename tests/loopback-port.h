// A loopback TCP address for a test's rendezvous (compute/host-group.h): the port the kernel picks
// for port 0, closed again for the test's rank 0 to bind. Another program could take it in
// between; the kernel hands out ephemeral ports in rotation, which makes that rare, and a test
// that loses the race fails to join rather than passing wrongly.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace spillway::testing {

inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// "127.0.0.1:PORT" with a port free_loopback_port found.
inline std::string loopback_address() {
  return "127.0.0.1:" + std::to_string(free_loopback_port());
}

}  // namespace spillway::testing
