// Checkpoints of a run whose host state is sharded across machines (block-owners.h;
// docs/architecture.md, "Past one machine"): each machine writes the blocks it holds into the one
// checkpoint folder, which every machine must see (the job's run folder on a shared filesystem,
// as torch.distributed.checkpoint and DeepSpeed expect of theirs), and process 0 binds the parts
// with indexes and the manifest. The folder is save_checkpoint's format: it resumes on any number
// of machines or GPUs (load_checkpoint reads each held block by name through the indexes) and
// loads as a model.
//
// Every process calls these at the same point; they agree in rounds of the process group
// (compute::ProcessExchange), so that an error on any process fails the call on every one, with
// the same message, and nothing of the folder is left.
#pragma once

#include <string>

#include "compute/communicator.h"
#include "train/checkpoint.h"

namespace spillway {

// How long a process waits for the others at a round of a checkpoint written together: the
// slowest machine's part of a 70B state on a network filesystem.
inline constexpr double kCheckpointRoundTimeoutS = 3600;

// Whether every process sees process 0's folder `dir` (created there when missing): process 0
// writes a marker file into it and every other looks for it under the same path, then it is
// removed. kInvalidArgument naming the processes that do not see it and what to do. The
// others' `dir` is not used.
Status check_shared_folder(const std::string& dir, compute::ProcessExchange& processes);

// save_checkpoint with each process's part of the state: the weights of the blocks it holds as
// `model-m<P>-<i>.safetensors` (P its process, a new file above 5 GiB), their moments as
// `optimizer-m<P>.safetensors`, into process 0's `checkpoints_dir/step-N` (the others' argument
// is not used), and from process 0 model.safetensors.index.json, optimizer.safetensors.index.json,
// trainer_state.json, config.json and the manifest, last. Returns the folder on every process,
// or the first error of any process (naming it), as save_checkpoint's.
Result<std::string> save_checkpoint_parts(const std::string& checkpoints_dir,
                                          const ModelState& model, const TrainerState& trainer,
                                          OptimizerStateStore* state,
                                          compute::ProcessExchange& processes);

}  // namespace spillway
