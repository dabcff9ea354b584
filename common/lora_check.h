// Whether a spec's model.lora fits the model it names, checked at submit from the weights
// files' safetensors headers (Torch-free, nothing is read but the headers): every target
// matches a projection in scope, the rank is at most the narrowest one's width, and an
// `init_from` file has the spec's rank. adworker checks the same against the built model
// (worker/model/lora.cc); this lets `adctl submit` refuse a job that could only fail.
#pragma once

#include "common/job_spec.h"
#include "common/status.h"

namespace adctl {

// Ok when `m` asks for no LoRA, or when a weights file it names is not there (yet): a missing
// input is the worker's error, named there. InvalidArgument naming the field otherwise.
Status CheckLoraFitsModel(const ModelSpec& m);

// The weights file of the image UNet a spec names (model.unet_motion, model.unet2d or
// model.pretrained's unet/, in LoadUNet3D's order), "" when none is named or found: where the
// spatial adapters go, and what the memory estimate counts.
std::string UnetWeightsFile(const ModelSpec& m);

}  // namespace adctl
