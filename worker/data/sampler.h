// Which dataset samples each rank trains on: like torch.utils.data.DistributedSampler, but
// positioned by the GLOBAL sample count, so a run resumed on a different number of ranks
// continues the same global sample sequence.
//
// Every epoch has its own seeded permutation of [0, dataset_size) (or the identity without
// shuffling). The global position p counts the samples all ranks together consumed in the current
// epoch. One Next(count) call on every rank consumes world_size * count positions; rank r gets
//   permutation[p + i * world_size + r],  i < count,
// so the ranks' batches interleave to exactly the batch one rank with world_size * count would
// get (1 rank, batch 2b: s0 s1 s2 s3 ...; 2 ranks, batch b: rank 0 s0 s2 ..., rank 1 s1 s3 ...).
// When fewer than world_size * count positions remain, the tail is dropped and the next epoch
// begins, so no sample is seen twice in an epoch. Runs whose world_size * count agree see the
// same sequence, epoch boundaries included.
//
// Shape buckets: a dataset whose clips come in several shapes (LatentDataset::bucket) is
// sampled so that every global batch is of one bucket. Epoch e permutes each bucket's clips (its
// own seeded stream) and cuts them into m_b = ⌊n_b / G⌋ global batches of G = world_size × count
// (a bucket's tail is dropped); the M = Σ m_b batches are visited in the seeded order of epoch e
// (SeededPermutation(M) over the buckets' batches laid one after another). Global position p is
// batch p / G of that order, and rank r's i-th sample its clip i·world_size + r, as above. So the
// bucket of each step is a function of (seed, epoch, position): the ranks agree on it without a
// word, and 1 rank, N ranks and a resumed run draw the same batches. An epoch is M·G positions.
// With one bucket the rule above is this one.
//
// The permutation is computed here (SplitMix64 + Fisher-Yates), not by the standard library or
// Torch, so it is identical across compilers, machines and LibTorch versions. Thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace adctl {

// The seeded permutation of [0, n) that DistributedSampler uses for `epoch` (SplitMix64 +
// Fisher-Yates): the same on every machine.
std::vector<int64_t> SeededPermutation(int64_t n, uint64_t seed, int64_t epoch);

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int rank, int world_size, uint64_t seed,
                     bool shuffle = true);
  // Over shape buckets: `buckets[i]` is dataset index i's bucket (in [0, B)); the dataset size
  // is buckets.size(). Every global batch is of one bucket (the file comment).
  DistributedSampler(std::vector<int> buckets, int rank, int world_size, uint64_t seed,
                     bool shuffle = true);

  // The next `count` dataset indices for this rank (see the file comment). Throws
  // std::invalid_argument when world_size * count exceeds the dataset (no epoch could hold one
  // global batch); CheckFits says so beforehand as a Status.
  std::vector<int64_t> Next(int64_t count);

  // kInvalidArgument when a global batch of world_size * count does not fit in the dataset.
  static Status CheckFits(int64_t dataset_size, int world_size, int64_t count);
  // With buckets: when it fits in none of them (bucket_sizes[b]: bucket b's clips).
  static Status CheckFits(const std::vector<int64_t>& bucket_sizes, int world_size, int64_t count);

  // Where the sampler stands: the epoch and the global position within it. Checkpoint this;
  // it means the same for every world size.
  struct State {
    int64_t epoch = 0;
    int64_t position = 0;
  };
  State state() const { return {epoch_, position_}; }
  // Continues from `s`, also one saved by a run with another world size.
  // kInvalidArgument when `s` cannot belong to this dataset.
  Status Restore(State s);

  // The run-wide number of the i-th sample of this rank's last Next() result:
  // epoch * (an epoch's positions: dataset_size without buckets) + (its global position within
  // the epoch). Unique over the run and the
  // same whichever rank count drew the sample, so seeding per-sample noise by it makes N ranks
  // equal to 1 rank.
  int64_t GlobalPosition(int64_t i) const;

  int64_t dataset_size() const { return dataset_size_; }
  int64_t epoch() const { return epoch_; }
  // The epoch and the bucket of the last Next() (bucket 0 without buckets).
  int64_t last_epoch() const { return last_epoch_; }
  int last_bucket() const { return last_bucket_; }
  // Clips in each bucket (one entry without buckets).
  const std::vector<int64_t>& bucket_sizes() const { return bucket_sizes_; }

 private:
  const std::vector<int64_t>& Permutation();  // of epoch_, cached
  std::vector<int64_t> NextBucketed(int64_t count);
  // Positions in an epoch of global batches of `global`.
  int64_t EpochLength(int64_t global) const;
  // With buckets, epoch_'s: each bucket's clips in their order, and the order of the batches.
  void PermuteBuckets(int64_t global);

  // Constant after construction.
  const int64_t dataset_size_;
  const int rank_;
  const int world_size_;
  const uint64_t seed_;
  const bool shuffle_;

  int64_t epoch_ = 0;
  int64_t position_ = 0;
  // The last Next(): where it started (epoch, position), to answer GlobalPosition.
  int64_t last_epoch_ = 0;
  int64_t last_start_ = 0;
  int64_t last_count_ = 0;
  int64_t last_epoch_length_ = 0;
  int last_bucket_ = 0;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> permutation_;
  // Buckets: each one's dataset indices (ascending) and size; empty members_ without buckets.
  std::vector<std::vector<int64_t>> members_;
  std::vector<int64_t> bucket_sizes_;
  // Of cached_epoch_ and cached_global_: each bucket's clips permuted, the batch order.
  int64_t cached_global_ = 0;
  std::vector<std::vector<int64_t>> bucket_order_;
  std::vector<int64_t> batch_order_;
};

}  // namespace adctl
