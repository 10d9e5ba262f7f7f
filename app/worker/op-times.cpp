#include "worker/op-times.h"

#include <map>

namespace spillway::worker {

const char* op_family_name(OpFamily f) {
  static constexpr std::array<const char*, static_cast<size_t>(OpFamily::kCount)> kNames = {
      "gemm_forward",
      "gemm_backward",
      "attention_forward",
      "attention_backward",
      "attention_key_bias",
      "lm_head_loss",
      "rmsnorm",
      "rope",
      "mlp_activation",
      "add",
      "embedding",
      "fill_zero",
      "sum_squares",
      "adamw",
      "convert"};
  return kNames[static_cast<size_t>(f)];
}

bool op_family_counts_flops(OpFamily f) {
  return f <= OpFamily::kLmHead;
}

Status OpTimes::run(OpFamily family, const OpWork& work, const std::string& shape,
                    compute::StreamId stream, const std::function<Status()>& op) {
  if (!enabled_) return op();
  const size_t i = calls_.size();
  if (i == starts_.size()) {
    SPW_ASSIGN_OR_RETURN(compute::Event start, dev_.create_event(true));
    SPW_ASSIGN_OR_RETURN(compute::Event end, dev_.create_event(true));
    starts_.push_back(std::move(start));
    ends_.push_back(std::move(end));
  }
  SPW_RETURN_IF_ERROR(dev_.record_event(starts_[i], stream));
  SPW_RETURN_IF_ERROR(op());
  SPW_RETURN_IF_ERROR(dev_.record_event(ends_[i], stream));
  calls_.push_back({family, work, shape, stream});
  return {};
}

Status OpTimes::wait() {
  // Each stream's last call ends after its others.
  std::map<compute::StreamId, size_t> last;
  for (size_t i = 0; i < calls_.size(); ++i) last[calls_[i].stream] = i;
  for (const auto& [stream, i] : last) SPW_RETURN_IF_ERROR(dev_.synchronize_event(ends_[i]));
  return {};
}

Result<std::vector<OpFamilyTime>> OpTimes::collect() {
  std::array<OpFamilyTime, static_cast<size_t>(OpFamily::kCount)> by_family;
  for (size_t i = 0; i < calls_.size(); ++i) {
    const Call& c = calls_[i];
    SPW_ASSIGN_OR_RETURN(const double s, dev_.elapsed_s(starts_[i], ends_[i]));
    OpFamilyTime& t = by_family[static_cast<size_t>(c.family)];
    t.family = c.family;
    t.count += 1;
    t.seconds += s;
    t.flops += c.work.flops;
    t.bytes += c.work.bytes;
    t.shapes.insert(c.shape);
    t.streams.insert(c.stream);
  }
  calls_.clear();
  std::vector<OpFamilyTime> out;
  for (OpFamilyTime& t : by_family)
    if (t.count > 0) out.push_back(std::move(t));
  return out;
}

}  // namespace spillway::worker
