#include "events/plan.h"

#include <algorithm>

#include "events/json-fields.h"

namespace spillway {
namespace {

using nlohmann::json;
using namespace events_detail;

json tier_json(const PlanTier& t) {
  json categories = json::object();
  auto put = [&](const char* key, const std::optional<uint64_t>& v) {
    if (v) categories[key] = *v;
  };
  put("weights_bytes", t.weights_bytes);
  put("master_bytes", t.master_bytes);
  put("gradients_bytes", t.gradients_bytes);
  put("optimizer_bytes", t.optimizer_bytes);
  put("checkpoints_bytes", t.checkpoints_bytes);
  put("workspace_bytes", t.workspace_bytes);
  put("activations_bytes", t.activations_bytes);
  json j = {{"categories", categories},
            {"needed_bytes", t.needed_bytes},
            {"total_bytes", t.total_bytes},
            {"free_bytes", t.free_bytes}};
  if (t.runtime_bytes) j["runtime_bytes"] = *t.runtime_bytes;
  return j;
}

PlanTier tier_from_json(const json& j) {
  PlanTier t;
  const json& c = object(j, "categories");
  t.weights_bytes = integer<uint64_t>(c, "weights_bytes");
  t.master_bytes = integer<uint64_t>(c, "master_bytes");
  t.gradients_bytes = integer<uint64_t>(c, "gradients_bytes");
  t.optimizer_bytes = integer<uint64_t>(c, "optimizer_bytes");
  t.checkpoints_bytes = integer<uint64_t>(c, "checkpoints_bytes");
  t.workspace_bytes = integer<uint64_t>(c, "workspace_bytes");
  t.activations_bytes = integer<uint64_t>(c, "activations_bytes");
  t.needed_bytes = integer<uint64_t>(j, "needed_bytes").value_or(0);
  t.total_bytes = integer<uint64_t>(j, "total_bytes").value_or(0);
  t.free_bytes = integer<uint64_t>(j, "free_bytes").value_or(0);
  t.runtime_bytes = integer<uint64_t>(j, "runtime_bytes");
  return t;
}

// The step's fields, each once: to_json and plan_from_json walk the same list.
template <typename Step, typename F>
void for_each_step_number(Step& s, F&& f) {
  f("tokens", s.tokens);
  f("flops", s.flops);
  f("model_flops", s.model_flops);
  f("compute_s", s.compute_s);
  f("gemm_s", s.gemm_s);
  f("attention_s", s.attention_s);
  f("lm_head_s", s.lm_head_s);
  f("elementwise_s", s.elementwise_s);
  f("key_bias_s", s.key_bias_s);
  f("accumulate_s", s.accumulate_s);
  f("gpu_adamw_s", s.gpu_adamw_s);
  f("h2d_bytes", s.h2d_bytes);
  f("d2h_bytes", s.d2h_bytes);
  f("h2d_s", s.h2d_s);
  f("d2h_s", s.d2h_s);
  f("link_s", s.link_s);
  f("ssd_s", s.ssd_s);
  f("grad_norm_s", s.grad_norm_s);
  f("adamw_s", s.adamw_s);
  f("optimizer_s", s.optimizer_s);
  f("optimizer_visible_s", s.optimizer_visible_s);
  f("step_s", s.step_s);
  f("tokens_per_s", s.tokens_per_s);
  f("model_tflops", s.model_tflops);
  f("eta_s", s.eta_s);
}

template <typename Machine, typename F>
void for_each_machine_number(Machine& m, F&& f) {
  f("compute_flops", m.compute_flops);
  f("h2d_bytes_per_s", m.h2d_bytes_per_s);
  f("d2h_bytes_per_s", m.d2h_bytes_per_s);
  f("duplex_bytes_per_s", m.duplex_bytes_per_s);
  f("host_mem_bytes_per_s", m.host_mem_bytes_per_s);
  f("adamw_params_per_s", m.adamw_params_per_s);
  f("ssd_bytes_per_s", m.ssd_bytes_per_s);
  f("cpu_gemm_flops", m.cpu_gemm_flops);
  f("cpu_attention_s_per_score", m.cpu_attention_s_per_score);
  f("cpu_stream_bytes_per_s", m.cpu_stream_bytes_per_s);
  f("cpu_threads", m.cpu_threads);
  f("gpus", m.gpus);
  f("nccl_bus_bytes_per_s", m.nccl_bus_bytes_per_s);
}

}  // namespace

bool Plan::on_cpu() const {
  return backend == "cpu";
}

json to_json(const PlanSuggestion& s) {
  if (!s.fits) return {{"fits", false}, {"why", s.why}};
  json j = {{"fits", true},
            {"micro_batch_size", s.micro_batch_size},
            {"grad_accum", s.grad_accum},
            {"tokens_per_step", s.tokens_per_step},
            {"step_s", s.step_s},
            {"tokens_per_s", s.tokens_per_s},
            {"model_tflops", s.model_tflops},
            {"checkpoints_on_device", s.checkpoints_on_device},
            {"hbm_state_blocks", s.hbm_state_blocks},
            {"hbm_needed_bytes", s.hbm_needed_bytes},
            {"hbm_free_bytes", s.hbm_free_bytes},
            {"same_as_job", s.same_as_job},
            {"why", s.why}};
  if (s.device_checkpoint_layers >= 0)  // absent in older plans
    j["device_checkpoint_layers"] = s.device_checkpoint_layers;
  if (s.saved_activation_layers > 0) j["saved_activation_layers"] = s.saved_activation_layers;
  if (s.mlp_recompute_layers > 0) j["mlp_recompute_layers"] = s.mlp_recompute_layers;
  return j;
}

PlanSuggestion plan_suggestion_from_json(const json& j) {
  PlanSuggestion s;
  s.fits = boolean(j, "fits").value_or(false);
  s.why = text(j, "why").value_or("");
  s.micro_batch_size = integer<int>(j, "micro_batch_size").value_or(0);
  s.grad_accum = integer<int>(j, "grad_accum").value_or(0);
  s.tokens_per_step = integer<int64_t>(j, "tokens_per_step").value_or(0);
  s.step_s = number(j, "step_s").value_or(0);
  s.tokens_per_s = number(j, "tokens_per_s").value_or(0);
  s.model_tflops = number(j, "model_tflops").value_or(0);
  s.checkpoints_on_device = boolean(j, "checkpoints_on_device").value_or(false);
  s.hbm_state_blocks = integer<int>(j, "hbm_state_blocks").value_or(0);
  s.device_checkpoint_layers = integer<int>(j, "device_checkpoint_layers").value_or(-1);
  s.saved_activation_layers = integer<int>(j, "saved_activation_layers").value_or(0);
  s.mlp_recompute_layers = integer<int>(j, "mlp_recompute_layers").value_or(0);
  s.hbm_needed_bytes = integer<uint64_t>(j, "hbm_needed_bytes").value_or(0);
  s.hbm_free_bytes = integer<uint64_t>(j, "hbm_free_bytes").value_or(0);
  s.same_as_job = boolean(j, "same_as_job").value_or(false);
  return s;
}

json to_json(const Plan& p) {
  json step = json::object();
  for_each_step_number(p.step, [&](const char* k, const double& v) { step[k] = v; });
  step["bottleneck"] = p.step.bottleneck;
  step["total_steps"] = p.step.total_steps;
  step["calibrated"] = p.step.calibrated;
  if (p.step.data_fill != 1.0 || p.step.data_attention != 1.0) {
    step["data_fill"] = p.step.data_fill;
    step["data_attention"] = p.step.data_attention;
  }
  json machine = json::object();
  for_each_machine_number(p.machine, [&](const char* k, const double& v) { machine[k] = v; });
  machine["device"] = p.machine.device;
  if (!p.machine.attention.empty()) machine["attention"] = p.machine.attention;
  if (p.machine.network_bytes_per_s > 0)  // past one machine only
    machine["network_bytes_per_s"] = p.machine.network_bytes_per_s;
  json j = {{"fits", p.fits},
            {"reason", p.reason},
            {"backend", p.backend},
            {"micro_batch_size", p.micro_batch_size},
            {"grad_accum", p.grad_accum},
            {"seq_len", p.seq_len},
            {"checkpoints", p.checkpoints_on_device ? "device" : "host"},
            {"model",
             {{"architecture", p.model.architecture},
              {"parameters", p.model.parameters},
              {"layers", p.model.layers},
              {"hidden_size", p.model.hidden_size},
              {"vocab_size", p.model.vocab_size}}},
            {"machine", machine},
            {"tiers",
             {{"hbm", tier_json(p.hbm)}, {"dram", tier_json(p.dram)}, {"ssd", tier_json(p.ssd)}}},
            {"state",
             {{"blocks", p.state.blocks},
              {"hbm_blocks", p.state.hbm_blocks},
              {"hbm_bytes", p.state.hbm_bytes},
              {"why", p.state.why}}},
            {"devices",
             {{"count", p.devices.count},
              {"indices", p.devices.indices},
              {"nccl_s", p.devices.nccl_s},
              {"nccl_bytes", p.devices.nccl_bytes}}},
            {"step", step}};
  const PlanState& st = p.state;
  if (st.device_checkpoint_layers >= 0)  // absent in older plans
    j["state"]["device_checkpoint_layers"] = st.device_checkpoint_layers;
  if (st.saved_activation_layers > 0)
    j["state"]["saved_activation_layers"] = st.saved_activation_layers;
  if (st.mlp_recompute_layers > 0) j["state"]["mlp_recompute_layers"] = st.mlp_recompute_layers;
  if (st.dram_blocks + st.ssd_moments_blocks + st.ssd_blocks > 0) {  // absent in older plans
    j["state"]["dram_blocks"] = st.dram_blocks;
    j["state"]["ssd_moments_blocks"] = st.ssd_moments_blocks;
    j["state"]["ssd_blocks"] = st.ssd_blocks;
    j["state"]["host_why"] = st.host_why;
  }
  if (p.devices.machines > 1) {  // past one machine only
    j["devices"]["machines"] = p.devices.machines;
    j["devices"]["network_bytes"] = p.devices.network_bytes;
  }
  if (p.suggestion) j["suggestion"] = to_json(*p.suggestion);
  if (p.backend_reason) j["backend_reason"] = *p.backend_reason;
  return j;
}

Result<Plan> plan_from_json(const json& j, bool whole) {
  if (!j.is_object()) return corrupt("the plan is not a JSON object");
  if (whole && (!j.contains("fits") || !j.contains("tiers")))
    return corrupt("the plan is missing 'fits' or 'tiers'");
  Plan p;
  p.fits = boolean(j, "fits").value_or(false);
  p.reason = text(j, "reason").value_or("");
  p.backend = text(j, "backend").value_or("");
  p.backend_reason = text(j, "backend_reason");
  p.micro_batch_size = integer<int>(j, "micro_batch_size").value_or(0);
  p.grad_accum = integer<int>(j, "grad_accum").value_or(0);
  p.seq_len = integer<int>(j, "seq_len").value_or(0);
  p.checkpoints_on_device = text(j, "checkpoints").value_or("") == "device";
  const json& model = object(j, "model");
  p.model.architecture = text(model, "architecture").value_or("");
  p.model.parameters = number(model, "parameters").value_or(0);
  p.model.layers = integer<int>(model, "layers").value_or(0);
  p.model.hidden_size = integer<int>(model, "hidden_size").value_or(0);
  p.model.vocab_size = integer<int>(model, "vocab_size").value_or(0);
  const json& machine = object(j, "machine");
  for_each_machine_number(p.machine,
                          [&](const char* k, double& v) { v = number(machine, k).value_or(0); });
  p.machine.device = text(machine, "device").value_or("");
  p.machine.attention = text(machine, "attention").value_or("");
  p.machine.network_bytes_per_s = number(machine, "network_bytes_per_s").value_or(0);
  const json& tiers = object(j, "tiers");
  p.hbm = tier_from_json(object(tiers, "hbm"));
  p.dram = tier_from_json(object(tiers, "dram"));
  p.ssd = tier_from_json(object(tiers, "ssd"));
  const json& state = object(j, "state");  // absent before the HBM state tier: all in DRAM
  p.state.blocks = integer<int>(state, "blocks").value_or(0);
  p.state.hbm_blocks = integer<int>(state, "hbm_blocks").value_or(0);
  p.state.hbm_bytes = integer<uint64_t>(state, "hbm_bytes").value_or(0);
  p.state.why = text(state, "why").value_or("");
  p.state.device_checkpoint_layers = integer<int>(state, "device_checkpoint_layers").value_or(-1);
  p.state.saved_activation_layers = integer<int>(state, "saved_activation_layers").value_or(0);
  p.state.mlp_recompute_layers = integer<int>(state, "mlp_recompute_layers").value_or(0);
  p.state.dram_blocks = integer<int>(state, "dram_blocks").value_or(0);
  p.state.ssd_moments_blocks = integer<int>(state, "ssd_moments_blocks").value_or(0);
  p.state.ssd_blocks = integer<int>(state, "ssd_blocks").value_or(0);
  p.state.host_why = text(state, "host_why").value_or("");
  const json& devices = object(j, "devices");  // absent before data parallel: one GPU
  p.devices.count = std::max(1, integer<int>(devices, "count").value_or(1));
  if (const json* ix = field(devices, "indices"); ix && ix->is_array()) {
    for (const json& i : *ix) {
      if (i.is_number_integer() && i.get<int64_t>() >= 0 && i.get<int64_t>() < 1 << 16)
        p.devices.indices.push_back(static_cast<int>(i.get<int64_t>()));
    }
  }
  p.devices.nccl_s = number(devices, "nccl_s").value_or(0);
  p.devices.nccl_bytes = number(devices, "nccl_bytes").value_or(0);
  p.devices.machines = std::max(1, integer<int>(devices, "machines").value_or(1));
  p.devices.network_bytes = number(devices, "network_bytes").value_or(0);
  const json& step = object(j, "step");
  for_each_step_number(p.step, [&](const char* k, double& v) { v = number(step, k).value_or(0); });
  p.step.bottleneck = text(step, "bottleneck").value_or("");
  p.step.total_steps = integer<int64_t>(step, "total_steps").value_or(0);
  // Before the key: CPU plans counted the attention as FLOPs at the sgemm rate (uncalibrated).
  p.step.calibrated = boolean(step, "calibrated").value_or(!p.on_cpu());
  p.step.data_fill = number(step, "data_fill").value_or(1.0);
  p.step.data_attention = number(step, "data_attention").value_or(1.0);
  if (const json* s = field(j, "suggestion"); s && s->is_object())
    p.suggestion = plan_suggestion_from_json(*s);
  return p;
}

}  // namespace spillway
