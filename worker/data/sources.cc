#include "worker/data/sources.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "worker/data/sampler.h"

namespace adctl {

bool SameShape(const LatentShape& a, const LatentShape& b) {
  return SameChannelsAndText(a, b) && a.frames == b.frames && a.height == b.height &&
         a.width == b.width;
}

bool SameChannelsAndText(const LatentShape& a, const LatentShape& b) {
  return a.channels == b.channels && a.text_len == b.text_len && a.text_dim == b.text_dim;
}

size_t ShapeBuckets::Add(const LatentDataset& d) {
  std::vector<int> numbers;
  for (int b = 0; b < d.buckets(); ++b) {
    const LatentShape& s = d.bucket_shape(b);
    const auto it = std::find_if(shapes_.begin(), shapes_.end(),
                                 [&](const LatentShape& known) { return SameShape(known, s); });
    numbers.push_back(static_cast<int>(it - shapes_.begin()));
    if (it == shapes_.end()) shapes_.push_back(s);
  }
  map_.push_back(std::move(numbers));
  return map_.size() - 1;
}

HoldoutSplit SplitHoldout(int64_t dataset_size, int64_t count, uint64_t seed) {
  HoldoutSplit split;
  if (count <= 0 || dataset_size <= 0) {
    for (int64_t i = 0; i < dataset_size; ++i) split.train.push_back(i);
    return split;
  }
  // The first `count` of the sampler's seeded permutation: the same clips on every machine.
  DistributedSampler draw(dataset_size, /*rank=*/0, /*world_size=*/1, seed);
  split.eval = draw.Next(std::min(count, dataset_size));
  std::sort(split.eval.begin(), split.eval.end());
  for (int64_t i = 0, e = 0; i < dataset_size; ++i) {
    if (e < static_cast<int64_t>(split.eval.size()) && split.eval[e] == i) {
      ++e;
    } else {
      split.train.push_back(i);
    }
  }
  return split;
}

std::vector<int64_t> SplitByWeight(int64_t total, const std::vector<double>& weights) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> parts(weights.size(), 0);
  if (weights.empty() || sum <= 0) return parts;
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double exact = static_cast<double>(total) * weights[i] / sum;
    parts[i] = static_cast<int64_t>(exact);
    given += parts[i];
    remainders.emplace_back(exact - static_cast<double>(parts[i]), i);
  }
  // The largest remainders get the rest; equal ones go to the earlier entry.
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < total && k < remainders.size(); ++k, ++given) {
    ++parts[remainders[k].second];
  }
  return parts;
}

// ---- ConcatDataset ---------------------------------------------------------------------------

ConcatDataset::ConcatDataset(std::vector<std::shared_ptr<const LatentDataset>> parts)
    : parts_(std::move(parts)), offsets_{0} {
  for (const auto& p : parts_) {
    offsets_.push_back(offsets_.back() + p->size());
    buckets_.Add(*p);
  }
}

int ConcatDataset::bucket(int64_t index) const {
  const size_t p = Part(index);
  return buckets_.map()[p][static_cast<size_t>(parts_[p]->bucket(index - offsets_[p]))];
}

size_t ConcatDataset::Part(int64_t index) const {
  return static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), index) -
                             offsets_.begin() - 1);
}

LatentSample ConcatDataset::Get(int64_t index) const {
  const size_t p = Part(index);
  return parts_[p]->Get(index - offsets_[p]);
}

LatentSample ConcatDataset::Draw(int64_t index, at::Generator& gen, double caption_dropout) const {
  const size_t p = Part(index);
  return parts_[p]->Draw(index - offsets_[p], gen, caption_dropout);
}

bool ConcatDataset::has_empty_caption() const {
  return std::all_of(parts_.begin(), parts_.end(),
                     [](const auto& p) { return p->has_empty_caption(); });
}

// ---- SourceMix -------------------------------------------------------------------------------

namespace {

// The clips of one shape bucket of a dataset, as a dataset of that one shape.
class BucketPart : public SubsetDataset {
 public:
  BucketPart(std::shared_ptr<const LatentDataset> base, int bucket, std::vector<int64_t> indices)
      : SubsetDataset(base, std::move(indices)), shape_(base->bucket_shape(bucket)) {}
  const LatentShape& shape() const override { return shape_; }
  int buckets() const override { return 1; }
  int bucket(int64_t index) const override {
    (void)index;
    return 0;
  }
  const LatentShape& bucket_shape(int b) const override {
    (void)b;
    return shape_;
  }

 private:
  LatentShape shape_;
};

}  // namespace

