// The training data of a job as the trainer sees it: one source (synthetic clips or a latent
// cache) or a mix of several caches (`data.sources`), with the eval hold-out taken out.
//
// A mix (SourceMix) is a dataset of V slots per epoch, n_i of them source i's: with repeats,
// n_i = repeats_i × size_i; with weights, V = max(Σ size_i, kMinWeightedSlots) split by the
// weights (largest remainder, at least one slot a source). The sampler permutes the slots as it
// permutes any dataset's clips, so draws land on the sources in those shares. Slot k of source i
// in epoch e is the source's c-th draw of the run, c = e·n_i + k, and c names the clip: place
// c mod size_i of the source's seeded permutation number c / size_i. So each source's clips are
// all drawn once before any is drawn again, however small its share, and the clip depends only
// on (slot, epoch): 1 or N ranks and a resumed run draw the same clips (worker/data/sampler.h).
//
// Sources whose clips differ in frames or latent size are shape buckets: slot k's bucket is its
// source's, the same every epoch, and the sampler draws each batch from one bucket. They must
// agree on the latent channels and the text states. A source of several shapes (a cache made
// with preprocess.buckets) enters the mix as one source a bucket, each with the source's
// repeats, or its weight shared in proportion to the buckets' clips.
//
// The hold-out (`eval.holdout_clips`) is taken from every source in proportion to its clips,
// each part drawn by eval.seed (SplitHoldout), and never trained on.
// Thread-compatible; the datasets' const methods may run on several threads.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "worker/data/latent_dataset.h"

namespace adctl {

// `count` clips of [0, dataset_size) held out for eval, drawn by `seed` (ascending), and the
// others, for training (ascending).
struct HoldoutSplit {
  std::vector<int64_t> eval;
  std::vector<int64_t> train;
};
HoldoutSplit SplitHoldout(int64_t dataset_size, int64_t count, uint64_t seed);

// `total` split in proportion to `weights` (largest remainder; ties to the earlier entry).
std::vector<int64_t> SplitByWeight(int64_t total, const std::vector<double>& weights);

// The clips `indices` of `base`, in that order: clip i is base's clip indices[i].
class SubsetDataset : public LatentDataset {
 public:
  SubsetDataset(std::shared_ptr<const LatentDataset> base, std::vector<int64_t> indices)
      : base_(std::move(base)), indices_(std::move(indices)) {}
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  const LatentShape& shape() const override { return base_->shape(); }
  LatentSample Get(int64_t index) const override { return base_->Get(indices_.at(index)); }
  LatentSample Draw(int64_t index, at::Generator& gen, double caption_dropout) const override {
    return base_->Draw(indices_.at(index), gen, caption_dropout);
  }
  bool has_empty_caption() const override { return base_->has_empty_caption(); }
  int buckets() const override { return base_->buckets(); }
  int bucket(int64_t index) const override { return base_->bucket(indices_.at(index)); }
  const LatentShape& bucket_shape(int b) const override { return base_->bucket_shape(b); }

 private:
  std::shared_ptr<const LatentDataset> base_;
  std::vector<int64_t> indices_;
};

// The distinct shapes of several datasets' buckets, numbered in order of appearance, and each
// dataset's buckets in that numbering.
class ShapeBuckets {
 public:
  // Numbers `d`'s buckets; returns d's entry in map().
  size_t Add(const LatentDataset& d);
  int count() const { return static_cast<int>(shapes_.size()); }
  const LatentShape& shape(int b) const { return shapes_.at(static_cast<size_t>(b)); }
  // map()[i][b]: dataset i's bucket b in the common numbering.
  const std::vector<std::vector<int>>& map() const { return map_; }

 private:
  std::vector<LatentShape> shapes_;
  std::vector<std::vector<int>> map_;
};

// Whether two shapes are the same bucket; SameChannelsAndText whether they can share a mix.
bool SameShape(const LatentShape& a, const LatentShape& b);
bool SameChannelsAndText(const LatentShape& a, const LatentShape& b);

// Datasets one after another (the eval hold-out of a mix), their buckets merged.
class ConcatDataset : public LatentDataset {
 public:
  explicit ConcatDataset(std::vector<std::shared_ptr<const LatentDataset>> parts);
  int64_t size() const override { return offsets_.back(); }
  const LatentShape& shape() const override { return parts_.front()->shape(); }
  LatentSample Get(int64_t index) const override;
  LatentSample Draw(int64_t index, at::Generator& gen, double caption_dropout) const override;
  bool has_empty_caption() const override;
  int buckets() const override { return buckets_.count(); }
  int bucket(int64_t index) const override;
  const LatentShape& bucket_shape(int b) const override { return buckets_.shape(b); }

