// SPDX-License-Identifier: Apache-2.0
// chimera-kernel-bench: pack/unpack bandwidth against cudaMemcpyAsync device-to-device in
// the same run, for a table of shapes (or the one given by -r/-d/-o): runs of 4 KiB, 1 KiB
// and 256 B (f32), 4 KiB bf16 runs, and bf16 boxes whose tensor-side start is 8, 4 or 2 bytes
// off a 16-byte boundary (8- and 4-byte vectors, element-wise copy). For each shape and size
// S (bytes of packed data) it times, with CUDA events around each iteration and the median
// over iterations:
//   memcpy   cudaMemcpyAsync of S bytes (the reference)
//   pack     one box of a row-major [rows x 2*run] tensor: every row's `run` elements from
//            column byte offset `offset` (default run/2)
//   unpack   the inverse
//   packN    the same box cut into N row blocks packed to N consecutive regions (one call,
//            as a many-to-many send list to N peers)
// GB/s = S / median time for every column (each moves S bytes in and S bytes out). After
// timing, every result is compared byte for byte with the host path (#wrong = differing
// bytes over all cases); the exit status is 1 when any byte differs.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "box/box_pack.hpp"
#include "chimera/types.hpp"
#include "common/cli.hpp"
#include "common/size_text.hpp"
#include "kernels/pack.hpp"

namespace chimera {
namespace {

// One benchmarked shape: element type, bytes per run, byte offset of the box in its row.
struct Shape {
  std::string name;
  DataType dtype = DataType::F32;
  std::size_t runBytes = 4096;
  std::size_t offsetBytes = 2048;
};

// The shapes measured unless -r/-d/-o name one.
std::vector<Shape> defaultShapes() {
  return {{"run4K", DataType::F32, 4096, 2048},   {"run1K", DataType::F32, 1024, 512},
          {"run256", DataType::F32, 256, 128},    {"bf16-4K", DataType::BF16, 4096, 2048},
          {"bf16-off8", DataType::BF16, 4096, 8}, {"bf16-off4", DataType::BF16, 4096, 4},
          {"bf16-off2", DataType::BF16, 4096, 2}};
}

struct Options {
  std::size_t minBytes = std::size_t{1} << 20;
  std::size_t maxBytes = std::size_t{256} << 20;
  int iterations = 20;
  int warmup = 5;
  int peers = 8;
  std::vector<Shape> shapes = defaultShapes();
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "chimera-kernel-bench: %s\n", message.c_str());
  std::exit(2);
}

void check(const Status& status, const char* what) {
  if (!status.isOk()) fail(fmt::format("{}: {}", what, status.toString()));
}

void checkCuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) fail(fmt::format("{}: {}", what, cudaGetErrorString(error)));
}

constexpr const char* kUsage =
    "usage: chimera-kernel-bench [-b min] [-e max] [-n iters] [-w warmup] [-p peers] [-r run-bytes] [-d dtype] "
    "[-o offset-bytes]\n  sizes accept K/M/G suffixes; defaults -b 1M -e 256M -n 20 -w 5 -p 8; without -r/-d/-o the "
    "shape table (4 KiB, 1 KiB, 256 B f32 runs, 4 KiB bf16 runs, bf16 boxes 8/4/2 bytes off alignment), else that "
    "one shape (defaults -r 4096 -d float -o run/2)\n";

Options parseOptions(int argc, char** argv) {
  using detail::parseIntFlag;
  using detail::parseSizeFlag;
  Options options;
  Shape custom{"custom", DataType::F32, 4096, 0};
  bool customGiven = false;
  bool offsetGiven = false;
  bool help = false;
  const detail::CliFlag flags[] = {
      {"-b", "", true, [&](std::string_view v) { return parseSizeFlag("-b", v, options.minBytes); }},
      {"-e", "", true, [&](std::string_view v) { return parseSizeFlag("-e", v, options.maxBytes); }},
      {"-n", "", true, [&](std::string_view v) { return parseIntFlag("-n", v, 1, options.iterations); }},
      {"-w", "", true, [&](std::string_view v) { return parseIntFlag("-w", v, 0, options.warmup); }},
      {"-p", "", true, [&](std::string_view v) { return parseIntFlag("-p", v, 1, options.peers); }},
      {"-r", "", true, [&](std::string_view v) { return customGiven = true, parseSizeFlag("-r", v, custom.runBytes); }},
      {"-o", "", true,
       [&](std::string_view v) {
         customGiven = offsetGiven = true;
         return parseSize(v, custom.offsetBytes).isOk()
                    ? Status::ok()
                    : Status::invalidArgument(fmt::format("-o: malformed size '{}' (expected e.g. 0, 8, 2K)", v));
       }},
      {"-d", "", true,
       [&](std::string_view v) {
         customGiven = true;
         const Status status = parseDataType(v, custom.dtype);
         return status.isOk() ? status : Status::invalidArgument("-d: " + status.message());
       }},
      {"-h", "--help", false, [&](std::string_view) { return help = true, Status::ok(); }},
  };
  if (const Status status = detail::parseFlags(detail::argumentList(argc, argv), flags); !status.isOk()) {
    fail(status.message());
  }
  if (help) {
    std::fputs(kUsage, stdout);
    std::exit(0);
  }
  if (customGiven) {
    if (!offsetGiven) custom.offsetBytes = custom.runBytes / 2;
    options.shapes = {custom};
  }
  for (const Shape& shape : options.shapes) {
    const std::size_t size = dataTypeSize(shape.dtype);
    if (shape.runBytes == 0 || shape.runBytes % size != 0) fail("-r must be a positive multiple of the element size");
    if (shape.offsetBytes % size != 0 || shape.offsetBytes > shape.runBytes) {
      fail("-o must be a multiple of the element size and at most -r");
    }
  }
  if (options.minBytes > options.maxBytes) fail("need -b <= -e");
  return options;
}

