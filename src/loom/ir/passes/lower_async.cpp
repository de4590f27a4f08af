// cp_async on targets that have no asynchronous copy (cpp, amdgpu): each copy runs at once as a
// load and a store of its bytes, and commits and waits vanish. A program that waits and then
// passes a barrier before it reads the copied data (as it must for PTX) sees the same data.
#include "loom/ir/builder.h"
#include "loom/ir/passes/passes.h"
#include "loom/ir/passes/rewrite.h"

namespace loom::ir {

bool lower_async_copies(Kernel& kernel) {
  Builder b(kernel);
  return passes::rewrite_blocks(kernel, [&](Inst* i, std::vector<Inst*>& out) {
    if (i->op == Op::kCpAsyncCommit || i->op == Op::kCpAsyncWait) return true;  // nothing to wait for
    if (i->op != Op::kCpAsync) {
      out.push_back(i);
      return false;
    }
    Value* dst = i->operands[0];
    const int lanes = static_cast<int>(i->imm) / dst->type.elem_bytes();
    const Type t = lanes == 1 ? Type::scalar(dst->type.elem()) : Type::vector(dst->type.elem(), lanes);
    Block tmp;
    b.set_insertion_block(&tmp);
    b.store(dst, i->operands[1], b.load(i->operands[2], i->operands[3], t, static_cast<int>(i->imm)), static_cast<int>(i->imm));
    for (Inst* n : tmp.insts) n->loc = i->loc;
    out.insert(out.end(), tmp.insts.begin(), tmp.insts.end());
    return true;
  });
}

const Module& without_async_copies(const Module& module, Module& storage) {
  bool any = false;
  for (const auto& k : module.kernels)
    walk(k->body, [&](const Inst* i) {
      any |= i->op == Op::kCpAsync || i->op == Op::kCpAsyncCommit || i->op == Op::kCpAsyncWait;
    });
  if (!any) return module;
  storage = clone_module(module);
  for (auto& k : storage.kernels) lower_async_copies(*k);
  return storage;
}

}  // namespace loom::ir