 private:
  size_t Part(int64_t index) const;
  std::vector<std::shared_ptr<const LatentDataset>> parts_;
  std::vector<int64_t> offsets_;  // offsets_[i]: the first index of part i; back(): the size
  ShapeBuckets buckets_;
};

class SourceMix : public LatentDataset {
 public:
  // A weighted mix's epoch is at least this many slots, so that the shares are within 0.05 %
  // of the weights however few clips the sources hold.
  static constexpr int64_t kMinWeightedSlots = 1000;

  struct Source {
    std::shared_ptr<const LatentDataset> clips;
    std::string name;   // its path, for messages
    double weight = 0;  // all weighted, or none (then repeats; 0 means 1)
    int64_t repeats = 0;
  };
  // InvalidArgument naming the source when the sources disagree on latent channels or text
  // states, or a source has no clip.
  static Result<std::unique_ptr<SourceMix>> Create(std::vector<Source> sources, uint64_t seed);

  int64_t size() const override { return offsets_.back(); }
  const LatentShape& shape() const override { return sources_.front().clips->shape(); }
  // The clip slot `index` holds in epoch 0.
  LatentSample Get(int64_t index) const override;
  LatentSample Draw(int64_t index, at::Generator& gen, double caption_dropout) const override {
    return DrawAt(index, 0, gen, caption_dropout);
  }
  LatentSample DrawAt(int64_t index, int64_t epoch, at::Generator& gen,
                      double caption_dropout) const override;
  // Every source stores its empty caption.
  bool has_empty_caption() const override;
  int buckets() const override { return buckets_.count(); }
  int bucket(int64_t index) const override;
  const LatentShape& bucket_shape(int b) const override { return buckets_.shape(b); }

  // Which source and which of its clips slot `index` holds in `epoch` (the file comment's rule).
  struct Place {
    size_t source = 0;
    int64_t clip = 0;
  };
  Place Locate(int64_t index, int64_t epoch) const;

  size_t sources() const { return sources_.size(); }
  int64_t slots(size_t source) const { return offsets_[source + 1] - offsets_[source]; }
  // "2 sources: /a (120 clips, weight 3: 75.0 % of the draws), /b (...)".
  std::string Describe() const;

 private:
  SourceMix(std::vector<Source> sources, std::vector<int64_t> slots, uint64_t seed);
  // Each source of several shapes as one source a bucket ("path [16x32x48]").
  static std::vector<Source> SplitByBucket(std::vector<Source> sources);
  size_t SourceOf(int64_t index) const;  // the source whose slots hold `index`

  std::vector<Source> sources_;
  std::vector<int64_t> offsets_;  // offsets_[i]: source i's first slot; back(): slots an epoch
  uint64_t seed_;
  ShapeBuckets buckets_;  // each source one bucket
  // Each source's permutation of its current round (c / size_i), computed on first use.
  struct Round {
    int64_t number = -1;
    std::vector<int64_t> permutation;
  };
  mutable std::mutex mu_;
  mutable std::vector<Round> rounds_;
};

// A job's training clips and, when it asks for an eval loss, its held-out clips.
struct TrainingData {
  std::shared_ptr<const LatentDataset> train;
  std::shared_ptr<const LatentDataset> eval;  // null without eval.holdout_clips or eval.path
  std::string description;                    // a mix's Describe(); empty otherwise
};
// Opens `spec.data` (and `eval.path`) for a model with `channels` latent channels and text
// width `text_dim`. Errors name the field; `*spec_error` says whether the spec asks what the
// data cannot give (the hold-out leaves no clip to train on, the sources or the eval cache
// disagree on shape) rather than the data being missing or unreadable.
Result<TrainingData> OpenTrainingData(const JobSpec& spec, int64_t channels, int64_t text_dim,
                                      bool* spec_error);

}  // namespace adctl
