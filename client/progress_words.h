// What a job's progress lines say, one place for both runners: a
// classifier's accuracy and samples/s; a language model's validation loss,
// perplexity, bits per byte and tokens/s (every token is one of its
// "samples": the loss counts predictions).
#pragma once

#include <string>

#include "petra/v1/coordinator.pb.h"
#include "petra/v1/job.pb.h"

namespace petra::client {

bool IsLanguageModelJob(const petra::v1::JobSpec& spec);

// The validation bits per byte of `p` (test_bits_per_byte; from a runner
// that predates it, test_loss over a byte a token, the bytes tokenizer's):
// what compares tokenizers.
double BitsPerByte(const petra::v1::Progress& p);

// "samples/s" or "tokens/s".
const char* RateUnit(bool language_model);

// An epoch's figures: "train loss 0.5123, train acc 81.20%, test acc
// 80.10%, 950 samples/s"; a language model's "train loss 1.2345, valid
// loss 1.3001 (perplexity 3.67, 1.876 bits/byte), 14000 tokens/s".
std::string EpochFigures(const petra::v1::Progress& p, bool language_model);

// Where a point of the run is: "epoch 2/3", or for an evaluation inside
// the epoch "epoch 2/3, step 130".
std::string PointName(const petra::v1::Progress& p);

// The run's result: "test accuracy 80.10%", or "validation 1.876 bits per
// byte (loss 1.3001, perplexity 3.67)".
std::string ResultFigures(const petra::v1::Progress& p, bool language_model);

}  // namespace petra::client
