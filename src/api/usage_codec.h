// The store's encoding of a usage record (core/usage_record.h): one compact
// JSON object, integers throughout (times in microseconds), the activity
// histogram as its 21 bucket counts. Decoding names the field that is wrong.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "core/usage_record.h"

namespace rota::api {

std::string EncodeUsage(const UsageRecord& record);
StatusOr<UsageRecord> DecodeUsage(std::string_view text);

}  // namespace rota::api