std::vector<SourceMix::Source> SourceMix::SplitByBucket(std::vector<Source> sources) {
  std::vector<Source> out;
  for (Source& s : sources) {
    const int buckets = s.clips->buckets();
    if (buckets <= 1) {
      out.push_back(std::move(s));
      continue;
    }
    std::vector<std::vector<int64_t>> members(static_cast<size_t>(buckets));
    for (int64_t k = 0; k < s.clips->size(); ++k) {
      members[static_cast<size_t>(s.clips->bucket(k))].push_back(k);
    }
    const double size = static_cast<double>(s.clips->size());
    for (int b = 0; b < buckets; ++b) {
      std::vector<int64_t>& clips = members[static_cast<size_t>(b)];
      if (clips.empty()) continue;
      const double share = static_cast<double>(clips.size()) / size;
      Source part;
      part.name = s.name + " [" + BucketName(s.clips->bucket_shape(b)) + "]";
      part.weight = s.weight * share;
      part.repeats = s.repeats;
      part.clips = std::make_shared<BucketPart>(s.clips, b, std::move(clips));
      out.push_back(std::move(part));
    }
  }
  return out;
}

Result<std::unique_ptr<SourceMix>> SourceMix::Create(std::vector<Source> sources, uint64_t seed) {
  if (sources.empty()) return InvalidArgument("data.sources: no source");
  const LatentShape& first = sources.front().clips->shape();
  for (size_t i = 0; i < sources.size(); ++i) {
    const LatentShape& s = sources[i].clips->shape();
    if (!SameChannelsAndText(s, first)) {
      return InvalidArgument("data.sources[" + std::to_string(i) + "]: " + sources[i].name +
                             " holds clips of " + s.ToString() + ", data.sources[0] (" +
                             sources[0].name + ") " + first.ToString() +
                             ": the sources of a mix must agree on latent channels and text "
                             "states (frames and latent size may differ: shape buckets)");
    }
    if (sources[i].clips->size() == 0) {
      return InvalidArgument("data.sources[" + std::to_string(i) + "]: " + sources[i].name +
                             " has no clip to train on");
    }
  }
  sources = SplitByBucket(std::move(sources));
  std::vector<int64_t> slots;
  if (sources.front().weight > 0) {
    int64_t clips = 0;
    std::vector<double> weights;
    for (const Source& s : sources) {
      clips += s.clips->size();
      weights.push_back(s.weight);
    }
    slots = SplitByWeight(std::max(clips, kMinWeightedSlots), weights);
    for (int64_t& n : slots) n = std::max<int64_t>(n, 1);  // every source is drawn each epoch
  } else {
    for (const Source& s : sources)
      slots.push_back(std::max<int64_t>(s.repeats, 1) * s.clips->size());
  }
  return std::unique_ptr<SourceMix>(new SourceMix(std::move(sources), std::move(slots), seed));
}

SourceMix::SourceMix(std::vector<Source> sources, std::vector<int64_t> slots, uint64_t seed)
    : sources_(std::move(sources)), offsets_{0}, seed_(seed), rounds_(sources_.size()) {
  for (int64_t n : slots) offsets_.push_back(offsets_.back() + n);
  for (const Source& s : sources_) buckets_.Add(*s.clips);
}

size_t SourceMix::SourceOf(int64_t index) const {
  return static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), index) -
                             offsets_.begin() - 1);
}

int SourceMix::bucket(int64_t index) const { return buckets_.map()[SourceOf(index)].front(); }

SourceMix::Place SourceMix::Locate(int64_t index, int64_t epoch) const {
  const size_t source = SourceOf(index);
  const int64_t clips = sources_[source].clips->size();
  // The source's c-th draw over the run: its slots of earlier epochs, then this one's.
  const int64_t c = epoch * slots(source) + (index - offsets_[source]);
  const int64_t round = c / clips;
  std::lock_guard<std::mutex> lock(mu_);
  Round& r = rounds_[source];
  if (r.number != round) {
    // One stream per source, apart from the sampler's (seed_ itself) and from each other.
    r.permutation = SeededPermutation(clips, seed_ ^ (0x9E3779B97F4A7C15ull * (source + 1)), round);
    r.number = round;
  }
  return {source, r.permutation[static_cast<size_t>(c % clips)]};
}

LatentSample SourceMix::Get(int64_t index) const {
  const Place p = Locate(index, 0);
  return sources_[p.source].clips->Get(p.clip);
}

LatentSample SourceMix::DrawAt(int64_t index, int64_t epoch, at::Generator& gen,
                               double caption_dropout) const {
  const Place p = Locate(index, epoch);
  return sources_[p.source].clips->Draw(p.clip, gen, caption_dropout);
}

bool SourceMix::has_empty_caption() const {
  return std::all_of(sources_.begin(), sources_.end(),
                     [](const Source& s) { return s.clips->has_empty_caption(); });
}

