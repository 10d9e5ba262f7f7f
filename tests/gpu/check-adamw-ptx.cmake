# cmake -DPTX=adamw.ptx -P check-adamw-ptx.cmake: fails, naming the instruction, unless the AdamW
# kernel's floating-point arithmetic is all IEEE round-to-nearest with subnormals kept: add, sub,
# mul (.rn.f32), div.rn.f32 and sqrt.rn.f32, and no fma, .ftz or .approx, which would give other
# bits than compute/adamw-step.h's order on the CPU.
if(NOT EXISTS "${PTX}")
  message(FATAL_ERROR "no PTX at '${PTX}': build the adamw_ptx target first")
endif()
file(READ "${PTX}" ptx)
string(REGEX MATCHALL "\t(fma|mad)[.a-z0-9]*|\t[a-z]+\\.[.a-z0-9]*(ftz|approx)[.a-z0-9]*" wrong "${ptx}")
if(wrong)
  list(REMOVE_DUPLICATES wrong)
  string(REPLACE "\t" "" wrong "${wrong}")
  message(FATAL_ERROR "${PTX}: ${wrong}: a fused, flushed or approximate operation, whose bits differ "
                      "from the CPU optimizer's (no --use_fast_math or -ftz=true for the CUDA module)")
endif()
foreach(needed "add.rn.f32" "sub.rn.f32" "mul.rn.f32" "div.rn.f32" "sqrt.rn.f32")
  string(FIND "${ptx}" "\t${needed}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${PTX}: no ${needed}: the update no longer spells each operation with its _rn intrinsic")
  endif()
endforeach()
string(REGEX MATCHALL "\t[a-z]+\\.rn\\.f32" ops "${ptx}")
list(LENGTH ops count)
message(STATUS "${PTX}: ${count} IEEE round-to-nearest f32 operations, no fma, ftz or approx")
