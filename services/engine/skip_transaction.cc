#include "services/engine/skip_transaction.h"

#include "services/engine/gradient_accumulator.h"

namespace petra::engine {

SkipTransaction::SkipTransaction(NonFiniteCheck& finite,
                                 GradientAccumulator& optimizer,
                                 int64_t* skipped)
    : finite_(finite), optimizer_(optimizer), skipped_(skipped) {
  if (finite_.skips()) optimizer_.Hold();
}

SkipTransaction::~SkipTransaction() {
  if (!finished_) optimizer_.Drop();
}

absl::StatusOr<bool> SkipTransaction::Finish(uint64_t id,
                                             model::TensorPair* input_grad,
                                             bool known_bad) {
  bool bad = known_bad;
  if (!bad) {
    absl::Status s = finite_.Check(*input_grad, id,
                                   "the gradient computed for the input", &bad);
    if (!s.ok()) return s;  // the destructor drops
  }
  finished_ = true;
  if (bad) {
    optimizer_.Drop();
    *input_grad = ZerosLike(*input_grad);
    ++*skipped_;
  } else {
    optimizer_.Commit();
  }
  return bad;
}

}  // namespace petra::engine
