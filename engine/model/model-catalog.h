// Model catalog: the model folders a user already has — the Hugging Face hub cache that
// transformers and huggingface-cli download into. What New run lists and `spillway-worker models`
// prints.
//
// The hub cache (huggingface_hub's layout, https://huggingface.co/docs/huggingface_hub/guides/
// manage-cache): HUB/models--ORG--NAME/{refs/main, snapshots/REVISION/...}; `refs/main` holds the
// revision the repository's main branch pointed to at download. HUB is $HF_HUB_CACHE, else
// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub
// (huggingface_hub's constants.py, in that order; $HUGGINGFACE_HUB_CACHE, its older name, after
// $HF_HUB_CACHE).
//
// Pure functions over the file system; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace spillway {

// The hub cache folder by the rules above ("" when neither a variable nor HOME names one).
std::string hugging_face_hub_dir();

struct CachedModel {
  std::string repo;      // "Qwen/Qwen3-0.6B" (from models--Qwen--Qwen3-0.6B)
  std::string revision;  // the snapshot's folder name (a commit hash)
  std::string path;      // HUB/models--.../snapshots/REVISION: a folder holding config.json
};

// The model snapshots of `hub` that hold a config.json, sorted by repository: for each repository
// the snapshot refs/main names, or, without one (a download of another branch or revision),
// every snapshot. A missing or unreadable `hub` gives none. Reads folder listings only.
std::vector<CachedModel> find_cached_models(const std::string& hub);

}  // namespace spillway
