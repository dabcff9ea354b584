#include "worker/data/sampler.h"

#include <algorithm>
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
  bucket_sizes_ = {dataset_size};
}

DistributedSampler::DistributedSampler(std::vector<int> buckets, int rank, int world_size,
                                       uint64_t seed, bool shuffle)
    : DistributedSampler(static_cast<int64_t>(buckets.size()), rank, world_size, seed, shuffle) {
  const int count = buckets.empty() ? 1 : *std::max_element(buckets.begin(), buckets.end()) + 1;
  if (count == 1) return;  // one bucket: the plain rule
  members_.resize(static_cast<size_t>(count));
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i] < 0) {
      throw std::invalid_argument("DistributedSampler: dataset index " + std::to_string(i) +
                                  " has bucket " + std::to_string(buckets[i]));
    }
    members_[static_cast<size_t>(buckets[i])].push_back(static_cast<int64_t>(i));
  }
  bucket_sizes_.clear();
  for (const auto& m : members_) bucket_sizes_.push_back(static_cast<int64_t>(m.size()));
}

Status DistributedSampler::CheckFits(const std::vector<int64_t>& bucket_sizes, int world_size,
                                     int64_t count) {
  if (bucket_sizes.size() == 1) return CheckFits(bucket_sizes.front(), world_size, count);
  const int64_t largest =
      bucket_sizes.empty() ? 0 : *std::max_element(bucket_sizes.begin(), bucket_sizes.end());
  if (count < 1 || world_size * count > largest) {
    return InvalidArgument("a global batch of " + std::to_string(world_size) + " ranks x " +
                           std::to_string(count) + " samples fits in none of the " +
                           std::to_string(bucket_sizes.size()) +
                           " shape buckets (the largest holds " + std::to_string(largest) +
                           " samples; a batch is of one bucket)");
  }
  return Status::Ok();
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

int64_t DistributedSampler::EpochLength(int64_t global) const {
  if (members_.empty()) return dataset_size_;
  int64_t length = 0;
  for (int64_t n : bucket_sizes_) length += n / global * global;
  return length;
}

void DistributedSampler::PermuteBuckets(int64_t global) {
  if (cached_epoch_ == epoch_ && cached_global_ == global) return;
  bucket_order_.assign(members_.size(), {});
  int64_t batches = 0;
  for (size_t b = 0; b < members_.size(); ++b) {
    const auto n = static_cast<int64_t>(members_[b].size());
    // Each bucket a stream of its own, apart from the batch order's (seed_ itself).
    std::vector<int64_t> order(static_cast<size_t>(n));
    if (shuffle_) {
      order = SeededPermutation(n, seed_ ^ (0xA24BAED4963EE407ull * (b + 1)), epoch_);
    } else {
      std::iota(order.begin(), order.end(), int64_t{0});
    }
    for (int64_t& k : order) k = members_[b][static_cast<size_t>(k)];
    bucket_order_[b] = std::move(order);
    batches += n / global;
  }
  if (shuffle_) {
    batch_order_ = SeededPermutation(batches, seed_, epoch_);
  } else {
    batch_order_.resize(static_cast<size_t>(batches));
    std::iota(batch_order_.begin(), batch_order_.end(), int64_t{0});
  }
  cached_epoch_ = epoch_;
  cached_global_ = global;
}

std::vector<int64_t> DistributedSampler::NextBucketed(int64_t count) {
  Status fits = CheckFits(bucket_sizes_, world_size_, count);
  if (!fits.ok()) throw std::invalid_argument("DistributedSampler: " + fits.message());
  const int64_t global = world_size_ * count;
  // A run resumed with another global batch may stand between two batches: the next begins.
  if (position_ % global != 0) position_ = (position_ / global + 1) * global;
  const int64_t epoch_length = EpochLength(global);
  if (position_ + global > epoch_length) {
    ++epoch_;
    position_ = 0;
  }
  PermuteBuckets(global);
  // Batch position_ / global of the epoch's order: the k-th batch of bucket b.
  int64_t k = batch_order_[static_cast<size_t>(position_ / global)];
  size_t b = 0;
  while (k >= bucket_sizes_[b] / global) k -= bucket_sizes_[b++] / global;
  const std::vector<int64_t>& clips = bucket_order_[b];
  std::vector<int64_t> indices(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    indices[i] = clips[static_cast<size_t>(k * global + i * world_size_ + rank_)];
  }
  last_epoch_ = epoch_;
  last_start_ = position_;
  last_count_ = count;
  last_bucket_ = static_cast<int>(b);
  last_epoch_length_ = epoch_length;
  position_ += global;
  return indices;
}

std::vector<int64_t> DistributedSampler::Next(int64_t count) {
  if (!members_.empty()) return NextBucketed(count);
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
  last_epoch_length_ = dataset_size_;
  position_ += global;
  return indices;
}

int64_t DistributedSampler::GlobalPosition(int64_t i) const {
  if (i < 0 || i >= last_count_) {
    throw std::out_of_range("DistributedSampler::GlobalPosition(" + std::to_string(i) +
                            "): the last Next() returned " + std::to_string(last_count_) +
                            " samples");
  }
  return last_epoch_ * last_epoch_length_ + last_start_ + i * world_size_ + rank_;
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