// Median milliseconds of `iterations` timed calls of `op` (after `warmup` untimed ones).
// Every iteration has its own event pair; one synchronisation at the end.
float medianMs(cudaStream_t stream, int warmup, int iterations, const std::function<void()>& op) {
  for (int i = 0; i < warmup; ++i) op();
  std::vector<cudaEvent_t> events(2 * static_cast<std::size_t>(iterations));
  for (auto& event : events) checkCuda(cudaEventCreate(&event), "cudaEventCreate");
  for (int i = 0; i < iterations; ++i) {
    checkCuda(cudaEventRecord(events[2 * static_cast<std::size_t>(i)], stream), "cudaEventRecord");
    op();
    checkCuda(cudaEventRecord(events[2 * static_cast<std::size_t>(i) + 1], stream), "cudaEventRecord");
  }
  checkCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::vector<float> times(static_cast<std::size_t>(iterations));
  for (std::size_t i = 0; i < times.size(); ++i) {
    checkCuda(cudaEventElapsedTime(&times[i], events[2 * i], events[2 * i + 1]), "cudaEventElapsedTime");
  }
  for (auto& event : events) cudaEventDestroy(event);
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

// Device memory for one size, freed on scope exit.
class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes) { checkCuda(cudaMalloc(&data_, bytes), "cudaMalloc"); }
  ~DeviceMemory() { cudaFree(data_); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(data_); }

 private:
  void* data_ = nullptr;
};

struct Layout {
  TensorBox box;                 // rows x run in the middle of rows x 2*run
  std::vector<TensorBox> parts;  // the box cut into row blocks, one per peer
  std::size_t tensorBytes = 0;
  std::size_t packedBytes = 0;
};

Layout makeLayout(const Options& options, const Shape& shape, std::size_t bytes) {
  const std::size_t size = dataTypeSize(shape.dtype);
  const auto run = static_cast<std::int64_t>(shape.runBytes / size);
  const auto rows = static_cast<std::int64_t>(std::max<std::size_t>(1, bytes / shape.runBytes));
  Layout layout;
  layout.box.ndims = 2;
  layout.box.dims[0] = rows;
  layout.box.dims[1] = 2 * run;
  layout.box.offset[1] = static_cast<std::int64_t>(shape.offsetBytes / size);
  layout.box.extent[0] = rows;
  layout.box.extent[1] = run;
  layout.tensorBytes = static_cast<std::size_t>(tensorVolume(layout.box)) * size;
  layout.packedBytes = static_cast<std::size_t>(boxVolume(layout.box)) * size;
  const std::int64_t peers = std::min<std::int64_t>(options.peers, rows);
  for (std::int64_t p = 0, first = 0; p < peers; ++p) {
    TensorBox part = layout.box;
    part.offset[0] = first;
    part.extent[0] = rows / peers + (p < rows % peers ? 1 : 0);
    first += part.extent[0];
    layout.parts.push_back(part);
  }
  return layout;
}

std::vector<std::uint8_t> patternBytes(std::size_t bytes) {
  std::vector<std::uint8_t> out(bytes);
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  for (std::size_t i = 0; i < bytes; i += 8) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::memcpy(out.data() + i, &state, std::min<std::size_t>(8, bytes - i));
  }
  return out;
}

