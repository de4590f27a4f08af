// cp_async on targets that have no asynchronous copy (cpp, amdgpu): each copy runs at once as a
// load and a store of its bytes, and commits and waits vanish. A program that waits and then
// passes a barrier before it reads the copied data (as it must for PTX) sees the same data.
#include "loom/ir/builder.h"
#include "loom/ir/passes/passes.h"

namespace loom::ir {

bool lower_async_copies(Kernel& kernel) {
  bool changed = false;
  Builder b(kernel);
  std::vector<Block*> work = {&kernel.body};
  while (!work.empty()) {
    Block* blk = work.back();
    work.pop_back();
    std::vector<Inst*> out;
    for (Inst* i : blk->insts) {
      for (Block& r : i->regions) work.push_back(&r);
      if (i->op == Op::kCpAsyncCommit || i->op == Op::kCpAsyncWait) {
        changed = true;
        continue;
      }
      if (i->op != Op::kCpAsync) {
        out.push_back(i);
        continue;
      }
      Value* dst = i->operands[0];
      Value* src = i->operands[2];
      const int lanes = static_cast<int>(i->imm) / dst->type.elem_bytes();
      const Type t = lanes == 1 ? Type::scalar(dst->type.elem()) : Type::vector(dst->type.elem(), lanes);
      Block tmp;
      b.set_insertion_block(&tmp);
      Value* v = b.load(src, i->operands[3], t, static_cast<int>(i->imm));
      b.store(dst, i->operands[1], v, static_cast<int>(i->imm));
      for (Inst* n : tmp.insts) n->loc = i->loc;
      out.insert(out.end(), tmp.insts.begin(), tmp.insts.end());
      changed = true;
    }
    blk->insts = std::move(out);
  }
  return changed;
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
