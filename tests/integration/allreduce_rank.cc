// One rank of a toy all-reduce over TCP, to prove the distributed wiring the
// agent hands a task: rank 0 listens on MASTER_ADDR:MASTER_PORT, the others
// connect and send rank + 1, rank 0 sends everyone the sum. Every rank prints
// "rank R of W: sum S" (S = W(W+1)/2 when the wiring is right).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static int Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) {
    std::fprintf(stderr, "missing %s\n", name);
    std::exit(2);
  }
  return std::atoi(v);
}

int main() {
  const int rank = Env("RANK"), world = Env("WORLD_SIZE"), port = Env("MASTER_PORT");
  const char* addr = std::getenv("MASTER_ADDR");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, addr ? addr : "", &sa.sin_addr) != 1) {
    std::fprintf(stderr, "MASTER_ADDR %s is not an IPv4 address\n", addr ? addr : "(unset)");
    return 2;
  }
  long sum = 0;
  if (rank == 0) {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(ls, world) != 0) {
      std::perror("rank 0: bind/listen");
      return 1;
    }
    sum = 1;
    std::vector<int> peers;
    for (int i = 1; i < world; ++i) {
      int c = accept(ls, nullptr, nullptr);
      long v = 0;
      if (read(c, &v, sizeof(v)) != sizeof(v)) return 1;
      sum += v;
      peers.push_back(c);
    }
    for (int c : peers) {
      if (write(c, &sum, sizeof(sum)) != sizeof(sum)) return 1;
      close(c);
    }
  } else {
    int s = -1;
    for (int attempt = 0; attempt < 200; ++attempt) {  // rank 0 may start a little later
      s = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) break;
      close(s);
      s = -1;
      usleep(50 * 1000);
    }
    if (s < 0) {
      std::perror("connect to rank 0");
      return 1;
    }
    long v = rank + 1;
    if (write(s, &v, sizeof(v)) != sizeof(v) || read(s, &sum, sizeof(sum)) != sizeof(sum)) return 1;
    close(s);
  }
  std::printf("rank %d of %d: sum %ld\n", rank, world, sum);
  return 0;
}