std::size_t differingBytes(const std::byte* device, const std::vector<std::uint8_t>& want) {
  std::vector<std::uint8_t> got(want.size());
  checkCuda(cudaMemcpy(got.data(), device, got.size(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i] ? 1 : 0;
  return wrong;
}

struct Row {
  std::size_t bytes = 0;
  float memcpyMs = 0, packMs = 0, unpackMs = 0, packPeersMs = 0;
  std::size_t wrong = 0;
};

Row measure(const Options& options, DataType dtype, const Layout& layout, cudaStream_t stream) {
  const std::size_t size = dataTypeSize(dtype);
  const std::vector<std::uint8_t> tensor = patternBytes(layout.tensorBytes);
  std::vector<std::uint8_t> wantPacked(layout.packedBytes);
  check(detail::packBoxHost(tensor.data(), wantPacked.data(), layout.box, size), "host pack");
  DeviceMemory deviceTensor(layout.tensorBytes);
  DeviceMemory packed(layout.packedBytes);
  DeviceMemory copyTarget(layout.packedBytes);
  checkCuda(cudaMemcpy(deviceTensor.data(), tensor.data(), tensor.size(), cudaMemcpyHostToDevice), "upload");
  const int w = options.warmup;
  const int n = options.iterations;
  Row row;
  row.bytes = layout.packedBytes;
  row.memcpyMs = medianMs(stream, w, n, [&] {
    checkCuda(
        cudaMemcpyAsync(copyTarget.data(), deviceTensor.data(), layout.packedBytes, cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpyAsync");
  });
  const detail::BoxCopy whole{layout.box, deviceTensor.data(), packed.data()};
  row.packMs = medianMs(stream, w, n, [&] { check(detail::packBoxes(&whole, 1, dtype, stream), "pack"); });
  row.wrong += differingBytes(packed.data(), wantPacked);

  std::vector<detail::BoxCopy> parts;
  for (std::size_t offset = 0; const TensorBox& part : layout.parts) {
    parts.push_back({part, deviceTensor.data(), packed.data() + offset});
    offset += static_cast<std::size_t>(boxVolume(part)) * size;
  }
  checkCuda(cudaMemset(packed.data(), 0, layout.packedBytes), "cudaMemset");
  row.packPeersMs = medianMs(
      stream, w, n, [&] { check(detail::packBoxes(parts.data(), parts.size(), dtype, stream), "pack to peers"); });
  row.wrong += differingBytes(packed.data(), wantPacked);

  // Unpack into a zeroed tensor: afterwards only the box holds data.
  std::vector<std::uint8_t> wantTensor(layout.tensorBytes, 0);
  check(detail::unpackBoxHost(wantPacked.data(), wantTensor.data(), layout.box, size), "host unpack");
  checkCuda(cudaMemset(deviceTensor.data(), 0, layout.tensorBytes), "cudaMemset");
  row.unpackMs = medianMs(stream, w, n, [&] { check(detail::unpackBoxes(&whole, 1, dtype, stream), "unpack"); });
  row.wrong += differingBytes(deviceTensor.data(), wantTensor);
  return row;
}

double gbPerSecond(std::size_t bytes, float ms) { return static_cast<double>(bytes) / (static_cast<double>(ms) * 1e6); }

}  // namespace
}  // namespace chimera

int main(int argc, char** argv) {
  using namespace chimera;
  const Options options = parseOptions(argc, argv);
  int device = 0;
  cudaDeviceProp properties{};
  checkCuda(cudaGetDevice(&device), "cudaGetDevice");
  checkCuda(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
  cudaStream_t stream = nullptr;
  checkCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::printf("# chimera-kernel-bench: %s (%d SMs), %d peers, median of %d after %d warm-up\n", properties.name,
              properties.multiProcessorCount, options.peers, options.iterations, options.warmup);
  std::printf("# %-10s %-8s %6s %6s %12s %12s %12s %7s %12s %7s %12s %7s %7s\n", "shape", "dtype", "run", "offset",
              "bytes", "memcpy GB/s", "pack GB/s", "%copy", "unpack GB/s", "%copy", "packN GB/s", "%copy", "#wrong");
  std::size_t wrong = 0;
  for (const Shape& shape : options.shapes) {
    double worstLarge = -1;  // lowest pack/unpack % of memcpy at >= 64 MiB
    for (std::size_t bytes = options.minBytes; bytes <= options.maxBytes; bytes *= 2) {
      const Row row = measure(options, shape.dtype, makeLayout(options, shape, bytes), stream);
      const double copy = gbPerSecond(row.bytes, row.memcpyMs);
      const double pack = gbPerSecond(row.bytes, row.packMs);
      const double unpack = gbPerSecond(row.bytes, row.unpackMs);
      const double peers = gbPerSecond(row.bytes, row.packPeersMs);
      std::printf("  %-10s %-8s %6zu %6zu %12zu %12.1f %12.1f %6.1f%% %12.1f %6.1f%% %12.1f %6.1f%% %7zu\n",
                  shape.name.c_str(), std::string(dataTypeName(shape.dtype)).c_str(), shape.runBytes, shape.offsetBytes,
                  row.bytes, copy, pack, 100 * pack / copy, unpack, 100 * unpack / copy, peers, 100 * peers / copy,
                  row.wrong);
      wrong += row.wrong;
      if (row.bytes >= (std::size_t{64} << 20)) {
        const double low = 100 * std::min({pack, unpack, peers}) / copy;
        worstLarge = worstLarge < 0 ? low : std::min(worstLarge, low);
      }
    }
    if (worstLarge >= 0) {
      std::printf("# %s: pack/unpack at >= 64 MiB: lowest %.1f%% of cudaMemcpyAsync D2D\n", shape.name.c_str(),
                  worstLarge);
    }
  }
  std::printf("# %s: %zu wrong bytes\n", wrong == 0 ? "correct" : "WRONG", wrong);
  cudaStreamDestroy(stream);
  return wrong == 0 ? 0 : 1;
}
