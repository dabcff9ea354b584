#!/usr/bin/env python3
# A safetensors file with the tensor names and shapes of AnimateDiff's v2 motion modules
# (mm_sd_v15_v2: 21 modules, 453,209,280 parameters) whose data is a sparse hole of zeros: 1.8 GB
# apparent, a few KB on disk. `adctl submit --dry-run` reads only the headers of the weights
# files a spec names, so this file lets a MotionLoRA's memory estimate be checked at the
# reference shape without the real module (bench/results/memory_estimate_h100_20261206.md).
# usage: bench/make-shape-only-motion-module.py OUT.safetensors
import json, struct, sys
out = sys.argv[1]
tensors = []
def module(prefix, C):
    t = prefix + ".temporal_transformer."
    tensors.extend([(t+"norm.weight",[C]),(t+"norm.bias",[C]),(t+"proj_in.weight",[C,C]),(t+"proj_in.bias",[C])])
    b = t + "transformer_blocks.0."
    for a in (0,1):
        for p in ("to_q","to_k","to_v"): tensors.append((f"{b}attention_blocks.{a}.{p}.weight",[C,C]))
        tensors.append((f"{b}attention_blocks.{a}.to_out.0.weight",[C,C])); tensors.append((f"{b}attention_blocks.{a}.to_out.0.bias",[C]))
        tensors.append((f"{b}norms.{a}.weight",[C])); tensors.append((f"{b}norms.{a}.bias",[C]))
    tensors.extend([(b+"ff.net.0.proj.weight",[8*C,C]),(b+"ff.net.0.proj.bias",[8*C]),(b+"ff.net.2.weight",[C,4*C]),(b+"ff.net.2.bias",[C]),(b+"ff_norm.weight",[C]),(b+"ff_norm.bias",[C])])
    tensors.extend([(t+"proj_out.weight",[C,C]),(t+"proj_out.bias",[C])])
ch=[320,640,1280,1280]
for i,C in enumerate(ch):
    for j in range(2): module(f"down_blocks.{i}.motion_modules.{j}", C)
for i,C in enumerate(reversed(ch)):
    for j in range(3): module(f"up_blocks.{i}.motion_modules.{j}", C)
module("mid_block.motion_modules.0", 1280)
header={}; off=0; n=0
for name,shape in tensors:
    e=1
    for d in shape: e*=d
    n+=e
    header[name]={"dtype":"F32","shape":shape,"data_offsets":[off,off+4*e]}; off+=4*e
h=json.dumps(header).encode(); h+=b" "*((8-len(h)%8)%8)
with open(out,"wb") as f:
    f.write(struct.pack("<Q",len(h))); f.write(h); f.truncate(8+len(h)+off)
print(n, "parameters")
