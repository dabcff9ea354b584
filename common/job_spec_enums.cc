// The job spec's enums (common/job_spec.h) by name: the spelling a spec, the store, the API
// and docs/job-spec.md use for each value. The first name of a value is the one emitted; later
// ones are older spellings still read. A new enum value is one entry here.
#include <vector>

#include "common/job_spec.h"

namespace adctl {

#define ADCTL_SPEC_ENUM_TABLE(Enum, ...)                                \
  const std::vector<SpecEnumName<Enum>>& SpecEnumNames(Enum) {          \
    static const std::vector<SpecEnumName<Enum>> table = {__VA_ARGS__}; \
    return table;                                                       \
  }

ADCTL_SPEC_ENUM_TABLE(JobKind, {JobKind::kTrain, "train"}, {JobKind::kPreprocess, "preprocess"})
ADCTL_SPEC_ENUM_TABLE(ModelPreset, {ModelPreset::kNone, ""}, {ModelPreset::kTiny, "tiny"},
                      {ModelPreset::kSd15, "sd15"})
ADCTL_SPEC_ENUM_TABLE(PresetLayout, {PresetLayout::kV1, "v1"}, {PresetLayout::kV2, "v2"},
                      {PresetLayout::kV3, "v3"})
ADCTL_SPEC_ENUM_TABLE(MotionNorm, {MotionNorm::kAuto, "auto"},
                      {MotionNorm::kAcrossFrames, "across_frames"},
                      {MotionNorm::kPerFrame, "per_frame"})
ADCTL_SPEC_ENUM_TABLE(DataKind, {DataKind::kSynthetic, "synthetic"},
                      {DataKind::kLatents, "latents"}, {DataKind::kVideo, "video"})
ADCTL_SPEC_ENUM_TABLE(CacheDtype, {CacheDtype::kBf16, "bf16"}, {CacheDtype::kFp16, "fp16"})
ADCTL_SPEC_ENUM_TABLE(LrSchedule, {LrSchedule::kConstant, "constant"},
                      {LrSchedule::kCosine, "cosine"})
ADCTL_SPEC_ENUM_TABLE(Precision, {Precision::kAuto, "auto"}, {Precision::kFp32, "fp32"},
                      {Precision::kBf16, "bf16"})
ADCTL_SPEC_ENUM_TABLE(AttentionKernel, {AttentionKernel::kAuto, "auto"},
                      {AttentionKernel::kFlash, "flash"},
                      {AttentionKernel::kEfficient, "efficient"},
                      {AttentionKernel::kCudnn, "cudnn"}, {AttentionKernel::kMath, "math"})
ADCTL_SPEC_ENUM_TABLE(BetaSchedule, {BetaSchedule::kLinear, "linear"},
                      {BetaSchedule::kScaledLinear, "scaled_linear"},
                      {BetaSchedule::kPretrained, "pretrained"})
ADCTL_SPEC_ENUM_TABLE(PredictionType, {PredictionType::kEpsilon, "epsilon"},
                      {PredictionType::kVPrediction, "v_prediction"})
ADCTL_SPEC_ENUM_TABLE(BucketDtype, {BucketDtype::kFp32, "fp32"}, {BucketDtype::kBf16, "bf16"})
// "false" / "true": the boolean this field was before it named a granularity.
ADCTL_SPEC_ENUM_TABLE(GradientCheckpointing, {GradientCheckpointing::kNone, "none"},
                      {GradientCheckpointing::kResnets, "resnets"},
                      {GradientCheckpointing::kFull, "full"},
                      {GradientCheckpointing::kNone, "false"},
                      {GradientCheckpointing::kFull, "true"})
ADCTL_SPEC_ENUM_TABLE(LoraScope, {LoraScope::kMotion, "motion"}, {LoraScope::kSpatial, "spatial"},
                      {LoraScope::kBoth, "both"})
ADCTL_SPEC_ENUM_TABLE(LauncherKind, {LauncherKind::kDefault, ""}, {LauncherKind::kLocal, "local"},
                      {LauncherKind::kSlurm, "slurm"})
ADCTL_SPEC_ENUM_TABLE(WindowPlacement, {WindowPlacement::kRandom, "random"},
                      {WindowPlacement::kUniform, "uniform"})
ADCTL_SPEC_ENUM_TABLE(EmaDevice, {EmaDevice::kGpu, "gpu"}, {EmaDevice::kCpu, "cpu"})
ADCTL_SPEC_ENUM_TABLE(NanPolicy, {NanPolicy::kFail, "fail"}, {NanPolicy::kRollback, "rollback"})
ADCTL_SPEC_ENUM_TABLE(KeepBestMetric, {KeepBestMetric::kEvalLoss, "eval_loss"})
ADCTL_SPEC_ENUM_TABLE(TimestepSpacing, {TimestepSpacing::kLeading, "leading"},
                      {TimestepSpacing::kTrailing, "trailing"},
                      {TimestepSpacing::kLinspace, "linspace"})
ADCTL_SPEC_ENUM_TABLE(WeightsSource, {WeightsSource::kRaw, "raw"}, {WeightsSource::kEma, "ema"})

#undef ADCTL_SPEC_ENUM_TABLE

}  // namespace adctl
