// Fuzz target: a run folder's events.jsonl as the GUI follows it (ui::EventTail::poll into a
// ui::RunSeries, the chart data of the Live and Compare pages). The input is written in two parts
// with a poll after each, as a worker appending while the GUI polls would leave it: the first
// poll may see half a line. Then the file is replaced by a shorter one (a run folder reused) and
// polled again.
//
// Seeds: the events of a short run, every type and field of the README's events.jsonl table.
#include <cstdint>

#include "EventTail.h"
#include "RunSeries.h"
#include "fuzz-util.h"

using namespace spillway;

namespace {

const char* kRun =
    R"({"type":"state","t":0.0,"state":"training","run_id":"20260101-120000-abcd","total_steps":200,"step":0,"parameters":260000,"device":0}
{"type":"plan","t":0.01,"fits":true,"step_s":0.05,"tokens_per_s":20000,"bottleneck":"compute","tiers":{"hbm":{"weights_bytes":1000},"dram":{"master_bytes":1040000}},"suggestion":{"fits":true,"micro_batch_size":8,"grad_accum":1}}
{"type":"eval","t":0.2,"step":0,"loss":6.2,"perplexity":492.7,"eval_s":0.1}
{"type":"sample","t":0.3,"interval_s":0.1,"rss_bytes":52428800,"tiers":{"hbm":{"weights_bytes":2048,"gradients_bytes":1024,"checkpoints_bytes":4096,"workspace_bytes":512,"used_bytes":7680,"capacity_bytes":0},"dram":{"master_bytes":1040000,"optimizer_bytes":2080000,"total_bytes":25000000000,"available_bytes":20000000000,"used_bytes":3120000,"capacity_bytes":0},"ssd":{"optimizer_bytes":0,"free_bytes":80000000000,"total_bytes":250000000000}},"links":{"h2d_gbps":1.5,"d2h_gbps":0.7,"ssd_read_gbps":0,"ssd_write_gbps":0,"h2d_bytes":1000000,"d2h_bytes":500000},"disk":{"device":"vda","read_gbps":0.01,"write_gbps":0.02},"gpu_util_pct":97,"gpu_mem_used_bytes":81000000000,"gpu_mem_total_bytes":85000000000,"pcie_tx_gbps":20.5,"pcie_rx_gbps":25.1,"gpu_power_w":650,"gpu_temp_c":61}
{"type":"span","t":0.35,"block":"layer","layer":3,"phase":"forward","start_s":0.31,"end_s":0.34}
{"type":"span","t":0.35,"block":"head","layer":null,"phase":"backward","start_s":0.34,"end_s":0.35}
{"type":"span","t":0.36,"block":"step","layer":null,"phase":"compute","start_s":0.3,"end_s":0.36}
{"type":"step","t":0.4,"step":1,"total_steps":200,"loss":6.1,"lr":0.0003,"grad_norm":2.5,"tokens":1024,"tokens_per_s":2560,"model_tflops":0.004,"step_s":0.4,"ssd_read_bytes":0,"ssd_write_bytes":0}
{"type":"log","t":0.5,"level":"info","message":"backend cpu: no GPU"}
{"type":"checkpoint","t":1.0,"step":100,"path":"/tmp/run/checkpoints/step-000100","bytes":3200000,"write_s":0.02}
{"type":"error","t":1.1,"code":"io","message":"cannot write: No space left on device"}
{"type":"export","t":1.2,"path":"/tmp/run/export","tokenizer":true}
{"type":"state","t":1.3,"state":"completed","step":200,"eval_loss":2.1}
)";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::add_seed("run", kRun);
  fuzz::add_seed("half-line", std::string(kRun).substr(0, 700));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::fresh_dir("run");
  const std::string path = dir + "/events.jsonl";
  const size_t half = size / 2;
  fuzz::write_input(dir, "events.jsonl", data, half);
  ui::RunSeries series;
  ui::EventTail tail(QString::fromStdString(dir));
  tail.poll(series);
  fuzz::write_input(dir, "events.jsonl", data, size);
  tail.poll(series);
  fuzz::write_input(dir, "events.jsonl", data, size / 3);
  tail.poll(series);
  return 0;
}
