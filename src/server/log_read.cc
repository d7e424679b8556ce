#include "server/log_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace rota::server {
namespace {

// The files, open, with their lengths when opened: the log is read up to
// those (a task still writing adds after them; the next read sees it).
class Pieces {
 public:
  explicit Pieces(const std::vector<std::string>& files) {
    for (const std::string& f : files) {
      const int fd = open(f.c_str(), O_RDONLY | O_CLOEXEC);
      struct stat st {};
      if (fd < 0) continue;
      if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        continue;
      }
      pieces_.push_back({fd, size_, static_cast<uint64_t>(st.st_size)});
      size_ += static_cast<uint64_t>(st.st_size);
    }
  }
  ~Pieces() {
    for (const Piece& p : pieces_) close(p.fd);
  }
  Pieces(const Pieces&) = delete;
  Pieces& operator=(const Pieces&) = delete;

  uint64_t size() const { return size_; }
  // Bytes [from, to) of the whole, appended to `out` (a file that came back
  // shorter than it was: what it still has).
  void Read(uint64_t from, uint64_t to, std::string* out) const {
    for (const Piece& p : pieces_) {
      const uint64_t lo = std::max(from, p.at), hi = std::min(to, p.at + p.size);
      if (lo >= hi) continue;
      const size_t had = out->size();
      out->resize(had + (hi - lo));
      size_t got = 0;
      while (got < hi - lo) {
        const ssize_t n = pread(p.fd, out->data() + had + got, hi - lo - got, static_cast<off_t>(lo - p.at + got));
        if (n <= 0) break;
        got += static_cast<size_t>(n);
      }
      out->resize(had + got);
    }
  }

 private:
  struct Piece {
    int fd;
    uint64_t at, size;  // where it starts in the whole, and its length
  };
  std::vector<Piece> pieces_;
  uint64_t size_ = 0;
};

}  // namespace

LogRead ReadLog(const std::vector<std::string>& files, uint64_t offset, size_t tail, size_t cap) {
  const Pieces log(files);
  LogRead r;
  r.size = log.size();
  uint64_t start = offset <= r.size ? offset : 0;
  const uint64_t floor = r.size - std::min<uint64_t>(r.size - start, cap);  // the most an answer holds
  if (tail > 0 && r.size > start) {
    // Back from the end in chunks, to just after the tail-th newline (the
    // log's own final newline not counted), or the start, or the cap.
    constexpr uint64_t kChunk = 64 * 1024;
    // (One byte before the cap too: a newline there begins the lines.)
    const uint64_t low = floor > start ? floor - 1 : floor;
    uint64_t at = r.size, lines = 0;
    std::string chunk;
    bool last = true;  // (the chunk holding the log's last byte)
    bool found = false;
    while (at > low && !found) {
      const uint64_t from = std::max(low, at - std::min(at, kChunk));
      chunk.clear();
      log.Read(from, at, &chunk);
      if (chunk.size() != at - from) {  // (shorter than it was: answer what there is now)
        at = from;
        break;
      }
      size_t k = chunk.size();
      if (last && k > 0 && chunk[k - 1] == '\n') --k;
      last = false;
      while (k > 0) {
        if (chunk[k - 1] == '\n' && ++lines == tail) {
          found = true;
          break;
        }
        --k;
      }
      at = from + k;
    }
    r.cut = !found && floor > start;
    start = std::max(start, at);
  }
  if (start < floor) {
    r.cut = true;
    start = floor;
  }
  log.Read(start, r.size, &r.text);
  return r;
}

}  // namespace rota::server
