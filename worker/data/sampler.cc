#include "worker/data/sampler.h"

#include <numeric>
#include <stdexcept>
#include <string>

namespace adctl {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014; the reference constants of java.util.SplittableRandom).
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias (rejection below 2^64 mod bound).
uint64_t UniformBelow(uint64_t& state, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  while (true) {
    const uint64_t r = SplitMix64(state);
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

std::vector<int64_t> SeededPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> permutation(static_cast<size_t>(n));
  std::iota(permutation.begin(), permutation.end(), int64_t{0});
  // One stream per (seed, epoch); Fisher-Yates (Knuth, TAOCP vol. 2, Algorithm 3.4.2 P).
  uint64_t state = seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(epoch + 1));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(UniformBelow(state, static_cast<uint64_t>(i + 1)));
    std::swap(permutation[i], permutation[j]);
  }
  return permutation;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int rank, int world_size,
                                       uint64_t seed, bool shuffle)
    : dataset_size_(dataset_size),
      rank_(rank),
      world_size_(world_size),
      seed_(seed),
      shuffle_(shuffle) {
  if (dataset_size < 0 || world_size < 1 || rank < 0 || rank >= world_size) {
    throw std::invalid_argument("DistributedSampler: dataset_size " + std::to_string(dataset_size) +
                                ", rank " + std::to_string(rank) + ", world_size " +
                                std::to_string(world_size) + " are inconsistent");
  }
}

Status DistributedSampler::CheckFits(int64_t dataset_size, int world_size, int64_t count) {
  if (count < 1 || world_size * count > dataset_size) {
    return InvalidArgument("a global batch of " + std::to_string(world_size) + " ranks x " +
                           std::to_string(count) + " samples does not fit in a dataset of " +
                           std::to_string(dataset_size) + " samples");
  }
  return Status::Ok();
}

const std::vector<int64_t>& DistributedSampler::Permutation() {
  if (cached_epoch_ == epoch_) return permutation_;
  if (shuffle_) {
    permutation_ = SeededPermutation(dataset_size_, seed_, epoch_);
  } else {
    permutation_.resize(static_cast<size_t>(dataset_size_));
    std::iota(permutation_.begin(), permutation_.end(), int64_t{0});
  }
  cached_epoch_ = epoch_;
  return permutation_;
}

std::vector<int64_t> DistributedSampler::Next(int64_t count) {
  Status fits = CheckFits(dataset_size_, world_size_, count);
  if (!fits.ok()) throw std::invalid_argument("DistributedSampler: " + fits.message());
  const int64_t global = world_size_ * count;
  if (position_ + global > dataset_size_) {  // drop the tail; next epoch
    ++epoch_;
    position_ = 0;
  }
  const std::vector<int64_t>& permutation = Permutation();
  std::vector<int64_t> indices(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    indices[i] = permutation[position_ + i * world_size_ + rank_];
  }
  last_epoch_ = epoch_;
  last_start_ = position_;
  last_count_ = count;
  position_ += global;
  return indices;
}

int64_t DistributedSampler::GlobalPosition(int64_t i) const {
  if (i < 0 || i >= last_count_) {
    throw std::out_of_range("DistributedSampler::GlobalPosition(" + std::to_string(i) +
                            "): the last Next() returned " + std::to_string(last_count_) +
                            " samples");
  }
  return last_epoch_ * dataset_size_ + last_start_ + i * world_size_ + rank_;
}

Status DistributedSampler::Restore(State s) {
  if (s.epoch < 0 || s.position < 0 || s.position > dataset_size_) {
    return InvalidArgument("sampler state: epoch " + std::to_string(s.epoch) + ", position " +
                           std::to_string(s.position) + " does not fit a dataset of " +
                           std::to_string(dataset_size_) + " samples");
  }
  epoch_ = s.epoch;
  position_ = s.position;
  last_count_ = 0;
  return Status::Ok();
}

}  // namespace adctl
