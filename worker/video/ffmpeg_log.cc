#include "worker/video/ffmpeg_log.h"

extern "C" {
#include <libavutil/log.h>
}

namespace adctl {

void QuietFfmpegLogs() { av_log_set_level(AV_LOG_ERROR); }

bool HaveFfmpeg() { return true; }

}  // namespace adctl
