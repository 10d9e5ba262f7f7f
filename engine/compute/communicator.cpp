#include "compute/communicator.h"

#include <set>
#include <string>

#include "compute/backend.h"

namespace spillway::compute {

Result<std::vector<std::unique_ptr<Communicator>>> Backend::create_communicators(
    std::span<Backend* const>, ProcessExchange*) {
  return unsupported("the " + name() + " backend cannot form a group of devices");
}

Result<std::vector<std::unique_ptr<Communicator>>> make_communicators(
    std::span<Backend* const> group, ProcessExchange* processes) {
  if (group.empty()) return invalid_argument("make_communicators: an empty group");
  std::set<const Device*> devices;
  std::set<int> ordinals;
  for (Backend* b : group) {
    if (!b) return invalid_argument("make_communicators: a null backend");
    if (b->kind() != group[0]->kind())
      return unsupported("a group of devices must be of one kind: " + group[0]->name() + " and " +
                         b->name());
    if (!devices.insert(&b->device()).second ||
        (b->facts().gpu && !ordinals.insert(b->device().ordinal()).second))
      return unsupported("device " + b->name() + ":" + std::to_string(b->device().ordinal()) +
                         " is in the group twice");
  }
  SPW_ASSIGN_OR_RETURN(auto comms, group[0]->create_communicators(group, processes));
  if (comms.size() != group.size())
    return internal_error("create_communicators made " + std::to_string(comms.size()) +
                          " communicators for a group of " + std::to_string(group.size()));
  return comms;
}

}  // namespace spillway::compute