std::string SourceMix::Describe() const {
  std::string out = std::to_string(sources_.size()) + " sources mixed, " + std::to_string(size()) +
                    " draws an epoch:";
  for (size_t i = 0; i < sources_.size(); ++i) {
    const Source& s = sources_[i];
    char share[128];
    if (s.weight > 0) {
      std::snprintf(share, sizeof(share), "weight %g: %.1f %% of the draws", s.weight,
                    100.0 * static_cast<double>(slots(i)) / static_cast<double>(size()));
    } else {
      std::snprintf(share, sizeof(share), "repeats %lld: %.1f %% of the draws",
                    static_cast<long long>(std::max<int64_t>(s.repeats, 1)),
                    100.0 * static_cast<double>(slots(i)) / static_cast<double>(size()));
    }
    const std::string of =
        buckets_.count() > 1 ? " of " + BucketName(s.clips->shape()) : std::string();
    out += std::string(i ? ";" : "") + " " + s.name + " (" + std::to_string(s.clips->size()) +
           " clips" + of + ", " + share + ")";
  }
  return out;
}

// ---- OpenTrainingData ------------------------------------------------------------------------

Result<TrainingData> OpenTrainingData(const JobSpec& spec, int64_t channels, int64_t text_dim,
                                      bool* spec_error) {
  *spec_error = false;
  const DataSpec& data = spec.data;
  const EvalSpec& eval = spec.eval;
  // The sources, each with its field name for messages: data.path's one, or data.sources'.
  std::vector<std::shared_ptr<const LatentDataset>> opened;
  std::vector<std::string> fields;
  if (data.sources.empty()) {
    auto one = OpenLatentDataset(data, channels, text_dim);
    if (!one.ok()) return one.status();
    opened.emplace_back(std::move(*one));
    fields.emplace_back(data.kind == DataKind::kLatents ? "data.path" : "data");
  } else {
    for (size_t i = 0; i < data.sources.size(); ++i) {
      DataSpec one = data;
      one.path = data.sources[i].path;
      one.sources.clear();
      fields.push_back("data.sources[" + std::to_string(i) + "]");
      auto dataset = OpenLatentDataset(one, channels, text_dim, fields.back());
      if (!dataset.ok()) return dataset.status();
      opened.emplace_back(std::move(*dataset));
    }
  }

  // The hold-out: from every source in proportion to its clips.
  TrainingData out;
  std::vector<std::shared_ptr<const LatentDataset>> train = opened, held;
  if (eval.holdout_clips > 0) {
    int64_t total = 0;
    std::vector<double> sizes;
    for (const auto& d : opened) {
      total += d->size();
      sizes.push_back(static_cast<double>(d->size()));
    }
    if (eval.holdout_clips >= total) {
      *spec_error = true;
      return InvalidArgument("eval.holdout_clips: " + std::to_string(eval.holdout_clips) +
                             " leaves none of the dataset's " + std::to_string(total) +
                             " clips to train on");
    }
    const std::vector<int64_t> counts = SplitByWeight(eval.holdout_clips, sizes);
    for (size_t i = 0; i < opened.size(); ++i) {
      if (counts[i] >= opened[i]->size()) {
        *spec_error = true;
        return InvalidArgument("eval.holdout_clips: " + std::to_string(eval.holdout_clips) +
                               " takes all " + std::to_string(opened[i]->size()) + " clips of " +
                               fields[i] +
                               " (the hold-out comes from every source in "
                               "proportion to its clips)");
      }
      // Source 0 keeps the one-cache rule (eval.seed itself); later sources their own draws.
      const HoldoutSplit split =
          SplitHoldout(opened[i]->size(), counts[i], static_cast<uint64_t>(eval.seed) + i);
      train[i] = std::make_shared<SubsetDataset>(opened[i], split.train);
      if (!split.eval.empty())
        held.push_back(std::make_shared<SubsetDataset>(opened[i], split.eval));
    }
    out.eval = held.size() == 1 ? held.front() : std::make_shared<ConcatDataset>(held);
  }

  if (data.sources.empty()) {
    out.train = train.front();
  } else {
    std::vector<SourceMix::Source> sources;
    for (size_t i = 0; i < train.size(); ++i) {
      sources.push_back(
          {train[i], data.sources[i].path, data.sources[i].weight, data.sources[i].repeats});
    }
    auto mix = SourceMix::Create(std::move(sources), static_cast<uint64_t>(spec.train.seed));
    if (!mix.ok()) {
      *spec_error = true;
      return mix.status();
    }
    out.description = (*mix)->Describe();
    out.train = std::move(*mix);
  }

  if (eval.holdout_clips == 0 && !eval.path.empty()) {
    DataSpec clips = data;
    clips.kind = DataKind::kLatents;
    clips.path = eval.path;
    clips.sources.clear();
    auto opened_eval = OpenLatentDataset(clips, channels, text_dim, "eval.path");
    if (!opened_eval.ok()) return opened_eval.status();
    out.eval = std::move(*opened_eval);
    const LatentShape& a = out.train->shape();
    const LatentShape& b = out.eval->shape();
    if (!SameChannelsAndText(a, b)) {
      *spec_error = true;
      return InvalidArgument("eval.path: its clips are " + b.ToString() + ", the training data's " +
                             a.ToString() + " (latent channels and text states must agree)");
    }
  }
  return out;
}

}  // namespace adctl
